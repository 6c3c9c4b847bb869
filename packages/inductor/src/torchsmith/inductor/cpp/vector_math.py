"""The libm functions generated code calls, declared by hand (no <cmath>: see cpp_prelude), and
vectorized through glibc's libmvec: declaring a function `omp declare simd` lets GCC call its vector
variant (`_ZGVeN16v_expf`, ...) inside `#pragma omp simd` loops, so exp, tanh and erf run 8 or 16
lanes at a time. Only functions whose every x86 variant the installed libmvec exports are marked;
elsewhere (no glibc, other CPUs) loops call scalar libm.

Kernels call a function by its C name for the compute type: `expf` for float, `exp` for double
(`libm_call`). floor/ceil/trunc/sqrt/nearbyint are declared too; GCC expands them inline.
"""

import contextvars
import ctypes
import ctypes.util
import platform
from contextlib import contextmanager
from functools import cache

from torchsmith.inductor.loop_ir.math_ops import BINARY_MATH, UNARY_MATH

# C names (double versions) of the libm functions the op table (loop_ir/math_ops.py) uses.
UNARY = tuple(op.c for op in UNARY_MATH)
# The binary ones C++ calls in libm (pow and fmod have templates of their own in cpp/prelude.py).
BINARY = tuple(op.c for op in BINARY_MATH if op.cpp is None)

# Vector-variant mangling prefixes of the x86 ISAs GCC may pick (SSE4, AVX, AVX2, AVX-512), per lane count.
_FLOAT_VARIANTS = ("_ZGVbN4v_", "_ZGVcN8v_", "_ZGVdN8v_", "_ZGVeN16v_")
_DOUBLE_VARIANTS = ("_ZGVbN2v_", "_ZGVcN4v_", "_ZGVdN4v_", "_ZGVeN8v_")


# Functions we compute inline where libmvec has no vector variant, so that their loops still
# vectorize (no call). Where it has one, libmvec's is a little faster on ordinary data, but it
# handles every lane below -87.3 (a masked score at -inf minus the row max, a -1e9 padding fill)
# with a scalar call, several times slower than ours on a half-masked attention kernel. So a kernel
# that may see such values (`masked_values`, decided per kernel by the code generator: it holds an
# infinite or huge constant) uses ours anyway. erf has no inline version: libmvec's erff is faster
# than one built from exp at the same accuracy.
INLINE = {("exp", "float"): "ts::exp_f32"}
# Whether the kernel being generated may feed masked values (-inf, -1e9) to exp: see INLINE.
_masked = contextvars.ContextVar("masked_values", default=True)


@contextmanager
def masked_values(masked: bool):
    """Within this block, `libm_call` picks exp for a kernel that does (not) see masked values."""
    token = _masked.set(masked)
    try:
        yield
    finally:
        _masked.reset(token)


# exp for float: x = n ln2 + r with |r| <= ln2/2 (Cody-Waite: the high part of ln2 has trailing zero
# bits, so n * ln2_hi is exact), e^r by its Taylor polynomial to degree 7 (truncation error 5e-9,
# below 0.1 ulp), then e^r * 2^n built from exponent bits, in two halves so that subnormal results
# round once. Within 2 ulp of the correctly rounded result (tests compare with torch.exp); inf, -inf,
# nan and overflow/underflow as libm.
INLINE_MATH = r"""
namespace ts {
__attribute__((always_inline)) inline float exp_f32(float x) {
  const float hi = 88.72283935546875f, lo = -103.972084045410156f;
  // Out of range, the result is inf or 0 (set below); compute on 0 meanwhile: clamped to lo, a masked
  // -inf would make a subnormal product, which costs a microcode assist per vector.
  const float xc = (x > hi || x < lo) ? 0.0f : x;
  const float n = __builtin_rintf(xc * 1.44269504088896341f);
  float r = __builtin_fmaf(-n, 0.693145751953125f, xc);
  r = __builtin_fmaf(-n, 1.42860676533018704e-06f, r);
  float p = 1.98412698412698413e-04f;
  p = __builtin_fmaf(p, r, 1.38888888888888889e-03f);
  p = __builtin_fmaf(p, r, 8.33333333333333333e-03f);
  p = __builtin_fmaf(p, r, 4.16666666666666667e-02f);
  p = __builtin_fmaf(p, r, 1.66666666666666667e-01f);
  p = __builtin_fmaf(p, r, 0.5f);
  p = __builtin_fmaf(p, r, 1.0f);
  p = __builtin_fmaf(p, r, 1.0f);
  const int32_t k = static_cast<int32_t>(n);
  const int32_t k1 = k >> 1, k2 = k - k1;
  const uint32_t b1 = static_cast<uint32_t>(k1 + 127) << 23, b2 = static_cast<uint32_t>(k2 + 127) << 23;
  float s1, s2;
  __builtin_memcpy(&s1, &b1, sizeof s1);
  __builtin_memcpy(&s2, &b2, sizeof s2);
  float y = p * s1 * s2;
  y = x > hi ? __builtin_inff() : y;
  y = x < lo ? 0.0f : y;
  return x != x ? x : y;
}

}  // namespace ts
"""


def libm_call(name: str, compute_type: str) -> str:
    """The C function computing `name` in `compute_type` ("float" -> `expf`, "double" -> `exp`),
    or our inline version (`ts::exp_f32`) where we have one and libmvec has no vector variant or
    the kernel may see masked values (see INLINE, `masked_values`)."""
    c_name = f"{name}f" if compute_type == "float" else name
    if (name, compute_type) in INLINE and (c_name not in libmvec_functions() or _masked.get()):
        return INLINE[(name, compute_type)]
    return c_name


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
    for name in UNARY:
        for c_name, variants in ((f"{name}f", _FLOAT_VARIANTS), (name, _DOUBLE_VARIANTS)):
            if all(hasattr(library, f"{prefix}{c_name}") for prefix in variants):
                available.append(c_name)
    return tuple(available)


@cache
def declarations() -> str:
    """C++ declarations of every libm function kernels may call, the vectorizable ones marked."""
    vectorized = set(libmvec_functions())
    lines = ['extern "C" {']
    for name in UNARY:
        for t, c_name in (("float", f"{name}f"), ("double", name)):
            if c_name in vectorized:
                lines.append("#pragma omp declare simd notinbranch")
            lines.append(f"{t} {c_name}({t});")
    for name in BINARY:
        for t, c_name in (("float", f"{name}f"), ("double", name)):
            lines.append(f"{t} {c_name}({t}, {t});")
    lines.append("}")
    return "\n".join(lines) + "\n" + INLINE_MATH


def link_flags() -> tuple[str, ...]:
    return ("-lmvec",) if libmvec_functions() else ()
