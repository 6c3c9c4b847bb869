"""Elementwise ops and reductions as Triton code, and the helper functions every generated module
starts with (NaN-propagating max/min as eager's, and the combine functions of `tl.reduce`)."""

import math

import torch

from torchsmith.inductor.errors import CodegenError
from torchsmith.inductor.loop_ir.elementwise_ops import (
    OPERATOR_BY_NAME,
    TRITON_LOOKUP,
    operand_kind,
    spelling,
)
from torchsmith.inductor.loop_ir.math_ops import BINARY_MATH, UNARY_MATH
from torchsmith.inductor.loop_ir.program import Op
from torchsmith.inductor.triton.index import compute_dtype, triton_dtype

HALF = (torch.float16, torch.bfloat16)
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

# The Triton forms of the math functions on floating-point operands (loop_ir/math_ops.py).
UNARY_FLOAT = {op.name: f"{op.triton}({{0}})" for op in UNARY_MATH}
BINARY_FLOAT = {op.name: f"{op.triton}({{0}}, {{1}})" for op in BINARY_MATH}
BINARY_INT = {op.name: op.triton_int for op in BINARY_MATH if op.triton_int is not None}


def _template(op: Op, arity: int) -> str | None:
    """The Triton template of `op` from its op family (elementwise_ops.py or math_ops.py)."""
    kind = operand_kind(op.args[-1].dtype)
    entry = OPERATOR_BY_NAME.get(op.op)
    if entry is not None and entry.arity == arity:
        result = "bool" if op.dtype == torch.bool else "half" if op.dtype in HALF else None
        return spelling(entry.triton, TRITON_LOOKUP[kind], result)
    math = {1: UNARY_FLOAT, 2: BINARY_FLOAT if kind == "float" else BINARY_INT}.get(arity, {})
    return math.get(op.op) if kind == "float" or arity == 2 else None


def triton_op(op: Op, args: list[str]) -> str:
    """The Triton expression of one elementwise op on already-named operands (half computes in f32)."""
    operand = op.args[-1].dtype
    result = triton_dtype(compute_dtype(op.dtype))  # refuses a dtype Triton has not
    template = _template(op, len(args))
    if template is None:
        raise CodegenError(
            f"no Triton form for elementwise op {op.op!r} on {operand} with {len(args)} operands"
        )
    # {H}: a cast to half rounds to it (as eager's stored intermediate does), then computes on in float32.
    storage = triton_dtype(op.dtype) if "{H}" in template else None
    return template.format(*args, T=result, H=storage)


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
