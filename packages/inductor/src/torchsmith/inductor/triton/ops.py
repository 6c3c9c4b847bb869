"""Elementwise ops and reductions as Triton code, and the helper functions every generated module
starts with (NaN-propagating max/min as eager's, and the combine functions of `tl.reduce`)."""

import math

import torch

from torchsmith.inductor.errors import CodegenError
from torchsmith.inductor.loop_ir.math_ops import BINARY_MATH, UNARY_MATH
from torchsmith.inductor.loop_ir.program import Op
from torchsmith.inductor.triton.index import compute_dtype, triton_dtype

REAL_LIBDEVICE = "from triton.language.extra import libdevice"
TRITON_PRELUDE = """import triton
import triton.language as tl
from triton.language.extra import libdevice


@triton.jit
def ts_maximum(a, b):
    # NaN wins, as in torch.maximum (a != a only for NaN; always false for integers)
    return tl.where((a > b) | (a != a), a, b)


@triton.jit
def ts_minimum(a, b):
    return tl.where((a < b) | (a != a), a, b)


@triton.jit
def ts_add(a, b):
    return a + b


@triton.jit
def ts_mul(a, b):
    return a * b
"""

UNARY_FLOAT = {
    **{op.name: f"{op.triton}({{0}})" for op in UNARY_MATH},
    "abs": "tl.abs({0})", "neg": "-{0}", "rsqrt": "tl.rsqrt({0})", "reciprocal": "(1.0 / {0})",
    "isnan": "({0} != {0})", "isinf": "(tl.abs({0}) == float('inf'))",
    "isfinite": "(tl.abs({0}) < float('inf'))",
    "sign": "tl.where({0} > 0, 1.0, tl.where({0} < 0, -1.0, 0.0))",  # nan -> 0, as eager
    "signbit": "(libdevice.signbit({0}) != 0)",
}  # fmt: skip

UNARY_INT = {
    "abs": "tl.abs({0})", "neg": "-{0}", "bitwise_not": "~{0}",
    "sign": "tl.where({0} > 0, 1, tl.where({0} < 0, -1, 0)).to({T})",
    "isnan": "({0} != {0})", "isinf": "({0} != {0})", "isfinite": "({0} == {0})", "signbit": "({0} < 0)",
}  # fmt: skip

BINARY = {
    "add": "({0} + {1})", "sub": "({0} - {1})", "mul": "({0} * {1})",
    "maximum": "ts_maximum({0}, {1})", "minimum": "ts_minimum({0}, {1})",
    "eq": "({0} == {1})", "ne": "({0} != {1})", "lt": "({0} < {1})", "le": "({0} <= {1})",
    "gt": "({0} > {1})", "ge": "({0} >= {1})", "bitwise_and": "({0} & {1})", "bitwise_or": "({0} | {1})",
    "bitwise_xor": "({0} ^ {1})", "shift_left": "({0} << {1})", "shift_right": "({0} >> {1})",
}  # fmt: skip

BINARY_FLOAT = {
    **{op.name: f"{op.triton}({{0}}, {{1}})" for op in BINARY_MATH},
    "div": "({0} / {1})", "remainder": "({0} - {1} * tl.floor({0} / {1}))",
}  # fmt: skip

BINARY_INT = {
    # Triton's integer // and % truncate toward zero, like C and like torch's fmod and integer div.
    "div": "({0} // {1})", "fmod": "({0} % {1})",
    "remainder": "tl.where((({0} % {1}) != 0) & ((({0} % {1}) < 0) != ({1} < 0)), "
    "({0} % {1}) + {1}, {0} % {1})",
}  # fmt: skip

BOOL = {"add": "({0} | {1})", "mul": "({0} & {1})", "bitwise_not": "({0} == 0)", "maximum": "({0} | {1})",
        "minimum": "({0} & {1})"}  # fmt: skip


def triton_op(op: Op, args: list[str]) -> str:
    """The Triton expression of one elementwise op on already-named operands (half computes in f32)."""
    operand = op.args[-1].dtype
    result = triton_dtype(compute_dtype(op.dtype))
    if op.op == "convert":
        if op.dtype == torch.bool:
            return f"({args[0]} != 0)"
        if op.dtype in (torch.float16, torch.bfloat16):
            # Round to half as eager's stored intermediate does, then keep computing in float32.
            return f"{args[0]}.to({triton_dtype(op.dtype)}).to(tl.float32)"
        return f"{args[0]}.to({result})"
    if op.op == "where":
        return f"tl.where({args[0]}, {args[1]}, {args[2]})"
    if operand == torch.bool and op.op in BOOL:
        return BOOL[op.op].format(*args)
    if len(args) == 1:
        table = UNARY_FLOAT if operand.is_floating_point else UNARY_INT
    else:
        table = BINARY | (BINARY_FLOAT if operand.is_floating_point else BINARY_INT)
    if op.op not in table:
        raise CodegenError(
            f"no Triton form for elementwise op {op.op!r} on {operand} with {len(args)} operands"
        )
    return table[op.op].format(*args, T=result)


def triton_constant(value, dtype: torch.dtype) -> str:
    """A Python literal Triton accepts for a constant of `dtype`."""
    if dtype == torch.bool:
        return "1" if value else "0"
    if dtype.is_floating_point:
        value = float(value)
        if math.isnan(value):
            return "float('nan')"
        if math.isinf(value):
            return "float('inf')" if value > 0 else "float('-inf')"
        return repr(value)
    return str(int(value))


# reduction type -> (elementwise combine, block reduce over axis 1 of {0})
REDUCTIONS = {
    "sum": ("({0} + {1})", "tl.sum({0}, 1)"),
    "prod": ("({0} * {1})", "tl.reduce({0}, 1, ts_mul)"),
    "max": ("ts_maximum({0}, {1})", "tl.reduce({0}, 1, ts_maximum)"),
    "min": ("ts_minimum({0}, {1})", "tl.reduce({0}, 1, ts_minimum)"),
}


def reduction_identity(reduction_type: str, dtype: torch.dtype) -> str:
    """The value masked-off lanes take so they do not change the result."""
    if reduction_type == "sum":
        return "0"
    if reduction_type == "prod":
        return "1"
    if dtype.is_floating_point:
        return "float('-inf')" if reduction_type == "max" else "float('inf')"
    if dtype == torch.bool:
        return "0" if reduction_type == "max" else "1"
    info = torch.iinfo(dtype)
    return str(info.min if reduction_type == "max" else info.max)
