"""View and shape prims: broadcast_in_dim, reshape, permute, slice, squeeze, expand_dims, collapse,
split_dim, flip, cat and pad.

Views (broadcast_in_dim, permute, slice, squeeze, expand_dims) declare the strides their torch
implementation produces on the input's strides; the others produce contiguous results. Dims are
non-negative ints; sizes may be symbolic.
"""

import numpy as np
import torch

from torchsmith.ir.symbolic import Dim, floordiv, format_dim, normalize_dim
from torchsmith.ir.types import TensorType
from torchsmith.prims.core import (
    check_dim,
    check_same_dtype,
    define_prim,
    dim_value,
    int_list,
    result,
    same_dim,
    shape_value,
    tensor_arg,
)
from torchsmith.prims.errors import PrimTypeError


def _view(t: TensorType, shape, strides) -> TensorType:
    return TensorType.make(shape, t.dtype, t.device, strides=strides)


def _numel(shape) -> Dim:
    total: Dim = 1
    for s in shape:
        total = normalize_dim(total * s)
    return total


# ---- broadcast_in_dim ----------------------------------------------------------------------------


def _broadcast_in_dim_rule(a, shape, broadcast_dims):
    name = "prims.broadcast_in_dim"
    t = tensor_arg(name, "the operand", a)
    shape = shape_value(name, shape)
    dims = int_list(name, broadcast_dims)
    if len(dims) != t.rank or any(not 0 <= d < len(shape) for d in dims) or list(dims) != sorted(set(dims)):
        raise PrimTypeError(
            f"{name}: broadcast_dims {list(dims)} must be {t.rank} increasing dims "
            f"of the {len(shape)}-d result"
        )
    strides: list[Dim] = [0] * len(shape)
    for i, d in enumerate(dims):
        if same_dim(t.shape[i], shape[d]):
            strides[d] = t.strides[i]
        elif t.shape[i] != 1:
            raise PrimTypeError(
                f"{name}: operand dim {i} of size {format_dim(t.shape[i])} cannot broadcast to "
                f"size {format_dim(shape[d])}"
            )
    return _view(t, shape, strides)


def _torch_broadcast_in_dim(a, shape, broadcast_dims):
    expanded = [1] * len(shape)
    for i, d in enumerate(broadcast_dims):
        expanded[d] = a.shape[i]
    return a.reshape(expanded).expand(shape)


def _numpy_broadcast_in_dim(a, shape, broadcast_dims):
    expanded = [1] * len(shape)
    for i, d in enumerate(broadcast_dims):
        expanded[d] = a.shape[i]
    return np.broadcast_to(a.reshape(expanded), shape)


define_prim(
    "prims.broadcast_in_dim",
    "a: tensor, shape: ints, broadcast_dims: ints",
    kind="view",
    infer=_broadcast_in_dim_rule,
    torch_impl=_torch_broadcast_in_dim,
    numpy_impl=_numpy_broadcast_in_dim,
    doc="A view of `a` with shape `shape`: operand dim i becomes result dim broadcast_dims[i] "
    "(equal size, or 1 to broadcast); the other result dims are new broadcast dims.",
)


# ---- reshape, collapse, split_dim ----------------------------------------------------------------


def _reshape_rule(a, shape):
    t = tensor_arg("prims.reshape", "the operand", a)
    shape = shape_value("prims.reshape", shape)
    if any(isinstance(s, int) and s < 0 for s in shape):
        raise PrimTypeError(f"prims.reshape: sizes must be non-negative (no -1), got {list(shape)}")
    before, after = _numel(t.shape), _numel(shape)
    if not same_dim(before, after) and isinstance(before - after, int):
        raise PrimTypeError(f"prims.reshape: cannot reshape {format_dim(before)} elements into {list(shape)}")
    return result(shape, t.dtype, t.device)


define_prim(
    "prims.reshape",
    "a: tensor, shape: ints",
    kind="shape",
    infer=_reshape_rule,
    torch_impl=lambda a, shape: a.reshape(shape),
    numpy_impl=lambda a, shape: np.reshape(a, shape),
    doc="`a` with a new shape of the same number of elements, in row-major order (copies if needed).",
)


def _collapse_rule(a, start, end):
    t = tensor_arg("prims.collapse", "the operand", a)
    if not (isinstance(start, int) and isinstance(end, int) and 0 <= start < end <= t.rank):
        raise PrimTypeError(f"prims.collapse: need 0 <= start < end <= rank {t.rank}, got {start}, {end}")
    return result(t.shape[:start] + (_numel(t.shape[start:end]),) + t.shape[end:], t.dtype, t.device)


def _collapsed_shape(shape, start, end):
    size = 1
    for s in shape[start:end]:
        size *= s
    return tuple(shape[:start]) + (size,) + tuple(shape[end:])


define_prim(
    "prims.collapse",
    "a: tensor, start: int, end: int",
    kind="shape",
    infer=_collapse_rule,
    torch_impl=lambda a, start, end: a.reshape(_collapsed_shape(a.shape, start, end)),
    numpy_impl=lambda a, start, end: a.reshape(_collapsed_shape(a.shape, start, end)),
    doc="Merge dims [start, end) into one dim (row-major).",
)


def _split_dim_rule(a, dim, outer):
    t = tensor_arg("prims.split_dim", "the operand", a)
    check_dim("prims.split_dim", dim, t.rank)
    outer = dim_value("prims.split_dim", outer)
    inner = floordiv(t.shape[dim], outer)
    if not same_dim(normalize_dim(inner * outer), t.shape[dim]) and isinstance(t.shape[dim], int):
        raise PrimTypeError(f"prims.split_dim: {outer} does not divide dim {dim} of size {t.shape[dim]}")
    return result(t.shape[:dim] + (outer, inner) + t.shape[dim + 1 :], t.dtype, t.device)


def _split_shape(shape, dim, outer):
    return tuple(shape[:dim]) + (outer, shape[dim] // outer) + tuple(shape[dim + 1 :])


define_prim(
    "prims.split_dim",
    "a: tensor, dim: int, outer: int",
    kind="shape",
    infer=_split_dim_rule,
    torch_impl=lambda a, dim, outer: a.reshape(_split_shape(a.shape, dim, outer)),
    numpy_impl=lambda a, dim, outer: a.reshape(_split_shape(a.shape, dim, outer)),
    doc="Split dim `dim` into (outer, size // outer).",
)


# ---- permute, squeeze, expand_dims, slice -----------------------------------------------------------


def _permute_rule(a, dims):
    t = tensor_arg("prims.permute", "the operand", a)
    dims = int_list("prims.permute", dims)
    if sorted(dims) != list(range(t.rank)):
        raise PrimTypeError(f"prims.permute: {list(dims)} is not a permutation of the {t.rank} dims")
    return _view(t, [t.shape[d] for d in dims], [t.strides[d] for d in dims])


define_prim(
    "prims.permute",
    "a: tensor, dims: ints",
    kind="view",
    infer=_permute_rule,
    torch_impl=lambda a, dims: a.permute(dims),
    numpy_impl=lambda a, dims: np.transpose(a, dims),
    doc="A view with result dim i taken from operand dim dims[i].",
)


def _squeeze_rule(a, dims):
    t = tensor_arg("prims.squeeze", "the operand", a)
    dims = int_list("prims.squeeze", dims)
    for d in dims:
        check_dim("prims.squeeze", d, t.rank)
        if t.shape[d] != 1:
            raise PrimTypeError(f"prims.squeeze: dim {d} has size {format_dim(t.shape[d])}, not 1")
    keep = [i for i in range(t.rank) if i not in dims]
    return _view(t, [t.shape[i] for i in keep], [t.strides[i] for i in keep])


define_prim(
    "prims.squeeze",
    "a: tensor, dims: ints",
    kind="view",
    infer=_squeeze_rule,
    torch_impl=lambda a, dims: a.squeeze(tuple(dims)) if dims else a.view(a.shape),
    numpy_impl=lambda a, dims: np.squeeze(a, tuple(dims)),
    doc="A view without the size-1 dims `dims`.",
)


def _expand_dims_rule(a, dims):
    t = tensor_arg("prims.expand_dims", "the operand", a)
    dims = int_list("prims.expand_dims", dims)
    rank = t.rank + len(dims)
    if len(set(dims)) != len(dims) or any(not 0 <= d < rank for d in dims):
        raise PrimTypeError(
            f"prims.expand_dims: dims {list(dims)} must be distinct dims of the {rank}-d result"
        )
    shape, strides, source = [], [], iter(zip(t.shape, t.strides))
    for i in range(rank):
        if i in dims:
            shape.append(1)
            strides.append(1)  # the stride of a size-1 dim is never used
        else:
            size, stride = next(source)
            shape.append(size)
            strides.append(stride)
    return _view(t, shape, strides)


def _expanded_shape(shape, dims):
    out, source = [], iter(shape)
    for i in range(len(shape) + len(dims)):
        out.append(1 if i in dims else next(source))
    return out


define_prim(
    "prims.expand_dims",
    "a: tensor, dims: ints",
    kind="view",
    infer=_expand_dims_rule,
    torch_impl=lambda a, dims: a.view(_expanded_shape(a.shape, dims)),
    numpy_impl=lambda a, dims: np.reshape(a, _expanded_shape(a.shape, dims)),
    doc="A view with new size-1 dims at result positions `dims` (unsqueeze).",
)


def _slice_rule(a, dim, start, stop, step):
    name = "prims.slice"
    t = tensor_arg(name, "the operand", a)
    check_dim(name, dim, t.rank)
    start, stop, step = (dim_value(name, x) for x in (start, stop, step))
    size = t.shape[dim]
    if not isinstance(step, int) or step < 1:
        raise PrimTypeError(f"{name}: step must be a positive int, got {step}")
    for bound in (start, stop):
        if (
            isinstance(bound, int)
            and bound < 0
            or (isinstance(size, int) and isinstance(bound, int) and bound > size)
        ):
            raise PrimTypeError(
                f"{name}: bounds {start}:{stop} must lie in [0, {size}] (decompositions clamp them)"
            )
    if isinstance(start, int) and isinstance(stop, int) and stop < start:
        raise PrimTypeError(f"{name}: stop {stop} is before start {start}")
    length = floordiv(normalize_dim(stop - start + step - 1), step)
    shape = t.shape[:dim] + (length,) + t.shape[dim + 1 :]
    strides = t.strides[:dim] + (normalize_dim(t.strides[dim] * step),) + t.strides[dim + 1 :]
    return _view(t, shape, strides)


def _index_tuple(rank, dim, item):
    return (slice(None),) * dim + (item,) + (slice(None),) * (rank - dim - 1)


define_prim(
    "prims.slice",
    "a: tensor, dim: int, start: int, stop: int, step: int",
    kind="view",
    infer=_slice_rule,
    torch_impl=lambda a, dim, start, stop, step: a[_index_tuple(a.dim(), dim, slice(start, stop, step))],
    numpy_impl=lambda a, dim, start, stop, step: a[_index_tuple(a.ndim, dim, slice(start, stop, step))],
    doc="A view of a[start:stop:step] along dim, with 0 <= start <= stop <= size and step >= 1.",
)


# ---- flip, cat, pad ---------------------------------------------------------------------------------


def _flip_rule(a, dims):
    t = tensor_arg("prims.flip", "the operand", a)
    for d in int_list("prims.flip", dims):
        check_dim("prims.flip", d, t.rank)
    return result(t.shape, t.dtype, t.device)


define_prim(
    "prims.flip",
    "a: tensor, dims: ints",
    kind="shape",
    infer=_flip_rule,
    torch_impl=lambda a, dims: torch.flip(a, list(dims)),
    numpy_impl=lambda a, dims: np.flip(a, tuple(dims)),
    doc="`a` reversed along dims.",
)


def _cat_rule(tensors, dim):
    if not isinstance(tensors, tuple) or not tensors:
        raise PrimTypeError(f"prims.cat: expected a non-empty list of tensors, got {tensors!r}")
    types = [tensor_arg("prims.cat", f"tensor {i}", x) for i, x in enumerate(tensors)]
    check_same_dtype("prims.cat", types)
    first = types[0]
    check_dim("prims.cat", dim, first.rank)
    for t in types[1:]:
        if t.rank != first.rank or not all(
            same_dim(a, b) for i, (a, b) in enumerate(zip(t.shape, first.shape)) if i != dim
        ):
            raise PrimTypeError(
                f"prims.cat: shapes {[format_dim(d) for d in first.shape]} and "
                f"{[format_dim(d) for d in t.shape]} "
                f"differ outside dim {dim}"
            )
    total = normalize_dim(sum((t.shape[dim] for t in types), 0))
    return result(first.shape[:dim] + (total,) + first.shape[dim + 1 :], first.dtype, first.device)


define_prim(
    "prims.cat",
    "tensors: tensors, dim: int",
    kind="shape",
    infer=_cat_rule,
    torch_impl=lambda tensors, dim: torch.cat(list(tensors), dim),
    numpy_impl=lambda tensors, dim: np.concatenate(list(tensors), axis=dim),
    doc="Tensors of one dtype joined along dim.",
)


def _pad_rule(a, pads, value):
    t = tensor_arg("prims.pad", "the operand", a)
    pads = shape_value("prims.pad", pads)
    if len(pads) != 2 * t.rank or any(isinstance(p, int) and p < 0 for p in pads):
        raise PrimTypeError(
            f"prims.pad: pads must be {2 * t.rank} non-negative sizes (low, high per dim, first dim first), "
            f"got {list(pads)}; slice for negative padding"
        )
    shape = [normalize_dim(s + pads[2 * i] + pads[2 * i + 1]) for i, s in enumerate(t.shape)]
    return result(shape, t.dtype, t.device)


def _torch_pad(a, pads, value):
    reversed_pairs = [p for i in reversed(range(a.dim())) for p in (pads[2 * i], pads[2 * i + 1])]
    return torch.constant_pad_nd(a, reversed_pairs, value)


define_prim(
    "prims.pad",
    "a: tensor, pads: ints, value: scalar",
    kind="shape",
    infer=_pad_rule,
    torch_impl=_torch_pad,
    numpy_impl=lambda a, pads, value: (
        np.pad(a, [(pads[2 * i], pads[2 * i + 1]) for i in range(a.ndim)], constant_values=value)
        if a.ndim
        else a.copy()
    ),
    doc="`a` padded with `value`: pads holds (low, high) for each dim, first dim first.",
)
