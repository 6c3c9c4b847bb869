"""Conversion and scan prims: convert_element_type, clone and cumsum."""

import numpy as np
import torch

from torchsmith.prims.core import check_dim, check_dtype_class, define_prim, result, tensor_arg
from torchsmith.prims.creation import numpy_dtype
from torchsmith.prims.errors import PrimTypeError


def _convert_rule(a, dtype):
    t = tensor_arg("prims.convert_element_type", "the operand", a)
    if not isinstance(dtype, torch.dtype):
        raise PrimTypeError(f"prims.convert_element_type: dtype must be a torch.dtype, got {dtype!r}")
    return result(t.shape, dtype, t.device)


def _numpy_convert(a, dtype):
    target = numpy_dtype(dtype)
    if np.issubdtype(target, np.integer) and a.dtype.kind == "f":
        # Float -> int truncates toward zero; out-of-range values are undefined in torch too.
        a = np.trunc(a)
    return a.astype(target)


define_prim(
    "prims.convert_element_type",
    "a: tensor, dtype: dtype",
    kind="conversion",
    infer=_convert_rule,
    torch_impl=lambda a, dtype: a.to(dtype, copy=True),
    numpy_impl=_numpy_convert,
    doc="`a` converted to dtype (floats round to nearest even, to integers truncate toward 0, "
    "to bool test != 0); always a new tensor.",
)


def _clone_rule(a):
    t = tensor_arg("prims.clone", "the operand", a)
    return result(t.shape, t.dtype, t.device)


define_prim(
    "prims.clone",
    "a: tensor",
    kind="conversion",
    infer=_clone_rule,
    torch_impl=lambda a: a.clone(memory_format=torch.contiguous_format),
    numpy_impl=lambda a: np.array(a, copy=True),
    doc="A contiguous copy of `a` that aliases nothing.",
)


def _cumsum_rule(a, dim):
    t = tensor_arg("prims.cumsum", "the operand", a)
    check_dtype_class("prims.cumsum", t.dtype, "numeric")
    check_dim("prims.cumsum", dim, max(t.rank, 1))
    return result(t.shape, t.dtype, t.device)


def _numpy_cumsum(a, dim):
    if a.ndim == 0:
        return a.copy()
    work = a.astype(np.float32) if a.dtype == np.float16 else a
    return np.cumsum(work, axis=dim).astype(a.dtype)


define_prim(
    "prims.cumsum",
    "a: tensor, dim: int",
    kind="scan",
    infer=_cumsum_rule,
    torch_impl=lambda a, dim: torch.cumsum(a, dim, dtype=a.dtype),
    numpy_impl=_numpy_cumsum,
    doc="Inclusive prefix sums along dim, in the input dtype (a 0-d operand is copied).",
)
