"""Decompositions of reductions and softmax: sum, mean, prod, amax/amin, max/min, argmax/argmin,
var/std/var_mean (Welford prim), any/all, cumsum, logsumexp, softmax and log_softmax with their
backward ops. Low-precision floats accumulate in float32 and round once at the end, as eager does."""

import torch

from torchsmith.ir.symbolic import normalize_dim
from torchsmith.prims.core import dtype_category
from torchsmith.prims.decompose import register_decomposition
from torchsmith.prims.errors import DecompositionError
from torchsmith.prims.promotion import opmath_dtype


def normalize_dims(e, a, dims) -> list[int]:
    """Non-negative, sorted reduction dims; None or [] mean every dim, as in ATen."""
    rank = e.type(a).rank
    if dims is None or (isinstance(dims, (tuple, list)) and len(dims) == 0):
        return list(range(rank))
    dims = [dims] if isinstance(dims, int) else list(dims)
    wrapped = [d + max(rank, 1) if d < 0 else d for d in dims]
    if any(not 0 <= d < max(rank, 1) for d in wrapped):
        raise DecompositionError(f"dims {dims} out of range for rank {rank}")
    return sorted(set(d for d in wrapped if d < rank))


def keep_dims(e, x, dims: list[int], rank: int):
    """Re-insert reduced dims as size 1 (keepdim=True)."""
    return e.expand_dims(x, dims) if dims else x


def reduced_count(e, a, dims):
    count = 1
    for d in dims:
        count = normalize_dim(count * e.type(a).shape[d])
    return count


def _accumulate(e, a, dtype):
    """`a` in the dtype sums accumulate in: the requested dtype, int64 for integers, opmath for floats."""
    t = e.type(a)
    if dtype is None:
        dtype = torch.int64 if dtype_category(t.dtype) in ("bool", "int") else t.dtype
    return e.to(a, opmath_dtype(dtype)), dtype


@register_decomposition("aten.sum.dim_IntList", "aten.sum.default")
def sum_(e, a, dim=None, keepdim=False, *, dtype=None):
    dims = normalize_dims(e, a, dim)
    work, dtype = _accumulate(e, a, dtype)
    out = e.to(e.sum(work, dims), dtype)
    return keep_dims(e, out, dims, e.type(a).rank) if keepdim else out


@register_decomposition("aten.mean.dim", "aten.mean.default")
def mean(e, a, dim=None, keepdim=False, *, dtype=None):
    dims = normalize_dims(e, a, dim)
    dtype = dtype or e.type(a).dtype
    if dtype_category(dtype) != "float":
        raise DecompositionError(f"mean of {dtype}: eager needs a floating dtype too")
    work = e.to(a, opmath_dtype(dtype))
    out = e.to(e.div(e.sum(work, dims), reduced_count(e, a, dims)), dtype)
    return keep_dims(e, out, dims, e.type(a).rank) if keepdim else out


@register_decomposition("aten.prod.dim_int", "aten.prod.default")
def prod(e, a, dim=None, keepdim=False, *, dtype=None):
    dims = normalize_dims(e, a, dim)
    work, dtype = _accumulate(e, a, dtype)
    out = e.to(e.prod(work, dims), dtype)
    return keep_dims(e, out, dims, e.type(a).rank) if keepdim else out


@register_decomposition("aten.amax.default", "aten.amin.default")
def amax_amin(e, a, dim=(), keepdim=False):
    dims = normalize_dims(e, a, dim)
    out = e.prim("prims." + e.current_op.split(".")[1], a, dims)
    return keep_dims(e, out, dims, e.type(a).rank) if keepdim else out


@register_decomposition("aten.max.default", "aten.min.default")
def max_min_all(e, a):
    return e.prim("prims.a" + e.current_op.split(".")[1], a, normalize_dims(e, a, None))


@register_decomposition("aten.max.dim", "aten.min.dim")
def max_min_dim(e, a, dim, keepdim=False):
    kind = e.current_op.split(".")[1]
    dims = normalize_dims(e, a, dim)
    if not dims:  # 0-d: the value itself at index 0
        return e.clone(a), e.full([], 0, dtype=torch.int64, device=e.type(a).device)
    values = e.prim(f"prims.a{kind}", a, dims)
    indices = e.prim(f"prims.arg{kind}", a, dims[0])
    if keepdim:
        values, indices = e.expand_dims(values, dims), e.expand_dims(indices, dims)
    return values, indices


@register_decomposition("aten.argmax.default", "aten.argmin.default")
def argmax_argmin(e, a, dim=None, keepdim=False):
    t = e.type(a)
    if dim is None:
        flat = e.reshape(a, [reduced_count(e, a, range(t.rank))]) if t.rank != 1 else a
        out = e.prim("prims." + e.current_op.split(".")[1], flat, 0)
        return e.reshape(out, [1] * t.rank) if keepdim else out
    dims = normalize_dims(e, a, dim)
    if not dims:
        return e.full([], 0, dtype=torch.int64, device=t.device)
    out = e.prim("prims." + e.current_op.split(".")[1], a, dims[0])
    return keep_dims(e, out, dims, t.rank) if keepdim else out


@register_decomposition("aten.var_mean.correction")
def var_mean(e, a, dim=None, *, correction=None, keepdim=False):
    dims = normalize_dims(e, a, dim)
    dtype = e.type(a).dtype
    var, mean_ = e.var_mean(e.to(a, opmath_dtype(dtype)), dims, 1 if correction is None else correction)
    var, mean_ = e.to(var, dtype), e.to(mean_, dtype)
    if keepdim:
        var, mean_ = keep_dims(e, var, dims, 0), keep_dims(e, mean_, dims, 0)
    return var, mean_


@register_decomposition("aten.var.correction")
def var(e, a, dim=None, *, correction=None, keepdim=False):
    return var_mean(e, a, dim, correction=correction, keepdim=keepdim)[0]


@register_decomposition("aten.std.correction")
def std(e, a, dim=None, *, correction=None, keepdim=False):
    dims = normalize_dims(e, a, dim)
    dtype = e.type(a).dtype
    v, _ = e.var_mean(e.to(a, opmath_dtype(dtype)), dims, 1 if correction is None else correction)
    out = e.to(e.sqrt(v), dtype)
    return keep_dims(e, out, dims, 0) if keepdim else out


@register_decomposition(
    "aten.any.default", "aten.any.dim", "aten.any.dims", "aten.all.default", "aten.all.dim", "aten.all.dims"
)
def any_all(e, a, dim=None, keepdim=False):
    t = e.type(a)
    dims = normalize_dims(e, a, dim)
    is_any = e.current_op.startswith("aten.any")
    flags = a if t.dtype == torch.bool else e.ne(a, 0)
    if any(t.shape[d] == 0 for d in dims):  # the empty reduction: any is False, all is True
        shape = [s for i, s in enumerate(t.shape) if i not in dims]
        out = e.full(shape, not is_any, dtype=torch.bool, device=t.device)
    else:
        out = e.amax(flags, dims) if is_any else e.amin(flags, dims)
    if t.dtype == torch.uint8:
        out = e.convert_element_type(out, torch.uint8)  # eager keeps uint8 for legacy reasons
    return keep_dims(e, out, dims, t.rank) if keepdim else out


@register_decomposition("aten.cumsum.default")
def cumsum(e, a, dim, *, dtype=None):
    d = normalize_dims(e, a, dim)
    work, dtype = _accumulate(e, a, dtype)
    return e.to(e.cumsum(work, d[0] if d else 0), dtype)


@register_decomposition("aten.logsumexp.default")
def logsumexp(e, a, dim, keepdim=False):
    t = e.type(a)
    dims = normalize_dims(e, a, dim)
    dtype = t.dtype if dtype_category(t.dtype) == "float" else torch.get_default_dtype()
    x = e.to(a, opmath_dtype(dtype))
    if not dims:
        return e.to(x, dtype) if x is not a else e.clone(a)
    m = e.amax(x, dims)
    # An infinite max would give inf - inf = nan; shift by 0 there instead, as eager does.
    m = e.where(e.isinf(m), 0.0, m)
    shifted = e.sub(x, e.broadcast_in_dim(m, list(t.shape), [i for i in range(t.rank) if i not in dims]))
    out = e.add(e.log(e.sum(e.exp(shifted), dims)), m)
    out = e.to(out, dtype)
    return keep_dims(e, out, dims, t.rank) if keepdim else out


def _softmax_parts(e, a, dim, half_to_float):
    t = e.type(a)
    dims = normalize_dims(e, a, dim)
    out_dtype = torch.float32 if half_to_float else t.dtype
    x = e.to(a, opmath_dtype(t.dtype))
    if not dims:  # softmax over a 0-d tensor: one element
        return x, None, None, out_dtype
    back = [i for i in range(t.rank) if i not in dims]
    m = e.broadcast_in_dim(e.amax(x, dims), list(t.shape), back)
    shifted = e.sub(x, m)
    return shifted, dims, back, out_dtype


@register_decomposition("aten._softmax.default")
def softmax(e, a, dim, half_to_float):
    shifted, dims, back, out_dtype = _softmax_parts(e, a, dim, half_to_float)
    if dims is None:
        return e.to(e.full([], 1.0, dtype=e.type(shifted).dtype, device=e.type(a).device), out_dtype)
    exp = e.exp(shifted)
    total = e.broadcast_in_dim(e.sum(exp, dims), list(e.type(a).shape), back)
    return e.to(e.div(exp, total), out_dtype)


@register_decomposition("aten._log_softmax.default")
def log_softmax(e, a, dim, half_to_float):
    shifted, dims, back, out_dtype = _softmax_parts(e, a, dim, half_to_float)
    if dims is None:
        return e.to(e.full([], 0.0, dtype=e.type(shifted).dtype, device=e.type(a).device), out_dtype)
    total = e.broadcast_in_dim(e.log(e.sum(e.exp(shifted), dims)), list(e.type(a).shape), back)
    return e.to(e.sub(shifted, total), out_dtype)


@register_decomposition("aten._softmax_backward_data.default")
def softmax_backward(e, grad_output, output, dim, input_dtype):
    t = e.type(grad_output)
    dims = normalize_dims(e, grad_output, dim)
    compute = opmath_dtype(t.dtype)
    g, y = e.to(grad_output, compute), e.to(output, compute)
    gy = e.mul(g, y)
    if dims:
        back = [i for i in range(t.rank) if i not in dims]
        total = e.broadcast_in_dim(e.sum(gy, dims), list(t.shape), back)
    else:
        total = gy
    return e.to(e.sub(gy, e.mul(y, total)), input_dtype)


@register_decomposition("aten._log_softmax_backward_data.default")
def log_softmax_backward(e, grad_output, output, dim, input_dtype):
    t = e.type(grad_output)
    dims = normalize_dims(e, grad_output, dim)
    compute = opmath_dtype(t.dtype)
    g, y = e.to(grad_output, compute), e.to(output, compute)
    if dims:
        back = [i for i in range(t.rank) if i not in dims]
        total = e.broadcast_in_dim(e.sum(g, dims), list(t.shape), back)
    else:
        total = g
    return e.to(e.sub(g, e.mul(e.exp(y), total)), input_dtype)


@register_decomposition("aten._safe_softmax.default")
def safe_softmax(e, a, dim, dtype=None):
    """softmax, but 0 (not nan) along rows that are entirely -inf (fully masked attention rows)."""
    t = e.type(a)
    x = e.to(a, dtype) if dtype is not None else a
    out = softmax(e, x, dim, False)
    dims = normalize_dims(e, a, dim)
    if not dims:
        return out
    masked = e.amin(e.eq(a, -float("inf")) if t.dtype.is_floating_point else e.ne(a, a), dims)
    masked = e.broadcast_in_dim(masked, list(t.shape), [i for i in range(t.rank) if i not in dims])
    return e.where(masked, 0.0, out)
