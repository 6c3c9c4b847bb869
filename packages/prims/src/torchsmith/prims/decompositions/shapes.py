"""Decompositions of view, shape and creation ops: view/reshape, permute/transpose/t,
(un)squeeze, expand, slice/select, cat/stack/split/unbind, constant_pad_nd, flip, and the
full/zeros/ones/arange/*_like creators."""

import sys

import sympy
import torch

from torchsmith.ir import Value
from torchsmith.ir.symbolic import Dim, floordiv, normalize_dim, sym_max, sym_min
from torchsmith.ir.types import SymIntType
from torchsmith.prims.core import same_dim
from torchsmith.prims.decompose import KEEP, register_decomposition
from torchsmith.prims.decompositions.reductions import normalize_dims
from torchsmith.prims.errors import DecompositionError
from torchsmith.prims.promotion import result_type


def _dim(x) -> Dim:
    return x.type.expr if isinstance(x, Value) and isinstance(x.type, SymIntType) else x


def _wrap(dim: int, rank: int) -> int:
    """A non-negative dim (a 0-d tensor accepts 0 and -1)."""
    wrapped = dim + max(rank, 1) if dim < 0 else dim
    if not 0 <= wrapped < max(rank, 1):
        raise DecompositionError(f"dim {dim} out of range for rank {rank}")
    return wrapped


def _numel(shape) -> Dim:
    total: Dim = 1
    for s in shape:
        total = normalize_dim(total * s)
    return total


@register_decomposition("aten.view.default", "aten._unsafe_view.default", "aten.reshape.default")
def view(e, a, size):
    t = e.type(a)
    shape = [_dim(s) for s in size]
    if -1 in shape:
        known = _numel([s for s in shape if not (isinstance(s, int) and s == -1)])
        shape[shape.index(-1)] = floordiv(_numel(t.shape), known) if known != 0 else 0
    if len(shape) == t.rank and all(same_dim(a_, b) for a_, b in zip(shape, t.shape)):
        return a
    return e.reshape(a, shape)


@register_decomposition("aten.permute.default")
def permute(e, a, dims):
    rank = e.type(a).rank
    dims = [_wrap(d, rank) for d in dims]
    return a if dims == list(range(rank)) else e.permute(a, dims)


@register_decomposition("aten.transpose.int")
def transpose(e, a, dim0, dim1):
    rank = e.type(a).rank
    if rank == 0:
        return a
    dims = list(range(rank))
    d0, d1 = _wrap(dim0, rank), _wrap(dim1, rank)
    dims[d0], dims[d1] = dims[d1], dims[d0]
    return permute(e, a, dims)


@register_decomposition("aten.t.default")
def t(e, a):
    return transpose(e, a, 0, 1) if e.type(a).rank == 2 else a


@register_decomposition("aten.unsqueeze.default")
def unsqueeze(e, a, dim):
    rank = e.type(a).rank
    return e.expand_dims(a, [dim + rank + 1 if dim < 0 else dim])


@register_decomposition("aten.squeeze.dim", "aten.squeeze.dims", "aten.squeeze.default")
def squeeze(e, a, dim=None):
    t = e.type(a)
    dims = range(t.rank) if dim is None else normalize_dims(e, a, dim if isinstance(dim, int) else list(dim))
    if dim is not None and isinstance(dim, (list, tuple)) and len(dim) == 0:
        return a
    ones = [d for d in dims if isinstance(t.shape[d], int) and t.shape[d] == 1]
    return e.squeeze(a, ones) if ones else a


@register_decomposition("aten.expand.default")
def expand(e, a, size, *, implicit=False):
    t = e.type(a)
    shape = [_dim(s) for s in size]
    offset = len(shape) - t.rank
    shape = [t.shape[i - offset] if isinstance(s, int) and s == -1 else s for i, s in enumerate(shape)]
    return e.broadcast_to(a, shape)


def _clamp_bound(bound, size, default):
    """A slice bound as a valid index in [0, size]: None, negative and too-large bounds resolved."""
    if bound is None:
        return default
    bound = _dim(bound)
    if isinstance(bound, int):
        if bound >= sys.maxsize or (isinstance(size, int) and bound >= size):
            return size
        if bound < 0:
            # On a symbolic size the clamp stays in the expression: max(s0 - 100, 0).
            return max(size + bound, 0) if isinstance(size, int) else sym_max(normalize_dim(size + bound), 0)
        if not isinstance(size, int):
            return sym_min(bound, size)
    return bound


@register_decomposition("aten.slice.Tensor")
def slice_(e, a, dim=0, start=None, end=None, step=1):
    t = e.type(a)
    d = _wrap(dim, t.rank)
    size = t.shape[d]
    lo, hi = _clamp_bound(start, size, 0), _clamp_bound(end, size, size)
    if isinstance(lo, int) and isinstance(hi, int) and hi < lo:
        hi = lo
    elif not (isinstance(lo, int) and isinstance(hi, int)):
        hi = sym_max(hi, lo)
    if (isinstance(lo, int) and lo == 0) and same_dim(hi, size) and step == 1:
        return a
    return e.slice(a, d, lo, hi, step)


@register_decomposition("aten.select.int")
def select(e, a, dim, index):
    t = e.type(a)
    d = _wrap(dim, t.rank)
    index = _dim(index)
    if isinstance(index, int) and index < 0:
        index = normalize_dim(t.shape[d] + index)
    return e.squeeze(e.slice(a, d, index, normalize_dim(index + 1), 1), [d])


@register_decomposition("aten.cat.default")
def cat(e, tensors, dim=0):
    # Legacy rule: 1-d empty tensors are skipped whatever the others' rank.
    kept = [x for x in tensors if not (e.type(x).rank == 1 and e.type(x).shape[0] == 0)] or list(tensors[:1])
    dtype = result_type(*tensors)
    rank = e.type(kept[0]).rank
    converted = [e.to(x, dtype) for x in kept]
    if len(converted) == 1:
        return e.clone(converted[0]) if converted[0] is kept[0] else converted[0]
    return e.cat(converted, _wrap(dim, rank))


@register_decomposition("aten.stack.default")
def stack(e, tensors, dim=0):
    rank = e.type(tensors[0]).rank + 1
    d = dim + rank if dim < 0 else dim
    return cat(e, [e.expand_dims(x, [d]) for x in tensors], d)


@register_decomposition(
    "aten.split.Tensor", "aten.split_with_sizes.default", declines="an int split size over a symbolic dim"
)
def split(e, a, split_size, dim=0):
    t = e.type(a)
    d = _wrap(dim, t.rank)
    size = t.shape[d]
    if isinstance(split_size, (list, tuple)):
        sizes = [_dim(s) for s in split_size]
    else:
        if not isinstance(size, int):
            return KEEP  # the number of pieces depends on a symbolic size
        chunk = _dim(split_size)
        sizes = [min(chunk, size - i) for i in range(0, size, chunk)] or [0]
    pieces, offset = [], 0
    for s in sizes:
        end = normalize_dim(offset + s)
        pieces.append(a if len(sizes) == 1 else e.slice(a, d, offset, end, 1))
        offset = end
    return tuple(pieces)


@register_decomposition("aten.unbind.int", declines="a symbolic dim")
def unbind(e, a, dim=0):
    t = e.type(a)
    d = _wrap(dim, t.rank)
    if not isinstance(t.shape[d], int):
        return KEEP
    return tuple(e.squeeze(e.slice(a, d, i, i + 1, 1), [d]) for i in range(t.shape[d]))


@register_decomposition("aten.constant_pad_nd.default")
def constant_pad_nd(e, a, pad, value=0):
    t = e.type(a)
    pads = [0] * (2 * t.rank)
    for i in range(len(pad) // 2):  # pad lists the last dim first
        d = t.rank - 1 - i
        pads[2 * d], pads[2 * d + 1] = _dim(pad[2 * i]), _dim(pad[2 * i + 1])
    x = a
    for d in range(t.rank):  # negative padding crops
        lo, hi = pads[2 * d], pads[2 * d + 1]
        if (isinstance(lo, int) and lo < 0) or (isinstance(hi, int) and hi < 0):
            size = e.type(x).shape[d]
            x = e.slice(
                x,
                d,
                -lo if isinstance(lo, int) and lo < 0 else 0,
                normalize_dim(size + hi) if isinstance(hi, int) and hi < 0 else size,
                1,
            )
            pads[2 * d], pads[2 * d + 1] = (
                max(lo, 0) if isinstance(lo, int) else lo,
                max(hi, 0) if isinstance(hi, int) else hi,
            )
    if t.dtype == torch.bool:
        value = bool(value)
    elif not t.dtype.is_floating_point and isinstance(value, float):
        value = int(value)
    if all(isinstance(p, int) and p == 0 for p in pads):
        return e.clone(x) if x is a else x
    return e.pad(x, pads, value)


@register_decomposition("aten.flip.default")
def flip(e, a, dims):
    rank = e.type(a).rank
    return e.flip(a, [_wrap(d, rank) for d in dims])


# ---- creation -------------------------------------------------------------------------------------------


def _fill(e, shape, value, dtype, device):
    dtype = dtype or (torch.int64 if isinstance(value, int) else torch.get_default_dtype())
    if isinstance(value, bool) and dtype != torch.bool:
        value = int(value)
    if not dtype.is_floating_point and isinstance(value, float):
        value = int(value)
    if dtype == torch.bool:
        value = bool(value)
    return e.full([_dim(s) for s in shape], value, dtype=dtype, device=str(torch.device(device or "cpu")))


@register_decomposition("aten.full.default")
def full(e, size, fill_value, *, dtype=None, layout=None, device=None, pin_memory=None):
    if dtype is None and isinstance(fill_value, bool):
        dtype = torch.bool
    return _fill(e, size, fill_value, dtype, device)


@register_decomposition("aten.zeros.default", "aten.ones.default")
def zeros_ones(e, size, *, dtype=None, layout=None, device=None, pin_memory=None):
    return _fill(
        e, size, int(e.current_op.startswith("aten.ones")), dtype or torch.get_default_dtype(), device
    )


@register_decomposition("aten.scalar_tensor.default")
def scalar_tensor(e, s, *, dtype=None, layout=None, device=None, pin_memory=None):
    return _fill(e, [], s, dtype or torch.get_default_dtype(), device)


@register_decomposition(
    "aten.full_like.default", "aten.zeros_like.default", "aten.ones_like.default", "aten.empty_like.default"
)
def like(e, a, fill_value=None, *, dtype=None, layout=None, device=None, pin_memory=None, memory_format=None):
    t = e.type(a)
    op = e.current_op.split(".")[1]
    value = {"zeros_like": 0, "ones_like": 1, "empty_like": 0}.get(op, fill_value)
    return _fill(e, t.shape, value, dtype or t.dtype, device or t.device)


@register_decomposition(
    "aten.new_zeros.default", "aten.new_ones.default", "aten.new_full.default", "aten.new_empty.default"
)
def new_filled(e, a, size, fill_value=None, *, dtype=None, layout=None, device=None, pin_memory=None):
    t = e.type(a)
    op = e.current_op.split(".")[1]
    value = {"new_zeros": 0, "new_ones": 1, "new_empty": 0}.get(op, fill_value)
    return _fill(e, size, value, dtype or t.dtype, device or t.device)


@register_decomposition("aten.empty.memory_format")
def empty(e, size, *, dtype=None, layout=None, device=None, pin_memory=None, memory_format=None):
    return e.empty(
        [_dim(s) for s in size],
        dtype=dtype or torch.get_default_dtype(),
        device=str(torch.device(device or "cpu")),
    )


@register_decomposition("aten.arange.start_step", "aten.arange.start", "aten.arange.default")
def arange(e, start, end=None, step=1, *, dtype=None, layout=None, device=None, pin_memory=None):
    if end is None:
        start, end = 0, start
    start, end, step = _dim(start), _dim(end), _dim(step)
    values = [v for v in (start, end, step)]
    if dtype is None:
        dtype = torch.get_default_dtype() if any(isinstance(v, float) for v in values) else torch.int64
    if all(isinstance(v, (int, sympy.Expr)) for v in values):
        length = floordiv(normalize_dim(end - start + step - (1 if step > 0 else -1)), step)
    else:
        import math

        length = max(math.ceil((end - start) / step), 0)
    device = str(torch.device(device or "cpu"))
    if dtype.is_floating_point and any(isinstance(v, float) for v in values):
        # Eager computes start + i * step in double and rounds once; so do we.
        index = e.iota(length, 0, 1, dtype=torch.float64, device=device)
        return e.to(e.add(e.mul(index, float(step)), float(start)), dtype)
    return e.iota(length, start, step, dtype=dtype, device=device)


@register_decomposition("aten.repeat.default")
def repeat(e, a, repeats):
    t = e.type(a)
    repeats = [_dim(r) for r in repeats]
    shape = [1] * (len(repeats) - t.rank) + list(t.shape)
    # Broadcast each dim s to (r, s) and merge: row-major order repeats whole blocks, as repeat does.
    expanded = [d for r, s in zip(repeats, shape) for d in (r, s)]
    source = e.reshape(a, shape) if len(shape) != t.rank else a
    spread = e.broadcast_in_dim(source, expanded, [2 * i + 1 for i in range(len(shape))])
    return e.reshape(spread, [normalize_dim(r * s) for r, s in zip(repeats, shape)])


@register_decomposition("aten.slice_backward.default")
def slice_backward(e, grad, input_sizes, dim, start, end, step):
    g = e.type(grad)
    shape = [_dim(s) for s in input_sizes]
    d = _wrap(dim, len(shape))
    size = shape[d]
    lo = _clamp_bound(start, size, 0)
    if step == 1:
        pads = [0] * (2 * len(shape))
        pads[2 * d], pads[2 * d + 1] = lo, normalize_dim(size - lo - g.shape[d])
        return e.pad(grad, pads, 0.0 if g.dtype.is_floating_point else 0)
    positions = e.iota(g.shape[d], lo, step, dtype=torch.int64, device=g.device)
    zeros = e.full(shape, 0.0 if g.dtype.is_floating_point else 0, dtype=g.dtype, device=g.device)
    return e.index_put(zeros, [None] * d + [positions], grad, False)


@register_decomposition("aten.select_backward.default")
def select_backward(e, grad, input_sizes, dim, index):
    g = e.type(grad)
    shape = [_dim(s) for s in input_sizes]
    d = _wrap(dim, len(shape))
    index = _dim(index)
    if isinstance(index, int) and index < 0:
        index = normalize_dim(shape[d] + index)
    pads = [0] * (2 * len(shape))
    pads[2 * d], pads[2 * d + 1] = index, normalize_dim(shape[d] - index - 1)
    return e.pad(e.expand_dims(grad, [d]), pads, 0.0 if g.dtype.is_floating_point else 0)


@register_decomposition("aten.tril.default", "aten.triu.default")
def tril_triu(e, a, diagonal=0):
    t = e.type(a)
    rows, cols = t.shape[-2:]
    r = e.iota(rows, 0, 1, dtype=torch.int64, device=t.device)
    c = e.iota(cols, 0, 1, dtype=torch.int64, device=t.device)
    # tril keeps col - row <= diagonal; triu keeps col - row >= diagonal.
    offset = e.sub(e.broadcast_in_dim(c, [rows, cols], [1]), e.broadcast_in_dim(r, [rows, cols], [0]))
    keep = e.le(offset, diagonal) if e.current_op.startswith("aten.tril") else e.ge(offset, diagonal)
    keep = e.broadcast_in_dim(keep, list(t.shape), [t.rank - 2, t.rank - 1])
    zero = False if t.dtype == torch.bool else (0.0 if t.dtype.is_floating_point else 0)
    return e.where(keep, a, zero)


@register_decomposition("aten.empty_strided.default")
def empty_strided(e, size, stride, *, dtype=None, layout=None, device=None, pin_memory=None):
    return e.empty_strided(
        [_dim(s) for s in size],
        [_dim(s) for s in stride],
        dtype=dtype or torch.get_default_dtype(),
        device=str(torch.device(device or "cpu")),
    )
