"""The operator families of elementwise ops (arithmetic, comparisons, logical and bitwise ops,
predicates, selection, casts), one entry per op, from which every code generator derives its
spelling: the C++ expression (`cpp/expr.py`; g++ vectorizes these as written, so the scalar form
is the vectorized one), the Triton expression (`triton/ops.py`), the NumPy stand-in of a libdevice
function under Triton's interpreter (`triton/interpret.py`), and the inliner's cost
(`loop_ir/index_math.py`). Math functions (exp, tanh, lgamma, ...) are the other family, in
`loop_ir/math_ops.py`; `spelled_ops()` lists both. Adding an op is one entry in one of them (plus
its prim and tests): `tests/test_elementwise_spellings.py` checks that every elementwise prim has
a form in every code generator for every dtype it accepts.

A spelling is a `str.format` template over the operands' code (`{0}`, `{1}`, `{2}`) and:
`{T}` the result's compute type, `{A}` the operand's (C++: `float` for 16-bit floats; Triton:
`tl.float32`), `{H}` the result's storage type (Triton), and in C++ `{sqrt}` / `{atan2}`, the libm
call of the operand's real type.
"""

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import torch

from torchsmith.inductor.loop_ir.math_ops import BINARY_MATH, UNARY_MATH, libdevice_functions

# Keys of a spelling table, looked up in order for an operand kind, the first present wins; a key
# present with None means "no form" (the code generator raises naming the op and dtype). "to_bool"
# and "to_half" (the result's dtype) come before the operand's kind: a cast's form depends on both.
CPP_LOOKUP = {"bool": ("bool", ""), "int": ("int", ""), "float": ("",), "complex": ("",)}
# Triton computes a bool like an integer, and has no complex type (refused before code generation).
TRITON_LOOKUP = {
    "bool": ("bool", "int", ""),
    "int": ("int", ""),
    "float": ("float", ""),
    "complex": ("int", ""),
}


def operand_kind(dtype: torch.dtype) -> str:
    """`bool`, `int`, `float` or `complex`: the key family a spelling is looked up by."""
    if dtype == torch.bool:
        return "bool"
    if dtype.is_complex:
        return "complex"
    return "float" if dtype.is_floating_point else "int"


@dataclass(frozen=True, slots=True)
class Libdevice:
    """A libdevice function a Triton spelling calls, and its NumPy stand-in under the interpreter
    (which maps none of libdevice). `result`: the stand-in's result dtype, when not the operand's."""

    name: str
    arity: int
    numpy: Callable
    result: np.dtype | None = None


@dataclass(frozen=True, slots=True)
class OperatorOp:
    """One elementwise operator of the loop IR and its spelling in each code generator.

    `cpp` and `triton`: spelling tables keyed by operand kind (see CPP_LOOKUP / TRITON_LOOKUP; ""
    for any kind); `exact`: the result is one of the operands (or a bool), so a 16-bit result needs
    no rounding; `expensive`: a library-call-like cost, which the inliner does not duplicate lightly;
    `libdevice`: the libdevice function the Triton spelling calls, if any."""

    name: str
    arity: int
    cpp: dict[str, str | None]
    triton: dict[str, str | None]
    exact: bool = False
    expensive: bool = False
    libdevice: Libdevice | None = field(default=None)


def _op(name, arity, cpp, triton, **kw) -> OperatorOp:
    """An entry whose tables may be one string (the same form for every operand kind)."""
    cpp = {"": cpp} if isinstance(cpp, str) else cpp
    triton = {"": triton} if isinstance(triton, str) else triton
    return OperatorOp(name, arity, cpp, triton, **kw)


_REMAINDER_INT = (
    "tl.where((({0} % {1}) != 0) & ((({0} % {1}) < 0) != ({1} < 0)), ({0} % {1}) + {1}, {0} % {1})"
)

ARITHMETIC = (
    _op("add", 2, {"": "{0} + {1}", "bool": "{0} || {1}"}, {"": "({0} + {1})", "bool": "({0} | {1})"}),
    _op("sub", 2, "{0} - {1}", "({0} - {1})"),
    _op("mul", 2, {"": "{0} * {1}", "bool": "{0} && {1}"}, {"": "({0} * {1})", "bool": "({0} & {1})"}),
    # Integer division checks its divisor (cpp/prelude's int_div): zero raises after the kernel.
    # Triton's integer // truncates toward zero, like C and like torch's integer div.
    _op("div", 2, {"": "{0} / {1}", "int": "ts::int_div<{A}>({0}, {1})"},
        {"float": "({0} / {1})", "int": "({0} // {1})"}),
    _op("remainder", 2, "ts::remainder<{A}>({0}, {1})",
        {"float": "({0} - {1} * tl.floor({0} / {1}))", "int": _REMAINDER_INT}, expensive=True),
    _op("neg", 1, "-{0}", "-{0}", exact=True),
    _op("abs", 1, "ts::abs({0})", "tl.abs({0})", exact=True),
    _op("reciprocal", 1, "{T}(1) / {0}", {"float": "(1.0 / {0})"}),
    _op("rsqrt", 1, "{T}(1) / {sqrt}({0})", {"float": "tl.rsqrt({0})"}),
)  # fmt: skip

COMPARISONS = (
    _op("eq", 2, "{0} == {1}", "({0} == {1})"),
    _op("ne", 2, "{0} != {1}", "({0} != {1})"),
    _op("lt", 2, "{0} < {1}", "({0} < {1})"),
    _op("le", 2, "{0} <= {1}", "({0} <= {1})"),
    _op("gt", 2, "{0} > {1}", "({0} > {1})"),
    _op("ge", 2, "{0} >= {1}", "({0} >= {1})"),
)

LOGICAL_AND_BITWISE = (
    _op("bitwise_not", 1, {"": "~{0}", "bool": "!{0}"}, {"int": "~{0}", "bool": "({0} == 0)"}, exact=True),
    _op("bitwise_and", 2, "{0} & {1}", "({0} & {1})"),
    _op("bitwise_or", 2, "{0} | {1}", "({0} | {1})"),
    _op("bitwise_xor", 2, "{0} ^ {1}", "({0} ^ {1})"),
    # C++ shifts by a negative or too-large amount are undefined: ts::shift_* give eager's results.
    _op("shift_left", 2, "ts::shift_left<{A}>({0}, {1})", "({0} << {1})"),
    _op("shift_right", 2, "ts::shift_right<{A}>({0}, {1})", "({0} >> {1})"),
)

PREDICATES = (
    # An integer is never nan or infinite (x != x is false for it).
    _op("isnan", 1, "ts::isnan({0})", {"float": "({0} != {0})", "int": "({0} != {0})"}),
    _op("isinf", 1, "ts::isinf({0})", {"float": "(tl.abs({0}) == float('inf'))", "int": "({0} != {0})"}),
    _op("isfinite", 1, "ts::isfinite({0})", {"float": "(tl.abs({0}) < float('inf'))", "int": "({0} == {0})"}),
    _op("signbit", 1, "ts::signbit({0})", {"float": "(libdevice.signbit({0}) != 0)", "int": "({0} < 0)"},
        libdevice=Libdevice("signbit", 1, np.signbit, np.dtype(np.int32))),
    # nan -> 0, as eager.
    _op("sign", 1, "ts::sign({0})", {"float": "tl.where({0} > 0, 1.0, tl.where({0} < 0, -1.0, 0.0))",
                                     "int": "tl.where({0} > 0, 1, tl.where({0} < 0, -1, 0)).to({T})"},
        exact=True),
)  # fmt: skip

SELECTION = (
    # NaN wins, as in torch.maximum: ts::maximum (C++ prelude) and ts_maximum (Triton prelude).
    _op("maximum", 2, {"": "ts::maximum<{A}>({0}, {1})", "bool": "{0} || {1}"},
        {"": "ts_maximum({0}, {1})", "bool": "({0} | {1})"}, exact=True),
    _op("minimum", 2, {"": "ts::minimum<{A}>({0}, {1})", "bool": "{0} && {1}"},
        {"": "ts_minimum({0}, {1})", "bool": "({0} & {1})"}, exact=True),
    _op("where", 3, "{0} ? {1} : {2}", "tl.where({0}, {1}, {2})", exact=True),
)  # fmt: skip

CASTS = (
    # A 16-bit result is rounded as eager's stored intermediate is (C++: by the generator, only when
    # the dtype changes; Triton: to half, then computed on in float32).
    _op("convert", 1, {"to_bool": "({0} != 0)", "": "static_cast<{T}>({0})"},
        {"to_bool": "({0} != 0)", "to_half": "{0}.to({H}).to(tl.float32)", "": "{0}.to({T})"}),
)  # fmt: skip

OPERATORS = (*ARITHMETIC, *COMPARISONS, *LOGICAL_AND_BITWISE, *PREDICATES, *SELECTION, *CASTS)
OPERATOR_BY_NAME = {op.name: op for op in OPERATORS}


def spelling(table: dict[str, str | None], lookup: tuple[str, ...], result: str | None = None) -> str | None:
    """The form `table` gives for an operand kind's `lookup` keys, after the result's key (`to_bool`,
    `to_half`) when given; None when there is none."""
    keys = ((f"to_{result}",) if result else ()) + lookup
    for key in keys:
        if key in table:
            return table[key]
    return None


def spelled_ops() -> dict[str, tuple[int, str]]:
    """Every elementwise op the code generators spell, by name: (arity, family table name)."""
    found = {op.name: (1, "UNARY_MATH") for op in UNARY_MATH}
    found |= {op.name: (2, "BINARY_MATH") for op in BINARY_MATH}
    return found | {op.name: (op.arity, "OPERATORS") for op in OPERATORS}


def libdevice_stand_ins() -> tuple[Libdevice, ...]:
    """Every libdevice function the generated Triton calls, with its NumPy stand-in."""
    math = tuple(Libdevice(name, arity, fn) for name, (arity, fn) in libdevice_functions().items())
    return math + tuple(op.libdevice for op in OPERATORS if op.libdevice is not None)


# What the inliner counts as a library call: the expensive math functions, and operators such as
# remainder (a division and a floor).
EXPENSIVE_OPS = frozenset(op.name for op in (*UNARY_MATH, *BINARY_MATH, *OPERATORS) if op.expensive)
