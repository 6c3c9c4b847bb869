"""Decompositions of elementwise ATen ops: arithmetic, math functions, comparisons, logic,
`where`, `clamp`, `masked_fill` and dtype conversion. Promotion follows torch's kinds; the whole
formula runs in opmath (float32 for float16/bfloat16) and rounds once, as eager's kernels do."""

import torch

from torchsmith.prims.core import dtype_category, scalar_kind
from torchsmith.prims.decompose import KEEP, register_decomposition
from torchsmith.prims.promotion import PromotionKind, elementwise_dtypes, result_type

DEFAULT, NO_OPMATH = PromotionKind.DEFAULT, PromotionKind.NO_OPMATH
INT_TO_FLOAT, ALWAYS_BOOL = PromotionKind.INT_TO_FLOAT, PromotionKind.ALWAYS_BOOL
COMPLEX_TO_FLOAT = PromotionKind.COMPLEX_TO_FLOAT

# ---- unary ----------------------------------------------------------------------------------------

FLOAT_UNARY = (
    "exp",
    "exp2",
    "expm1",
    "log",
    "log2",
    "log10",
    "log1p",
    "sqrt",
    "rsqrt",
    "sin",
    "cos",
    "tan",
    "asin",
    "acos",
    "atan",
    "sinh",
    "cosh",
    "tanh",
    "asinh",
    "acosh",
    "atanh",
    "erf",
    "erfc",
    "lgamma",
    "reciprocal",
)


def _unary(prim: str, kind: PromotionKind):
    def decomposition(e, a):
        return e.pointwise(lambda x: e.prim(f"prims.{prim}", x), a, kind=kind)

    decomposition.__name__ = prim
    return decomposition


for _name in FLOAT_UNARY:
    register_decomposition(f"aten.{_name}.default")(_unary(_name, INT_TO_FLOAT))
register_decomposition("aten.neg.default")(_unary("neg", DEFAULT))
register_decomposition("aten.abs.default")(_unary("abs", COMPLEX_TO_FLOAT))
register_decomposition("aten.sign.default")(_unary("sign", DEFAULT))


@register_decomposition("aten.floor.default", "aten.ceil.default", "aten.round.default", "aten.trunc.default")
def rounding(e, a):
    # Integers are already whole: a copy, as eager returns a new tensor.
    op = e.current_op.split(".")[1]
    if not e.type(a).dtype.is_floating_point:
        return e.clone(a)
    return e.pointwise(lambda x: e.prim(f"prims.{op}", x), a)


@register_decomposition("aten.isnan.default", "aten.isinf.default", "aten.isfinite.default")
def float_class(e, a):
    op = e.current_op.split(".")[1]
    t = e.type(a)
    if not t.dtype.is_floating_point:
        return e.full(list(t.shape), op == "isfinite", dtype=torch.bool, device=t.device)
    return e.prim(f"prims.{op}", a)


@register_decomposition("aten.bitwise_not.default")
def bitwise_not(e, a):
    return e.bitwise_not(a)


@register_decomposition("aten.logical_not.default")
def logical_not(e, a):
    return e.eq(a, False if e.type(a).dtype == torch.bool else 0)


@register_decomposition("aten.sigmoid.default")
def sigmoid(e, a):
    return e.pointwise(lambda x: e.reciprocal(e.add(e.exp(e.neg(x)), 1.0)), a, kind=INT_TO_FLOAT)


# ---- binary arithmetic -------------------------------------------------------------------------------


def _scaled(e, x, alpha):
    if alpha == 1:
        return x
    # a scalar `other` (the .Scalar overloads) is scaled now: prims take at least one tensor
    return e.mul(x, alpha) if e.is_tensor(x) else x * alpha


# alpha is positional in the .Scalar overloads' schemas (`add.Scalar(self, other, alpha=1)`), keyword-only
# in the .Tensor ones: both spellings reach these functions.
@register_decomposition("aten.add.Tensor", "aten.add.Scalar")
def add(e, a, b, alpha=1):
    return e.pointwise(lambda x, y: e.add(x, _scaled(e, y, alpha)), a, b)


@register_decomposition("aten.sub.Tensor", "aten.sub.Scalar")
def sub(e, a, b, alpha=1):
    return e.pointwise(lambda x, y: e.sub(x, _scaled(e, y, alpha)), a, b)


@register_decomposition("aten.rsub.Tensor", "aten.rsub.Scalar")
def rsub(e, a, b, alpha=1):
    return e.pointwise(lambda x, y: e.sub(y, _scaled(e, x, alpha)), a, b)


@register_decomposition("aten.mul.Tensor", "aten.mul.Scalar")
def mul(e, a, b):
    return e.pointwise(lambda x, y: e.mul(x, y), a, b)


@register_decomposition("aten.div.Tensor", "aten.div.Scalar", "aten.true_divide.Tensor")
def div(e, a, b):
    return e.pointwise(lambda x, y: e.div(x, y), a, b, kind=INT_TO_FLOAT)


def _floor_divide(e, x, y, dtype):
    # The sign tests below need tensors: materialize a scalar operand.
    tensor = x if e.is_tensor(x) else y
    x, y = (
        v
        if e.is_tensor(v)
        else e.full(list(e.type(tensor).shape), v, dtype=e.type(tensor).dtype, device=e.type(tensor).device)
        for v in (x, y)
    )
    if dtype_category(dtype) == "int":
        quotient = e.div(x, y)  # truncates
        remainder = e.fmod(x, y)
        fix = e.bitwise_and(e.ne(remainder, 0), e.ne(e.lt(remainder, 0), e.lt(y, 0)))
        return e.sub(quotient, e.convert_element_type(fix, dtype))
    # Python's floor division on floats, as eager computes it: through fmod, so that a // b is
    # exact for exactly-divisible operands where floor(a / b) could round up.
    remainder = e.fmod(x, y)
    quotient = e.div(e.sub(x, remainder), y)
    quotient = e.where(
        e.bitwise_and(e.ne(remainder, 0), e.ne(e.lt(y, 0), e.lt(remainder, 0))),
        e.sub(quotient, 1.0),
        quotient,
    )
    floored = e.floor(quotient)
    floored = e.where(e.gt(e.sub(quotient, floored), 0.5), e.add(floored, 1.0), floored)
    # Division by zero: eager gives a / b (inf or nan) rather than the fmod formula's nan.
    return e.where(e.eq(y, 0.0), e.div(x, y), floored)


@register_decomposition("aten.div.Tensor_mode", "aten.div.Scalar_mode")
def div_mode(e, a, b, *, rounding_mode=None):
    if rounding_mode is None:
        return div(e, a, b)
    dtype = result_type(a, b)
    if rounding_mode == "trunc":
        if dtype_category(dtype) == "int":
            return e.pointwise(lambda x, y: e.div(x, y), a, b)
        return e.pointwise(lambda x, y: e.trunc(_rounded_to(e, e.div(x, y), dtype)), a, b)
    return e.pointwise(lambda x, y: _floor_divide(e, x, y, dtype), a, b)


def _rounded_to(e, quotient, dtype):
    """`quotient` rounded to a low-precision result dtype (and back): eager's bfloat16/float16 kernels
    divide to that dtype before truncating, so 4.9867 becomes 5.0 and truncates to 5, not 4."""
    if dtype not in (torch.bfloat16, torch.float16):
        return quotient
    compute = e.type(quotient).dtype
    return e.convert_element_type(e.convert_element_type(quotient, dtype), compute)


@register_decomposition("aten.floor_divide.default", "aten.floor_divide.Scalar")
def floor_divide(e, a, b):
    return div_mode(e, a, b, rounding_mode="floor")


def _binary(prim: str, kind: PromotionKind = DEFAULT):
    def decomposition(e, a, b):
        return e.pointwise(lambda x, y: e.prim(f"prims.{prim}", x, y), a, b, kind=kind)

    decomposition.__name__ = prim
    return decomposition


for _name, _prim, _kind in (
    ("remainder", "remainder", DEFAULT),
    ("fmod", "fmod", DEFAULT),
    ("bitwise_and", "bitwise_and", DEFAULT),
    ("bitwise_or", "bitwise_or", DEFAULT),
    ("bitwise_xor", "bitwise_xor", DEFAULT),
    ("eq", "eq", ALWAYS_BOOL),
    ("ne", "ne", ALWAYS_BOOL),
    ("lt", "lt", ALWAYS_BOOL),
    ("le", "le", ALWAYS_BOOL),
    ("gt", "gt", ALWAYS_BOOL),
    ("ge", "ge", ALWAYS_BOOL),
):
    register_decomposition(f"aten.{_name}.Tensor", f"aten.{_name}.Scalar")(_binary(_prim, _kind))
register_decomposition("aten.atan2.default")(_binary("atan2", INT_TO_FLOAT))
register_decomposition("aten.maximum.default")(_binary("maximum", NO_OPMATH))
register_decomposition("aten.minimum.default")(_binary("minimum", NO_OPMATH))


@register_decomposition("aten.pow.Tensor_Tensor", "aten.pow.Tensor_Scalar", "aten.pow.Scalar")
def pow_(e, a, b):
    if e.is_tensor(a) and not e.is_tensor(b) and scalar_kind(b) in ("int", "float"):
        # Eager special-cases these exponents; the same formulas keep results identical.
        floating = dtype_category(result_type(a, b)) == "float"
        special = {
            2: lambda x: e.mul(x, x),
            3: lambda x: e.mul(e.mul(x, x), x),
            1: lambda x: e.clone(x),
            0.5: lambda x: e.sqrt(x),
            -0.5: lambda x: e.rsqrt(x),
            -1: lambda x: e.reciprocal(x),
            -2: lambda x: e.reciprocal(e.mul(x, x)),
        }
        if b in special and (floating or b in (1, 2, 3)):
            return e.pointwise(special[b], a, dtypes=elementwise_dtypes(a, b))
    return e.pointwise(lambda x, y: e.pow(x, y), a, b)


def _as_bool(e, x):
    return x if not e.is_tensor(x) or e.type(x).dtype == torch.bool else e.ne(x, 0)


@register_decomposition("aten.logical_and.default", "aten.logical_or.default", "aten.logical_xor.default")
def logical_binary(e, a, b):
    prim = {"logical_and": "bitwise_and", "logical_or": "bitwise_or", "logical_xor": "bitwise_xor"}[
        e.current_op.split(".")[1]
    ]
    shape = e.shape_of(a, b)
    x, y = (e.broadcast_to(_as_bool(e, v), shape) for v in (a, b))
    return e.prim(f"prims.{prim}", x, y)


# ---- where, clamp, masked_fill ------------------------------------------------------------------------


@register_decomposition(
    "aten.where.self", "aten.where.ScalarSelf", "aten.where.ScalarOther", "aten.where.Scalar"
)
def where(e, condition, a, b):
    shape = e.shape_of(condition, a, b)
    condition = e.broadcast_to(condition, shape)
    if not e.is_tensor(a) and not e.is_tensor(b):  # two scalars: the result dtype is theirs
        a = e.full(list(shape), a, dtype=result_type(a, b), device=e.type(condition).device)
    return e.pointwise(lambda x, y: e.where(condition, x, y), a, b, kind=NO_OPMATH, shape=shape)


@register_decomposition("aten.clamp.default", "aten.clamp.Tensor")
def clamp(e, a, min=None, max=None):
    def body(x, lo=None, hi=None):
        if lo is not None:
            x = e.maximum(x, lo)
        if hi is not None:
            x = e.minimum(x, hi)
        return x

    operands = [a] + [v for v in (min, max) if v is not None]
    if min is not None and max is not None:
        return e.pointwise(lambda x, lo, hi: body(x, lo, hi), *operands, kind=NO_OPMATH)
    if min is not None:
        return e.pointwise(lambda x, lo: body(x, lo=lo), *operands, kind=NO_OPMATH)
    if max is not None:
        return e.pointwise(lambda x, hi: body(x, hi=hi), *operands, kind=NO_OPMATH)
    return e.clone(a)


@register_decomposition("aten.clamp_min.default", "aten.clamp_min.Tensor")
def clamp_min(e, a, min):
    return clamp(e, a, min=min)


@register_decomposition("aten.clamp_max.default", "aten.clamp_max.Tensor")
def clamp_max(e, a, max):
    return clamp(e, a, max=max)


@register_decomposition("aten.masked_fill.Scalar", "aten.masked_fill.Tensor")
def masked_fill(e, a, mask, value):
    t = e.type(a)
    if e.is_tensor(value):
        value = e.broadcast_to(e.to(value, t.dtype), t.shape)
    elif dtype_category(t.dtype) in ("int", "bool") and scalar_kind(value) == "float":
        value = int(value)  # eager converts the fill value to the tensor's dtype
    if t.dtype == torch.bool and not isinstance(value, bool) and not e.is_tensor(value):
        value = bool(value)
    shape = e.shape_of(a, mask)
    return e.where(e.broadcast_to(mask, shape), value, e.broadcast_to(a, shape))


# ---- conversion and copies ------------------------------------------------------------------------------


@register_decomposition("aten._to_copy.default", declines="copies to another device")
def to_copy(
    e, a, *, dtype=None, layout=None, device=None, pin_memory=None, non_blocking=False, memory_format=None
):
    t = e.type(a)
    if device is not None and str(torch.device(device)) != t.device:
        return KEEP  # moving between devices is the backend's business, not a prim
    return e.clone(a) if dtype is None or dtype == t.dtype else e.convert_element_type(a, dtype)


@register_decomposition("aten.clone.default")
def clone(e, a, *, memory_format=None):
    return e.clone(a)


@register_decomposition("aten.detach.default", "aten.alias.default", "aten.lift_fresh_copy.default")
def identity(e, a):
    # Functional graphs have no aliasing to preserve: the value itself stands for its alias.
    return a
