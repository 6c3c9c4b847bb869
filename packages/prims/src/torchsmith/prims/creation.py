"""Creation prims: iota, full and empty. They have no tensor operand, so dtype and device are
arguments; sizes may be symbolic."""

import numpy as np
import torch

from torchsmith.ir.types import TensorType
from torchsmith.prims.core import (
    CATEGORY_OF,
    define_prim,
    dim_value,
    dtype_category,
    scalar_kind,
    shape_value,
)
from torchsmith.prims.errors import PrimTypeError

_NUMPY_DTYPES = {
    torch.bool: np.bool_,
    torch.uint8: np.uint8,
    torch.int8: np.int8,
    torch.int16: np.int16,
    torch.int32: np.int32,
    torch.int64: np.int64,
    torch.float16: np.float16,
    torch.float32: np.float32,
    torch.float64: np.float64,
    torch.complex64: np.complex64,
    torch.complex128: np.complex128,
    # NumPy has no bfloat16: references compute in float32 and the tests round the result.
    torch.bfloat16: np.float32,
}


def numpy_dtype(dtype: torch.dtype):
    """The NumPy dtype a reference implementation computes `dtype` in."""
    try:
        return _NUMPY_DTYPES[dtype]
    except KeyError:
        raise PrimTypeError(f"{dtype} has no NumPy reference dtype") from None


def _check_dtype(name: str, dtype) -> torch.dtype:
    if not isinstance(dtype, torch.dtype):
        raise PrimTypeError(f"{name}: dtype must be a torch.dtype, got {dtype!r}")
    return dtype


def _check_fill(name: str, value, dtype: torch.dtype) -> None:
    kind = scalar_kind(value)
    if kind is None:
        raise PrimTypeError(f"{name}: the fill value must be a Python scalar, got {value!r}")
    if CATEGORY_OF[kind] > CATEGORY_OF[dtype_category(dtype)]:
        raise PrimTypeError(f"{name}: cannot fill a {dtype} tensor with the {kind} {value!r}")


def _iota_rule(length, start, step, *, dtype, device):
    length = dim_value("prims.iota", length)
    dtype = _check_dtype("prims.iota", dtype)
    if dtype_category(dtype) == "bool":
        raise PrimTypeError("prims.iota: dtype must be numeric, not bool")
    _check_fill("prims.iota", start, dtype)
    _check_fill("prims.iota", step, dtype)
    return TensorType.make((length,), dtype, device)


define_prim(
    "prims.iota",
    "length: int, start: scalar, step: scalar, *, dtype: dtype, device: device",
    kind="creation",
    infer=_iota_rule,
    torch_impl=lambda length, start, step, *, dtype, device: (
        torch.arange(length, dtype=dtype, device=device).mul_(step).add_(start)
    ),
    numpy_impl=lambda length, start, step, *, dtype, device: (
        np.arange(length, dtype=numpy_dtype(dtype)) * step + start
    ).astype(numpy_dtype(dtype)),
    doc="[start, start + step, ..., start + (length - 1) * step]: start + i * step computed in dtype.",
)


def _full_rule(shape, value, *, dtype, device):
    shape = shape_value("prims.full", shape)
    dtype = _check_dtype("prims.full", dtype)
    _check_fill("prims.full", value, dtype)
    return TensorType.make(shape, dtype, device)


define_prim(
    "prims.full",
    "shape: ints, value: scalar, *, dtype: dtype, device: device",
    kind="creation",
    infer=_full_rule,
    torch_impl=lambda shape, value, *, dtype, device: torch.full(
        list(shape), value, dtype=dtype, device=device
    ),
    numpy_impl=lambda shape, value, *, dtype, device: np.full(shape, value, dtype=numpy_dtype(dtype)),
    doc="A contiguous tensor of `shape` filled with `value`.",
)


def _empty_rule(shape, *, dtype, device):
    shape = shape_value("prims.empty", shape)
    return TensorType.make(shape, _check_dtype("prims.empty", dtype), device)


define_prim(
    "prims.empty",
    "shape: ints, *, dtype: dtype, device: device",
    kind="creation",
    infer=_empty_rule,
    torch_impl=lambda shape, *, dtype, device: torch.empty(list(shape), dtype=dtype, device=device),
    numpy_impl=lambda shape, *, dtype, device: np.empty(shape, dtype=numpy_dtype(dtype)),
    doc="A contiguous tensor of `shape` whose values are unspecified (only its shape may be read "
    "before it is written).",
)


def _empty_strided_rule(shape, strides, *, dtype, device):
    shape = shape_value("prims.empty_strided", shape)
    strides = shape_value("prims.empty_strided", strides)
    if len(strides) != len(shape):
        raise PrimTypeError(f"prims.empty_strided: {len(shape)} sizes but {len(strides)} strides")
    return TensorType.make(shape, _check_dtype("prims.empty_strided", dtype), device, strides=strides)


define_prim(
    "prims.empty_strided",
    "shape: ints, strides: ints, *, dtype: dtype, device: device",
    kind="creation",
    infer=_empty_strided_rule,
    torch_impl=lambda shape, strides, *, dtype, device: torch.empty_strided(
        list(shape), list(strides), dtype=dtype, device=device
    ),
    numpy_impl=lambda shape, strides, *, dtype, device: np.empty(shape, dtype=numpy_dtype(dtype)),
    doc="A tensor of `shape` laid out with `strides` (for outputs whose layout matters, such as "
    "channels-last), with unspecified values.",
)
