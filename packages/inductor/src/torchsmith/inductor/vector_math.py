"""Vectorized libm through glibc's libmvec: declaring a math function `omp declare simd` lets GCC
call its vector variant (`_ZGVdN8v_expf`, ...) inside `#pragma omp simd` loops, so exp, tanh and erf
run 8 or 16 lanes at a time. Only functions whose every x86 variant the installed libmvec exports
are declared; elsewhere (no glibc, other CPUs) the list is empty and loops call scalar libm.
"""

import ctypes
import ctypes.util
import platform
from functools import cache

# C names of the libm functions our op table uses (std::exp(float) is expf, std::exp(double) is exp).
CANDIDATES = (
    "exp", "exp2", "expm1", "log", "log2", "log10", "log1p", "sin", "cos", "tan", "asin", "acos", "atan",
    "sinh", "cosh", "tanh", "asinh", "acosh", "atanh", "erf", "erfc",
)  # fmt: skip

# Vector-variant mangling prefixes of the x86 ISAs GCC may pick (SSE4, AVX, AVX2, AVX-512), per lane count.
_FLOAT_VARIANTS = ("_ZGVbN4v_", "_ZGVcN8v_", "_ZGVdN8v_", "_ZGVeN16v_")
_DOUBLE_VARIANTS = ("_ZGVbN2v_", "_ZGVcN4v_", "_ZGVdN4v_", "_ZGVeN8v_")


@cache
def libmvec_functions() -> tuple[str, ...]:
    """The C names (`expf`, `exp`, ...) whose vector variants libmvec provides here."""
    if platform.machine() not in ("x86_64", "AMD64") or platform.system() != "Linux":
        return ()
    path = ctypes.util.find_library("mvec")
    if not path:
        return ()
    try:
        library = ctypes.CDLL(path)
    except OSError:
        return ()
    available = []
    for name in CANDIDATES:
        for c_name, variants in ((f"{name}f", _FLOAT_VARIANTS), (name, _DOUBLE_VARIANTS)):
            if all(hasattr(library, f"{prefix}{c_name}") for prefix in variants):
                available.append(c_name)
    return tuple(available)


def declarations() -> str:
    """C++ declarations that mark the available functions as having vector variants."""
    functions = libmvec_functions()
    if not functions:
        return ""
    lines = ['extern "C" {']
    for c_name in functions:
        t = "float" if c_name.endswith("f") and c_name[:-1] in CANDIDATES else "double"
        lines += ["#pragma omp declare simd notinbranch", f"{t} {c_name}({t});"]
    lines.append("}")
    return "\n".join(lines)


def link_flags() -> tuple[str, ...]:
    return ("-lmvec",) if libmvec_functions() else ()
