"""The math-function family of elementwise ops (exp, tanh, lgamma, ...), one entry per op, from which
every code generator derives its spelling: the C function (`cpp/expr.py`, and the libmvec declarations
of `cpp/vector_math.py` that vectorize it), the Triton function (`triton/ops.py`), the NumPy function
that stands in for libdevice under Triton's interpreter (`triton/interpret.py`), and the inliner's cost
(`loop_ir/index_math.py`). Adding such an op is one entry here (plus its prim and tests).

Ops spelled as operators or with special cases of their own (add, abs, sign, isnan, where, convert,
...) are the operator families of `loop_ir/elementwise_ops.py`, whose entries work the same way.
"""

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True, slots=True)
class MathOp:
    """One math function of the loop IR.

    `c`: the C function of the double version (`expf` is derived for float); `triton`: the Triton
    function (`tl.*` or `libdevice.*`); `numpy`: what computes it under Triton's interpreter when
    `triton` is a libdevice function (the interpreter maps none of libdevice); `expensive`: a library
    call, which the inliner does not duplicate lightly; `rounding`: the identity on integers;
    `cpp`: the C++ template of a binary op spelled otherwise than the libm call (`{A}`: the operand's
    compute type), where C's function differs from eager (pow of integers, fmod's sign); `triton_int`:
    the Triton form on integer operands (the others take floating-point operands only)."""

    name: str
    c: str
    triton: str
    numpy: Callable | None = None
    expensive: bool = True
    rounding: bool = False
    cpp: str | None = None
    triton_int: str | None = None


def _scalar(fn) -> Callable:
    return np.vectorize(fn, otypes=[np.float64])


UNARY_MATH = (
    MathOp("exp", "exp", "tl.exp"),
    MathOp("exp2", "exp2", "tl.exp2"),
    MathOp("expm1", "expm1", "libdevice.expm1", np.expm1),
    MathOp("log", "log", "tl.log"),
    MathOp("log2", "log2", "tl.log2"),
    MathOp("log10", "log10", "libdevice.log10", np.log10),
    MathOp("log1p", "log1p", "libdevice.log1p", np.log1p),
    MathOp("sin", "sin", "tl.sin"),
    MathOp("cos", "cos", "tl.cos"),
    MathOp("tan", "tan", "libdevice.tan", np.tan),
    MathOp("asin", "asin", "libdevice.asin", np.arcsin),
    MathOp("acos", "acos", "libdevice.acos", np.arccos),
    MathOp("atan", "atan", "libdevice.atan", np.arctan),
    MathOp("sinh", "sinh", "libdevice.sinh", np.sinh),
    MathOp("cosh", "cosh", "libdevice.cosh", np.cosh),
    MathOp("tanh", "tanh", "libdevice.tanh", np.tanh),
    MathOp("asinh", "asinh", "libdevice.asinh", np.arcsinh),
    MathOp("acosh", "acosh", "libdevice.acosh", np.arccosh),
    MathOp("atanh", "atanh", "libdevice.atanh", np.arctanh),
    MathOp("erf", "erf", "tl.erf"),
    MathOp("erfc", "erfc", "libdevice.erfc", _scalar(math.erfc)),
    MathOp("lgamma", "lgamma", "libdevice.lgamma", _scalar(math.lgamma)),
    MathOp("floor", "floor", "tl.floor", expensive=False, rounding=True),
    MathOp("ceil", "ceil", "tl.ceil", expensive=False, rounding=True),
    MathOp("trunc", "trunc", "libdevice.trunc", np.trunc, expensive=False, rounding=True),
    MathOp("sqrt", "sqrt", "tl.sqrt", expensive=False),
    MathOp("round", "nearbyint", "libdevice.nearbyint", np.rint, expensive=False, rounding=True),
)

BINARY_MATH = (
    MathOp("atan2", "atan2", "libdevice.atan2", np.arctan2),
    MathOp("pow", "pow", "libdevice.pow", np.power, cpp="ts::pow<{A}>({0}, {1})"),
    # Integer fmod truncates toward zero in Triton (%), as C and torch's fmod do.
    MathOp(
        "fmod", "fmod", "libdevice.fmod", np.fmod, cpp="ts::fmod<{A}>({0}, {1})", triton_int="({0} % {1})"
    ),
)

UNARY_BY_NAME = {op.name: op for op in UNARY_MATH}
BINARY_BY_NAME = {op.name: op for op in BINARY_MATH}


def libdevice_functions() -> dict[str, tuple[int, Callable]]:
    """The libdevice functions the generated Triton calls, by libdevice name: (arity, NumPy function)."""
    found = {}
    for arity, ops in ((1, UNARY_MATH), (2, BINARY_MATH)):
        for op in ops:
            if op.triton.startswith("libdevice."):
                found[op.triton.removeprefix("libdevice.")] = (arity, op.numpy)
    return found
