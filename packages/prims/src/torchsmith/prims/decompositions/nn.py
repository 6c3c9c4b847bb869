"""Decompositions of matmul, convolution, attention, normalization, embedding, loss and
indexing ops. Matmul, convolution and attention become the kept library prims."""

import torch

from torchsmith.prims.decompose import KEEP, register_decomposition
from torchsmith.prims.decompositions.reductions import normalize_dims, reduced_count
from torchsmith.prims.errors import DecompositionError
from torchsmith.prims.indexing import indexed_shape
from torchsmith.prims.promotion import opmath_dtype

# ---- matmul ---------------------------------------------------------------------------------------------


@register_decomposition("aten.mm.default")
def mm(e, a, b):
    return e.mm(a, b)


@register_decomposition("aten.bmm.default")
def bmm(e, a, b):
    return e.bmm(a, b)


@register_decomposition("aten.addmm.default")
def addmm(e, bias, a, b, *, beta=1, alpha=1):
    product = e.mm(a, b)
    return e.aten(
        "aten.add.Tensor",
        e.aten("aten.mul.Tensor", bias, beta) if beta != 1 else bias,
        e.aten("aten.mul.Tensor", product, alpha) if alpha != 1 else product,
    )


@register_decomposition("aten.linear.default")
def linear(e, x, weight, bias=None):
    t = e.type(x)
    flat = e.reshape(x, [reduced_count(e, x, range(t.rank - 1)), t.shape[-1]]) if t.rank != 2 else x
    out = e.mm(flat, e.permute(weight, [1, 0]))
    if bias is not None:
        out = e.aten("aten.add.Tensor", out, bias)
    return e.reshape(out, list(t.shape[:-1]) + [e.type(weight).shape[0]]) if t.rank != 2 else out


@register_decomposition("aten.convolution.default")
def convolution(e, x, weight, bias, stride, padding, dilation, transposed, output_padding, groups):
    return e.convolution(x, weight, bias, stride, padding, dilation, transposed, output_padding, groups)


@register_decomposition("aten.scaled_dot_product_attention.default", declines="dropout_p > 0")
def sdpa(
    e, query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, *, scale=None, enable_gqa=False
):
    if dropout_p != 0.0:
        return KEEP  # dropout needs the graph's RNG state
    if attn_mask is not None:
        attn_mask = _additive_mask(e, attn_mask, e.type(query))
        shape = list(e.type(query).shape[:-1]) + [e.type(key).shape[-2]]
        attn_mask = e.broadcast_to(attn_mask, shape)
    return e.scaled_dot_product_attention(query, key, value, attn_mask, is_causal, scale)


def _additive_mask(e, mask, query):
    """A boolean mask as the additive one torch's fused kernels take (0 kept, -inf dropped), made
    here on the mask's own shape: torch converts it inside every call, on the broadcast shape (a
    GPT-2 layer's [B, H, L, S]), and a model passes one mask to every layer."""
    t = e.type(mask)
    if t.dtype != torch.bool:
        return mask
    zeros = e.full(list(t.shape), 0.0, dtype=query.dtype, device=t.device)
    return e.where(mask, zeros, float("-inf"))


# ---- embedding and indexing -------------------------------------------------------------------------------


def _index_tensor(e, index, size):
    """An index as int64, negative entries wrapped by `size`."""
    index = e.to(index, torch.int64)
    return e.where(e.lt(index, 0), e.add(index, size), index)


@register_decomposition("aten.embedding.default")
def embedding(e, weight, indices, padding_idx=-1, scale_grad_by_freq=False, sparse=False):
    return e.index(weight, [e.to(indices, torch.int64)])


@register_decomposition("aten.embedding_dense_backward.default", declines="scale_grad_by_freq=True")
def embedding_dense_backward(e, grad_output, indices, num_weights, padding_idx, scale_grad_by_freq):
    if scale_grad_by_freq:
        return KEEP  # needs per-index counts; not decomposed yet
    g = e.type(grad_output)
    width = g.shape[-1]
    count = reduced_count(e, indices, range(e.type(indices).rank))
    flat_index = e.reshape(e.to(indices, torch.int64), [count])
    compute = opmath_dtype(g.dtype)
    flat_grad = e.reshape(e.to(grad_output, compute), [count, width])
    if padding_idx >= 0:
        mask = e.broadcast_in_dim(e.eq(flat_index, padding_idx), [count, width], [0])
        flat_grad = e.where(mask, 0.0, flat_grad)
    zeros = e.full([num_weights, width], 0.0, dtype=compute, device=g.device)
    return e.to(e.index_put(zeros, [flat_index], flat_grad, True), g.dtype)


@register_decomposition("aten.gather.default")
def gather(e, a, dim, index, *, sparse_grad=False):
    d = normalize_dims(e, a, dim)
    return e.gather(a, d[0] if d else 0, e.to(index, torch.int64))


@register_decomposition("aten.scatter.src", "aten.scatter.value")
def scatter(e, a, dim, index, src):
    d = normalize_dims(e, a, dim)
    if not e.is_tensor(src):
        src = e.full(list(e.type(index).shape), src, dtype=e.type(a).dtype, device=e.type(a).device)
    # eager takes int32 indices too; the prim takes int64 (a widening: every value stays)
    return e.scatter(a, d[0] if d else 0, e.to(index, torch.int64), src)


@register_decomposition("aten.scatter_add.default")
def scatter_add(e, a, dim, index, src):
    d = normalize_dims(e, a, dim)
    return e.scatter_add(a, d[0] if d else 0, e.to(index, torch.int64), src)


def _prepare_indices(e, a, indices):
    t = e.type(a)
    prepared = []
    for position, index in enumerate(indices):
        if index is None:
            prepared.append(None)
            continue
        if e.type(index).dtype in (torch.bool, torch.uint8):
            raise DecompositionError(
                "boolean mask indices have a data-dependent shape; keep aten.index whole"
            )
        prepared.append(_index_tensor(e, index, t.shape[position]))
    shape = e.shape_of(*[i for i in prepared if i is not None])
    return [None if i is None else e.broadcast_to(i, shape) for i in prepared]


def _has_mask(e, indices) -> bool:
    return any(i is not None and e.type(i).dtype in (torch.bool, torch.uint8) for i in indices)


@register_decomposition("aten.index.Tensor", declines="boolean mask indices (data-dependent shape)")
def index(e, a, indices):
    if _has_mask(e, indices):
        return KEEP
    return e.index(a, _prepare_indices(e, a, indices))


@register_decomposition("aten.index_put.default", declines="boolean mask indices")
def index_put(e, a, indices, values, accumulate=False):
    if _has_mask(e, indices):
        return KEEP  # a backend runs the library kernel (the mask selects a data-dependent count)
    prepared = _prepare_indices(e, a, indices)
    shape = indexed_shape("aten.index_put", e.type(a), tuple(prepared))
    return e.index_put(a, prepared, e.broadcast_to(e.to(values, e.type(a).dtype), shape), accumulate)


# ---- loss -------------------------------------------------------------------------------------------------


def _nll_weights(e, target, weight, ignore_index, dtype, device):
    """Per-sample weights: weight[target] (or 1), 0 where target == ignore_index; and a safe target."""
    ignored = e.eq(target, ignore_index)
    safe = e.where(ignored, 0, target)
    w = (
        e.index(weight, [safe])
        if weight is not None
        else e.full(list(e.type(target).shape), 1.0, dtype=dtype, device=device)
    )
    return e.where(ignored, 0.0, w), safe


@register_decomposition("aten.nll_loss_forward.default")
def nll_loss_forward(e, x, target, weight, reduction, ignore_index):
    t = e.type(x)
    target = e.to(target, torch.int64)
    w, safe = _nll_weights(e, target, weight, ignore_index, t.dtype, t.device)
    class_dim = 0 if t.rank == 1 else 1
    picked = e.squeeze(e.gather(x, class_dim, e.expand_dims(safe, [class_dim])), [class_dim])
    losses = e.neg(e.mul(picked, w))
    if reduction == 0:  # none
        return losses, e.full([], 0.0, dtype=t.dtype, device=t.device)
    dims = list(range(e.type(losses).rank))
    total_weight = e.sum(w, dims)
    total = e.sum(losses, dims)
    if reduction == 1:  # mean
        total = e.div(total, total_weight)
    return total, total_weight


@register_decomposition("aten.nll_loss_backward.default")
def nll_loss_backward(e, grad_output, x, target, weight, reduction, ignore_index, total_weight):
    t = e.type(x)
    target = e.to(target, torch.int64)
    w, safe = _nll_weights(e, target, weight, ignore_index, t.dtype, t.device)
    grad = e.broadcast_to(grad_output, e.type(w).shape)
    if reduction == 1:
        grad = e.div(grad, e.broadcast_to(total_weight, e.type(w).shape))
    values = e.neg(e.mul(w, grad))
    class_dim = 0 if t.rank == 1 else 1
    zeros = e.full(list(t.shape), 0.0, dtype=t.dtype, device=t.device)
    return e.scatter(zeros, class_dim, e.expand_dims(safe, [class_dim]), e.expand_dims(values, [class_dim]))


def _conv_weight_grad(e, x, grad, kernel, stride, padding, dilation, groups):
    """d(loss)/d(weight) of a (non-transposed) convolution, as a convolution of the input with the
    output gradient: batch and channels swap roles, stride and dilation swap, and the result is
    cut to the kernel size. Shape (grad channels, input channels / groups, *kernel)."""
    tx, tg = e.type(x), e.type(grad)
    n, c, spatial = tx.shape[0], tx.shape[1], list(tx.shape[2:])
    o, out_spatial = tg.shape[1], list(tg.shape[2:])
    rank = tx.rank
    rest = list(range(3, rank + 1))
    # x: (N, C, *S) -> (C/g, g*N, *S): the batch becomes input channels, grouped by g.
    xs = e.reshape(x, [n, groups, c // groups] + spatial)
    xs = e.reshape(e.permute(xs, [2, 1, 0] + rest), [c // groups, groups * n] + spatial)
    # grad: (N, O, *OS) -> (O, N, *OS): the output gradient becomes the weight.
    gs = e.reshape(grad, [n, groups, o // groups] + out_spatial)
    gs = e.reshape(e.permute(gs, [1, 2, 0] + rest), [o, n] + out_spatial)
    full = e.convolution(
        xs, gs, None, list(dilation), list(padding), list(stride), False, [0] * len(kernel), groups
    )
    for i, k in enumerate(kernel):
        if e.type(full).shape[2 + i] != k:
            full = e.slice(full, 2 + i, 0, k, 1)
    return e.permute(full, [1, 0] + list(range(2, rank)))


@register_decomposition("aten.convolution_backward.default", declines="non-float inputs or symbolic sizes")
def convolution_backward(
    e, grad, x, weight, bias_sizes, stride, padding, dilation, transposed, output_padding, groups, output_mask
):
    tx, tw, tg = e.type(x), e.type(weight), e.type(grad)
    sizes = list(tx.shape) + list(tw.shape) + list(tg.shape)
    if not tx.dtype.is_floating_point or not all(isinstance(s, int) for s in sizes):
        return KEEP
    kernel = list(tw.shape[2:])
    grad_input = grad_weight = grad_bias = None
    if output_mask[0]:
        if transposed:
            grad_input = e.convolution(
                grad, weight, None, stride, padding, dilation, False, [0] * len(kernel), groups
            )
        else:
            # The transposed convolution of the gradient; output_padding restores sizes that the
            # forward's floor division dropped.
            extra = [
                size - ((out - 1) * s - 2 * p + d * (k - 1) + 1)
                for size, out, s, p, d, k in zip(
                    tx.shape[2:], tg.shape[2:], stride, padding, dilation, kernel
                )
            ]
            grad_input = e.convolution(grad, weight, None, stride, padding, dilation, True, extra, groups)
    if output_mask[1]:
        if transposed:  # the roles of input and output gradient swap
            grad_weight = _conv_weight_grad(e, grad, x, kernel, stride, padding, dilation, groups)
        else:
            grad_weight = _conv_weight_grad(e, x, grad, kernel, stride, padding, dilation, groups)
    if output_mask[2]:
        grad_bias = e.sum(grad, [0] + list(range(2, tg.rank)))
    return grad_input, grad_weight, grad_bias
