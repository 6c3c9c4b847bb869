"""Elementwise prims: unary and binary math, comparisons, logic, bitwise ops and `where`.

Prims are strict: tensor operands share shape, dtype and device (type promotion and broadcasting
happen in decompositions, through `prims.convert_element_type` and `prims.broadcast_in_dim`).
The one convenience is a documented *scalar operand*: one operand of a binary op (or either
branch of `where`) may be a Python number or symbolic int. It is a weak scalar: it never changes
the result dtype, and its category (bool < int < float < complex) may not exceed the tensor's.
"""

import math

import numpy as np
import torch

from torchsmith.prims.core import (
    CATEGORY_OF,
    check_dtype_class,
    check_same_dtype,
    check_same_shape,
    define_prim,
    dtype_category,
    result,
    scalar_kind,
    tensor_arg,
)
from torchsmith.prims.errors import PrimTypeError


def _unary_rule(name: str, accepts: str, out: str):
    """Shape/dtype rule of a unary prim: same shape; dtype kept, or bool (`out="bool"`)."""

    def infer(a):
        t = tensor_arg(name, "the operand", a)
        check_dtype_class(name, t.dtype, accepts)
        return result(t.shape, torch.bool if out == "bool" else t.dtype, t.device)

    return infer


def _vectorized(fn):
    """A NumPy ufunc from a scalar math function, for the few NumPy lacks (erf, lgamma)."""
    ufunc = np.frompyfunc(fn, 1, 1)
    return lambda a: np.asarray(ufunc(a)).astype(np.float64 if a.dtype == np.float64 else np.float32)


UNARY = {
    # name: (accepted dtypes, output ("same" or "bool"), torch impl, numpy impl, doc)
    "abs": ("real_numeric", "same", torch.abs, np.abs, "|a|"),
    "neg": ("numeric", "same", torch.neg, np.negative, "-a"),
    "sign": (
        "real_numeric",
        "same",
        torch.sign,
        lambda a: np.where(np.isnan(a), 0, np.sign(a)).astype(a.dtype),
        "-1, 0 or 1 by the sign of a (0 for nan)",
    ),
    "signbit": ("real_numeric", "bool", torch.signbit, np.signbit, "whether the sign bit of a is set"),
    "exp": ("inexact", "same", torch.exp, np.exp, "e ** a"),
    "exp2": ("float", "same", torch.exp2, np.exp2, "2 ** a"),
    "expm1": ("float", "same", torch.expm1, np.expm1, "e ** a - 1, accurate near 0"),
    "log": ("inexact", "same", torch.log, np.log, "natural logarithm"),
    "log2": ("float", "same", torch.log2, np.log2, "base-2 logarithm"),
    "log10": ("float", "same", torch.log10, np.log10, "base-10 logarithm"),
    "log1p": ("float", "same", torch.log1p, np.log1p, "log(1 + a), accurate near 0"),
    "sqrt": ("inexact", "same", torch.sqrt, np.sqrt, "square root"),
    "rsqrt": ("float", "same", torch.rsqrt, lambda a: 1 / np.sqrt(a), "1 / sqrt(a)"),
    "reciprocal": ("inexact", "same", torch.reciprocal, lambda a: 1 / a, "1 / a"),
    "sin": ("inexact", "same", torch.sin, np.sin, "sine"),
    "cos": ("inexact", "same", torch.cos, np.cos, "cosine"),
    "tan": ("float", "same", torch.tan, np.tan, "tangent"),
    "asin": ("float", "same", torch.asin, np.arcsin, "inverse sine"),
    "acos": ("float", "same", torch.acos, np.arccos, "inverse cosine"),
    "atan": ("float", "same", torch.atan, np.arctan, "inverse tangent"),
    "sinh": ("float", "same", torch.sinh, np.sinh, "hyperbolic sine"),
    "cosh": ("float", "same", torch.cosh, np.cosh, "hyperbolic cosine"),
    "tanh": ("inexact", "same", torch.tanh, np.tanh, "hyperbolic tangent"),
    "asinh": ("float", "same", torch.asinh, np.arcsinh, "inverse hyperbolic sine"),
    "acosh": ("float", "same", torch.acosh, np.arccosh, "inverse hyperbolic cosine"),
    "atanh": ("float", "same", torch.atanh, np.arctanh, "inverse hyperbolic tangent"),
    "erf": ("float", "same", torch.erf, _vectorized(math.erf), "the error function"),
    "erfc": ("float", "same", torch.erfc, _vectorized(math.erfc), "1 - erf(a), accurate for large a"),
    "lgamma": ("float", "same", torch.lgamma, _vectorized(math.lgamma), "log |gamma(a)|"),
    "floor": ("float", "same", torch.floor, np.floor, "round toward -inf"),
    "ceil": ("float", "same", torch.ceil, np.ceil, "round toward +inf"),
    "round": ("float", "same", torch.round, np.round, "round half to even"),
    "trunc": ("float", "same", torch.trunc, np.trunc, "round toward 0"),
    "isnan": ("inexact", "bool", torch.isnan, np.isnan, "whether a is nan"),
    "isinf": ("inexact", "bool", torch.isinf, np.isinf, "whether a is +-inf"),
    "isfinite": ("inexact", "bool", torch.isfinite, np.isfinite, "whether a is neither nan nor +-inf"),
    "bitwise_not": ("integral", "same", torch.bitwise_not, np.invert, "~a (logical not for bool)"),
}

for _name, (_accepts, _out, _torch, _numpy, _doc) in UNARY.items():
    define_prim(
        f"prims.{_name}",
        "a: tensor",
        kind="elementwise.unary",
        infer=_unary_rule(f"prims.{_name}", _accepts, _out),
        torch_impl=_torch,
        numpy_impl=_numpy,
        doc=f"{_doc}, elementwise.",
    )


# ---- binary ---------------------------------------------------------------------------------------


def _operand_types(name: str, operands: tuple):
    """Tensor types among `operands`, checking the scalar-operand rule (see module docstring)."""
    tensors = [tensor_arg(name, "an operand", x) for x in operands if scalar_kind(x) is None]
    if not tensors:
        raise PrimTypeError(f"{name}: at least one operand must be a tensor; got only scalars {operands!r}")
    check_same_shape(name, tensors)
    check_same_dtype(name, tensors)
    category = dtype_category(tensors[0].dtype)
    for x in operands:
        kind = scalar_kind(x)
        if kind is not None and CATEGORY_OF[kind] > CATEGORY_OF[category]:
            raise PrimTypeError(
                f"{name}: a {kind} scalar operand {x!r} cannot combine with a {tensors[0].dtype} tensor "
                "without promotion; convert the tensor first"
            )
    return tensors[0]


def _binary_rule(name: str, accepts: str, out: str):
    def infer(a, b):
        t = _operand_types(name, (a, b))
        check_dtype_class(name, t.dtype, accepts)
        return result(t.shape, torch.bool if out == "bool" else t.dtype, t.device)

    return infer


def _scalar_tensor(value, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """A 0-d tensor holding `value`, made on `device` (`torch.tensor(value, device=...)` copies from
    pageable host memory, which on a GPU waits for every kernel queued before it)."""
    try:
        return torch.full((), value, dtype=dtype, device=device)
    except RuntimeError:  # a float out of the dtype's range: torch.tensor rounds it to inf
        return torch.tensor(value, dtype=dtype).to(device)


def _with_scalars(fn):
    """Run a torch binary op with a scalar operand as a 0-d tensor of the other's dtype (a weak scalar)."""

    def run(a, b):
        if not isinstance(a, torch.Tensor):
            a = _scalar_tensor(a, b.dtype, b.device)
        elif not isinstance(b, torch.Tensor):
            b = _scalar_tensor(b, a.dtype, a.device)
        return fn(a, b)

    return run


def _np_int_div(a, b):
    """C-style truncating integer division (what prims.div does on integers)."""
    a, b = np.asarray(a), np.asarray(b)
    if a.dtype.kind in "fc" or b.dtype.kind in "fc":
        return np.true_divide(a, b)
    quotient = np.floor_divide(a, b)
    return quotient + ((np.remainder(a, b) != 0) & ((a < 0) != (b < 0)))


def _torch_div(a, b):
    dtype = a.dtype if isinstance(a, torch.Tensor) else b.dtype
    if dtype.is_floating_point or dtype.is_complex:
        return torch.div(a, b)
    return torch.div(a, b, rounding_mode="trunc")


BINARY = {
    "add": ("any", "same", torch.add, np.add, "a + b (logical or for bool)"),
    "sub": ("numeric", "same", torch.sub, np.subtract, "a - b"),
    "mul": ("any", "same", torch.mul, np.multiply, "a * b (logical and for bool)"),
    "div": ("numeric", "same", _torch_div, _np_int_div, "a / b; truncating division on integers"),
    "remainder": ("real_numeric", "same", torch.remainder, np.remainder, "a mod b with the sign of b"),
    "fmod": ("real_numeric", "same", torch.fmod, np.fmod, "a mod b with the sign of a (C fmod)"),
    "pow": ("numeric", "same", torch.pow, np.power, "a ** b"),
    "atan2": ("float", "same", torch.atan2, np.arctan2, "the angle of (b, a)"),
    "maximum": ("real", "same", torch.maximum, np.maximum, "larger of a and b; nan if either is nan"),
    "minimum": ("real", "same", torch.minimum, np.minimum, "smaller of a and b; nan if either is nan"),
    "eq": ("any", "bool", torch.eq, np.equal, "a == b"),
    "ne": ("any", "bool", torch.ne, np.not_equal, "a != b"),
    "lt": ("real", "bool", torch.lt, np.less, "a < b"),
    "le": ("real", "bool", torch.le, np.less_equal, "a <= b"),
    "gt": ("real", "bool", torch.gt, np.greater, "a > b"),
    "ge": ("real", "bool", torch.ge, np.greater_equal, "a >= b"),
    "bitwise_and": ("integral", "same", torch.bitwise_and, np.bitwise_and, "a & b"),
    "bitwise_or": ("integral", "same", torch.bitwise_or, np.bitwise_or, "a | b"),
    "bitwise_xor": ("integral", "same", torch.bitwise_xor, np.bitwise_xor, "a ^ b"),
    "shift_left": ("int", "same", torch.bitwise_left_shift, np.left_shift, "a << b"),
    "shift_right": ("int", "same", torch.bitwise_right_shift, np.right_shift, "a >> b (arithmetic)"),
}

for _name, (_accepts, _out, _torch, _numpy, _doc) in BINARY.items():
    define_prim(
        f"prims.{_name}",
        "a: any, b: any",
        kind="elementwise.binary",
        infer=_binary_rule(f"prims.{_name}", _accepts, _out),
        torch_impl=_with_scalars(_torch),
        numpy_impl=_numpy,
        doc=f"{_doc}, elementwise; one operand may be a scalar.",
    )


def _where_rule(pred, a, b):
    p = tensor_arg("prims.where", "the predicate", pred)
    if p.dtype != torch.bool:
        raise PrimTypeError(f"prims.where: the predicate must be bool, got {p.dtype}")
    t = _operand_types("prims.where", (a, b))
    check_same_shape("prims.where", [p, t])
    return result(t.shape, t.dtype, t.device)


def _torch_where(pred, a, b):
    dtype = a.dtype if isinstance(a, torch.Tensor) else b.dtype
    a = a if isinstance(a, torch.Tensor) else _scalar_tensor(a, dtype, pred.device)
    b = b if isinstance(b, torch.Tensor) else _scalar_tensor(b, dtype, pred.device)
    return torch.where(pred, a, b)


define_prim(
    "prims.where",
    "pred: tensor, a: any, b: any",
    kind="elementwise.ternary",
    infer=_where_rule,
    torch_impl=_torch_where,
    numpy_impl=np.where,
    doc="a where pred else b, elementwise; either branch may be a scalar.",
)
