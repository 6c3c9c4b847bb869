"""Decompositions of the ops functionalization writes: `*_scatter` (a view's new values written
back into its base), `copy` and `lift_fresh`. Each writes with `prims.index_put` at positions
made by `prims.iota`, which works for every step and on symbolic sizes."""

import torch

from torchsmith.ir.symbolic import normalize_dim
from torchsmith.prims.decompose import register_decomposition
from torchsmith.prims.decompositions.shapes import _clamp_bound, _dim, _wrap


def _write(e, base, dim, positions, src):
    """`base` with `src` written at `positions` along `dim` (src has the indexed shape)."""
    src = e.to(src, e.type(base).dtype)
    return e.index_put(base, [None] * dim + [positions], src, False)


@register_decomposition("aten.slice_scatter.default")
def slice_scatter(e, base, src, dim=0, start=None, end=None, step=1):
    t = e.type(base)
    d = _wrap(dim, t.rank)
    lo = _clamp_bound(start, t.shape[d], 0)
    positions = e.iota(e.type(src).shape[d], lo, step, dtype=torch.int64, device=t.device)
    return _write(e, base, d, positions, src)


@register_decomposition("aten.select_scatter.default")
def select_scatter(e, base, src, dim, index):
    t = e.type(base)
    d = _wrap(dim, t.rank)
    index = _dim(index)
    if isinstance(index, int) and index < 0:
        index = normalize_dim(t.shape[d] + index)
    positions = e.iota(1, index, 1, dtype=torch.int64, device=t.device)
    return _write(e, base, d, positions, e.expand_dims(src, [d]))


@register_decomposition("aten.diagonal_scatter.default")
def diagonal_scatter(e, base, src, offset=0, dim1=0, dim2=1):
    t = e.type(base)
    d1, d2 = _wrap(dim1, t.rank), _wrap(dim2, t.rank)
    others = [i for i in range(t.rank) if i not in (d1, d2)]
    order = others + [d1, d2]
    moved = e.permute(base, order) if order != list(range(t.rank)) else base
    length = e.type(src).shape[-1]
    rows = e.iota(length, max(-offset, 0), 1, dtype=torch.int64, device=t.device)
    cols = e.iota(length, max(offset, 0), 1, dtype=torch.int64, device=t.device)
    written = e.index_put(moved, [None] * len(others) + [rows, cols], e.to(src, t.dtype), False)
    inverse = [order.index(i) for i in range(t.rank)]
    return e.permute(written, inverse) if order != list(range(t.rank)) else written


@register_decomposition("aten.copy.default")
def copy(e, base, src, non_blocking=False):
    t = e.type(base)
    if e.type(src).device != t.device:
        return e.aten("aten._to_copy.default", src, dtype=t.dtype, device=t.device)
    return e.broadcast_to(
        e.clone(e.to(src, t.dtype)) if e.type(src).dtype == t.dtype else e.to(src, t.dtype), t.shape
    )


@register_decomposition("aten.lift_fresh.default")
def lift_fresh(e, a):
    return a
