"""Reduction prims: sum, prod, amax, amin, argmax, argmin and Welford `var_mean`.

Reductions take a list of distinct non-negative dims and drop them (no keepdim: decompositions
re-insert size-1 dims with `prims.broadcast_in_dim`). An empty dim list reduces nothing and
copies the input (torch's `sum(a, dim=[])` would reduce everything; prims never do that).
The result keeps the input dtype: accumulation precision is the implementation's business, and
the torch and NumPy implementations both accumulate low-precision floats in float32.
"""

import numpy as np
import torch

from torchsmith.prims.core import check_dim, check_dtype_class, define_prim, int_list, result, tensor_arg
from torchsmith.prims.errors import PrimTypeError


def _reduced(name: str, a, dims, accepts: str, *, nonempty: bool = False):
    t = tensor_arg(name, "the operand", a)
    check_dtype_class(name, t.dtype, accepts)
    dims = int_list(name, dims)
    for d in dims:
        check_dim(name, d, t.rank)
    if len(set(dims)) != len(dims):
        raise PrimTypeError(f"{name}: repeated dim in {list(dims)}")
    if nonempty and any(t.shape[d] == 0 for d in dims):
        raise PrimTypeError(f"{name}: cannot reduce over an empty dim (no identity element)")
    shape = tuple(s for i, s in enumerate(t.shape) if i not in dims)
    return t, shape


def _reduction_rule(name: str, accepts: str, *, nonempty: bool = False):
    def infer(a, dims):
        t, shape = _reduced(name, a, dims, accepts, nonempty=nonempty)
        return result(shape, t.dtype, t.device)

    return infer


def _torch_reduction(fn, *, pass_dtype: bool = False):
    def run(a, dims):
        if not dims:
            return a.clone()
        return fn(a, list(dims), dtype=a.dtype) if pass_dtype else fn(a, list(dims))

    return run


def _numpy_accumulating(fn):
    """Accumulate float16 in float32 (as torch does) so the reference is not the weaker one."""

    def run(a, dims):
        if a.dtype == np.float16:
            return fn(a.astype(np.float32), axis=tuple(dims)).astype(np.float16)
        return fn(a, axis=tuple(dims))

    return run


def _torch_prod(a, dims, *, dtype):
    # torch.prod reduces one dim at a time; the last dims first keeps the earlier indices valid.
    for d in sorted(dims, reverse=True):
        a = torch.prod(a, d, dtype=dtype)
    return a


REDUCTIONS = {
    "sum": ("numeric", False, _torch_reduction(torch.sum, pass_dtype=True), np.sum, "sum over dims"),
    "prod": ("numeric", False, _torch_reduction(_torch_prod, pass_dtype=True), np.prod, "product over dims"),
    "amax": ("real", True, _torch_reduction(torch.amax), np.max, "maximum over dims; nan if any is nan"),
    "amin": ("real", True, _torch_reduction(torch.amin), np.min, "minimum over dims; nan if any is nan"),
}

for _name, (_accepts, _nonempty, _torch, _numpy, _doc) in REDUCTIONS.items():
    define_prim(
        f"prims.{_name}",
        "a: tensor, dims: ints",
        kind="reduction",
        infer=_reduction_rule(f"prims.{_name}", _accepts, nonempty=_nonempty),
        torch_impl=_torch,
        numpy_impl=_numpy_accumulating(_numpy),
        doc=f"The {_doc}.",
    )


def _arg_rule(name: str):
    def infer(a, dim):
        t, shape = _reduced(name, a, (dim,), "real_numeric", nonempty=True)
        return result(shape, torch.int64, t.device)

    return infer


def _numpy_arg(fn):
    def run(a, dim):
        # torch returns the first nan's index, as NumPy does; ties go to the first index in both.
        return fn(a, axis=dim).astype(np.int64)

    return run


for _name, _torch, _numpy in (("argmax", torch.argmax, np.argmax), ("argmin", torch.argmin, np.argmin)):
    define_prim(
        f"prims.{_name}",
        "a: tensor, dim: int",
        kind="reduction",
        infer=_arg_rule(f"prims.{_name}"),
        torch_impl=lambda a, dim, fn=_torch: fn(a, dim),
        numpy_impl=_numpy_arg(_numpy),
        doc=f"Index (int64) of the first {_name[3:]}imum along dim; nan counts as the {_name[3:]}imum.",
    )


def _var_mean_rule(a, dims, correction):
    t, shape = _reduced("prims.var_mean", a, dims, "float")
    if not isinstance(correction, (int, float)) or isinstance(correction, bool):
        raise PrimTypeError(f"prims.var_mean: correction must be a number, got {correction!r}")
    out = result(shape, t.dtype, t.device)
    return [out, out]


def _torch_var_mean(a, dims, correction):
    if not dims:  # variance of single elements: 0 (or nan when correction >= 1), like torch
        return torch.var_mean(a.unsqueeze(0), 0, correction=correction)
    return torch.var_mean(a, list(dims), correction=correction)


def _numpy_var_mean(a, dims, correction):
    axis = tuple(dims) if dims else None
    work = a.astype(np.float32) if a.dtype == np.float16 else a
    if axis is None:
        work = work[None]
        axis = 0
    with np.errstate(divide="ignore", invalid="ignore"):
        count = np.prod([work.shape[d] for d in np.atleast_1d(axis)]) if work.ndim else 1
        mean = (
            np.mean(work, axis=axis) if count else np.full(np.sum(work, axis=axis).shape, np.nan, work.dtype)
        )
        squares = np.sum((work - np.expand_dims(mean, axis)) ** 2, axis=axis)
        var = squares / np.asarray(max(count - correction, 0), work.dtype)
    return var.astype(a.dtype), mean.astype(a.dtype)


define_prim(
    "prims.var_mean",
    "a: tensor, dims: ints, correction: float",
    kind="reduction",
    infer=_var_mean_rule,
    torch_impl=_torch_var_mean,
    numpy_impl=_numpy_var_mean,
    num_outputs=2,
    doc="(variance, mean) over dims with Bessel-style `correction` (0: population, 1: sample). "
    "Backends compute it in one pass with Welford's algorithm.",
)
