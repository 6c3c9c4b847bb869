"""Indexing prims: gather, scatter, scatter_add, index and index_put.

Index tensors are int64 and already in range and non-negative (decompositions wrap negative
indices); `index` and `index_put` take index tensors of one shape (decompositions broadcast them)
and no boolean masks (their result shape depends on data; unsupported by design).
"""

import numpy as np
import torch

from torchsmith.ir.symbolic import format_dim
from torchsmith.prims.core import (
    check_dim,
    check_same_dtype,
    check_same_shape,
    define_prim,
    result,
    same_dim,
    tensor_arg,
)
from torchsmith.prims.errors import PrimTypeError


def _index_type(name: str, index):
    t = tensor_arg(name, "the index", index)
    if t.dtype != torch.int64:
        raise PrimTypeError(f"{name}: index tensors must be int64, got {t.dtype}")
    return t


def _gather_rule(a, dim, index):
    t = tensor_arg("prims.gather", "the operand", a)
    i = _index_type("prims.gather", index)
    check_dim("prims.gather", dim, max(t.rank, 1))
    if i.rank != t.rank:
        raise PrimTypeError(f"prims.gather: index has rank {i.rank}, the operand {t.rank}; they must match")
    return result(i.shape, t.dtype, t.device)


def _mesh(index: np.ndarray, dim: int):
    """Open-mesh coordinates of every index element, with `dim`'s coordinate replaced by the index."""
    coords = list(np.indices(index.shape, sparse=True))
    coords[dim] = index
    return tuple(coords)


def _numpy_gather(a, dim, index):
    if a.ndim == 0:
        return a[()].reshape(()).copy() if index.ndim == 0 else a.reshape(-1)[index]
    return a[_mesh(index, dim)]


define_prim(
    "prims.gather",
    "a: tensor, dim: int, index: tensor",
    kind="indexing",
    infer=_gather_rule,
    torch_impl=lambda a, dim, index: torch.gather(a, dim, index),
    numpy_impl=_numpy_gather,
    doc="out[i][j][k] = a[index[i][j][k]][j][k] for dim 0 (and likewise for other dims).",
)


def _scatter_rule(name: str):
    def infer(a, dim, index, src):
        t = tensor_arg(name, "the operand", a)
        i = _index_type(name, index)
        s = tensor_arg(name, "the source", src)
        check_same_dtype(name, [t, s])
        check_dim(name, dim, max(t.rank, 1))
        if not i.rank == s.rank == t.rank:
            raise PrimTypeError(
                f"{name}: operand, index and source ranks {t.rank}, {i.rank}, {s.rank} must match"
            )
        return result(t.shape, t.dtype, t.device)

    return infer


def _numpy_scatter(accumulate: bool):
    def run(a, dim, index, src):
        out = a.copy()
        if a.ndim == 0:
            return src.copy() if not accumulate else out + src
        values = src[tuple(slice(0, n) for n in index.shape)]
        if accumulate:
            np.add.at(out, _mesh(index, dim), values)
        else:
            out[_mesh(index, dim)] = values
        return out

    return run


define_prim(
    "prims.scatter",
    "a: tensor, dim: int, index: tensor, src: tensor",
    kind="indexing",
    infer=_scatter_rule("prims.scatter"),
    torch_impl=lambda a, dim, index, src: torch.scatter(a, dim, index, src),
    numpy_impl=_numpy_scatter(False),
    doc="A copy of `a` with out[index[i][j]][j] = src[i][j] (dim 0); which of several writes to one "
    "element wins is unspecified.",
)
define_prim(
    "prims.scatter_add",
    "a: tensor, dim: int, index: tensor, src: tensor",
    kind="indexing",
    infer=_scatter_rule("prims.scatter_add"),
    torch_impl=lambda a, dim, index, src: torch.scatter_add(a, dim, index, src),
    numpy_impl=_numpy_scatter(True),
    doc="A copy of `a` with out[index[i][j]][j] += src[i][j] (dim 0), accumulating duplicates.",
)


def indexed_shape(name: str, t, indices):
    if not isinstance(indices, tuple) or len(indices) > t.rank or all(i is None for i in indices):
        raise PrimTypeError(f"{name}: expected 1 to {t.rank} index tensors or None, got {indices!r}")
    index_types = [_index_type(name, i) for i in indices if i is not None]
    check_same_shape(name, index_types)
    positions = [p for p, i in enumerate(indices) if i is not None]
    index_shape = index_types[0].shape
    rest = [t.shape[p] for p in range(t.rank) if p not in positions]
    if positions == list(range(positions[0], positions[-1] + 1)):
        # Adjacent index tensors replace their dims in place; separated ones go first (NumPy's rule).
        return tuple(t.shape[: positions[0]]) + tuple(index_shape) + tuple(t.shape[positions[-1] + 1 :])
    return tuple(index_shape) + tuple(rest)


def _index_rule(a, indices):
    t = tensor_arg("prims.index", "the operand", a)
    return result(indexed_shape("prims.index", t, indices), t.dtype, t.device)


def _numpy_key(indices):
    return tuple(slice(None) if i is None else i for i in indices)


define_prim(
    "prims.index",
    "a: tensor, indices: tensors",
    kind="indexing",
    infer=_index_rule,
    torch_impl=lambda a, indices: torch.ops.aten.index.Tensor(a, list(indices)),
    numpy_impl=lambda a, indices: a[_numpy_key(indices)],
    doc="Advanced indexing a[i0, i1, ...] with int64 index tensors of one shape (None keeps a dim whole).",
)


def _index_put_rule(a, indices, values, accumulate):
    t = tensor_arg("prims.index_put", "the operand", a)
    v = tensor_arg("prims.index_put", "the values", values)
    check_same_dtype("prims.index_put", [t, v])
    shape = indexed_shape("prims.index_put", t, indices)
    if len(shape) != v.rank or not all(same_dim(x, y) for x, y in zip(shape, v.shape)):
        raise PrimTypeError(
            f"prims.index_put: values have shape {[format_dim(d) for d in v.shape]} but the indexed "
            f"shape is {[format_dim(d) for d in shape]}; broadcast them first"
        )
    if not isinstance(accumulate, bool):
        raise PrimTypeError(f"prims.index_put: accumulate must be a bool, got {accumulate!r}")
    return result(t.shape, t.dtype, t.device)


def _numpy_index_put(a, indices, values, accumulate):
    out = a.copy()
    if accumulate:
        np.add.at(out, _numpy_key(indices), values)
    else:
        out[_numpy_key(indices)] = values
    return out


define_prim(
    "prims.index_put",
    "a: tensor, indices: tensors, values: tensor, accumulate: bool",
    kind="indexing",
    infer=_index_put_rule,
    torch_impl=lambda a, indices, values, accumulate: torch.ops.aten.index_put.default(
        a, list(indices), values, accumulate
    ),
    numpy_impl=_numpy_index_put,
    doc="A copy of `a` with a[indices] = values (or += when accumulate, adding duplicates); values "
    "have exactly the indexed shape.",
)
