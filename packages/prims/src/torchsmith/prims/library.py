"""Library prims, kept whole because backends call tuned kernels for them: mm, bmm, convolution
and scaled dot-product attention."""

import itertools
import math

import numpy as np
import torch

from torchsmith.ir.symbolic import floordiv, format_dim, normalize_dim
from torchsmith.prims.core import (
    check_dtype_class,
    check_same_dtype,
    define_prim,
    int_list,
    result,
    same_dim,
    tensor_arg,
)
from torchsmith.prims.errors import PrimTypeError


def _work(a: np.ndarray) -> np.ndarray:
    """Low-precision operands are multiplied in float32, as torch's kernels accumulate."""
    return a.astype(np.float32) if a.dtype == np.float16 else a


def _matmul_rule(name: str, rank: int):
    def infer(a, b):
        ta, tb = tensor_arg(name, "a", a), tensor_arg(name, "b", b)
        check_same_dtype(name, [ta, tb])
        check_dtype_class(name, ta.dtype, "numeric")
        if ta.rank != rank or tb.rank != rank:
            raise PrimTypeError(f"{name}: operands must be {rank}-d, got {ta.rank}-d and {tb.rank}-d")
        if not same_dim(ta.shape[-1], tb.shape[-2]) or (rank == 3 and not same_dim(ta.shape[0], tb.shape[0])):
            shapes = [format_dim(d) for d in ta.shape], [format_dim(d) for d in tb.shape]
            raise PrimTypeError(f"{name}: shapes {shapes[0]} and {shapes[1]} cannot be multiplied")
        return result(ta.shape[:-1] + tb.shape[-1:], ta.dtype, ta.device)

    return infer


define_prim(
    "prims.mm",
    "a: tensor, b: tensor",
    kind="library",
    infer=_matmul_rule("prims.mm", 2),
    torch_impl=torch.mm,
    numpy_impl=lambda a, b: (_work(a) @ _work(b)).astype(a.dtype),
    doc="Matrix product of 2-d a and b.",
)
define_prim(
    "prims.bmm",
    "a: tensor, b: tensor",
    kind="library",
    infer=_matmul_rule("prims.bmm", 3),
    torch_impl=torch.bmm,
    numpy_impl=lambda a, b: (_work(a) @ _work(b)).astype(a.dtype),
    doc="Batched matrix product of 3-d a and b.",
)


# ---- convolution -----------------------------------------------------------------------------------


def _conv_rule(x, weight, bias, stride, padding, dilation, transposed, output_padding, groups):
    name = "prims.convolution"
    tx, tw = tensor_arg(name, "the input", x), tensor_arg(name, "the weight", weight)
    types = [tx, tw] + ([tensor_arg(name, "the bias", bias)] if bias is not None else [])
    check_same_dtype(name, types)
    # integer convolutions run aten's kernel, which accumulates exactly in the integer dtype
    check_dtype_class(name, tx.dtype, "numeric")
    spatial = tx.rank - 2
    params = [int_list(name, p) for p in (stride, padding, dilation, output_padding)]
    if spatial < 1 or tw.rank != tx.rank or any(len(p) != spatial for p in params):
        raise PrimTypeError(
            f"{name}: input {tx.rank}-d and weight {tw.rank}-d must be (N, C, *spatial) and stride, padding, "
            f"dilation, output_padding need one entry per spatial dim ({spatial})"
        )
    if not isinstance(groups, int) or groups < 1:
        raise PrimTypeError(f"{name}: groups must be a positive int, got {groups!r}")
    stride, padding, dilation, output_padding = params
    in_channels = tw.shape[0] if transposed else normalize_dim(tw.shape[1] * groups)
    if not same_dim(tx.shape[1], in_channels):
        raise PrimTypeError(
            f"{name}: input has {format_dim(tx.shape[1])} channels, the weight expects "
            f"{format_dim(in_channels)}"
        )
    out_channels = normalize_dim(tw.shape[1] * groups) if transposed else tw.shape[0]
    sizes = []
    for i in range(spatial):
        size, k = tx.shape[2 + i], tw.shape[2 + i]
        span = normalize_dim(dilation[i] * (k - 1))
        if transposed:
            sizes.append(
                normalize_dim((size - 1) * stride[i] - 2 * padding[i] + span + output_padding[i] + 1)
            )
        else:
            sizes.append(
                normalize_dim(floordiv(normalize_dim(size + 2 * padding[i] - span - 1), stride[i]) + 1)
            )
    return result((tx.shape[0], out_channels, *sizes), tx.dtype, tx.device)


def _numpy_conv(x, weight, bias, stride, padding, dilation, transposed, output_padding, groups):
    dtype, x, weight = x.dtype, _work(x), _work(weight)
    spatial = x.ndim - 2
    n, channels = x.shape[:2]
    kernel = weight.shape[2:]
    xg = x.reshape(n, groups, channels // groups, *x.shape[2:])
    if transposed:
        # weight (C_in, O/g, *k): every input position adds weight * x at i*stride + k*dilation - padding.
        wg = weight.reshape(groups, channels // groups, weight.shape[1], *kernel)
        full = [
            (s - 1) * st + d * (k - 1) + 1 + op
            for s, st, d, k, op in zip(x.shape[2:], stride, dilation, kernel, output_padding)
        ]
        y = np.zeros((n, groups, weight.shape[1], *full), dtype=x.dtype)
        for offset in itertools.product(*(range(k) for k in kernel)):
            contribution = np.einsum("ngc...,gco->ngo...", xg, wg[(...,) + offset])
            where = tuple(
                slice(o * d, o * d + (s - 1) * st + 1, st)
                for o, d, s, st in zip(offset, dilation, x.shape[2:], stride)
            )
            y[(slice(None),) * 3 + where] += contribution
        out = [f - 2 * p for f, p in zip(full, padding)]
        y = y[(slice(None),) * 3 + tuple(slice(p, p + o) for p, o in zip(padding, out))]
    else:
        # weight (O, C/g, *k): out[o] = sum over the window of x * weight.
        wg = weight.reshape(groups, weight.shape[0] // groups, *weight.shape[1:])
        xp = np.pad(xg, [(0, 0)] * 3 + [(p, p) for p in padding])
        out = [
            (s + 2 * p - d * (k - 1) - 1) // st + 1
            for s, p, d, k, st in zip(x.shape[2:], padding, dilation, kernel, stride)
        ]
        y = np.zeros((n, groups, wg.shape[1], *out), dtype=x.dtype)
        for offset in itertools.product(*(range(k) for k in kernel)):
            window = tuple(
                slice(o * d, o * d + (m - 1) * st + 1, st)
                for o, d, m, st in zip(offset, dilation, out, stride)
            )
            y += np.einsum("ngc...,goc->ngo...", xp[(slice(None),) * 3 + window], wg[(...,) + offset])
    y = y.reshape(n, -1, *y.shape[3:])
    if bias is not None:
        y = y + _work(bias).reshape((1, -1) + (1,) * spatial)
    return y.astype(dtype)


define_prim(
    "prims.convolution",
    "input: tensor, weight: tensor, bias: tensor?, stride: ints, padding: ints, dilation: ints, "
    "transposed: bool, output_padding: ints, groups: int",
    kind="library",
    infer=_conv_rule,
    torch_impl=torch.convolution,  # aten::convolution's own binding: no Python between it and the call
    numpy_impl=_numpy_conv,
    doc="N-d (transposed) convolution with aten.convolution's semantics.",
)


# ---- scaled dot-product attention ------------------------------------------------------------------


def _sdpa_rule(query, key, value, attn_mask, is_causal, scale):
    name = "prims.scaled_dot_product_attention"
    tq, tk, tv = (tensor_arg(name, w, a) for w, a in (("query", query), ("key", key), ("value", value)))
    check_same_dtype(name, [tq, tk, tv])
    check_dtype_class(name, tq.dtype, "float")
    if not tq.rank == tk.rank == tv.rank or tq.rank < 2:
        raise PrimTypeError(f"{name}: query, key and value must have one rank >= 2")
    # Grouped-query attention: key and value may have fewer heads (dim -3) than the query, each
    # read by `query heads / key heads` consecutive query heads (torch's enable_gqa).
    q_outer, k_outer = tq.shape[:-2], tk.shape[:-2]
    if tq.rank >= 3 and not same_dim(q_outer[-1], k_outer[-1]):
        if not _divides(k_outer[-1], q_outer[-1]):
            raise PrimTypeError(f"{name}: the query's {q_outer[-1]} heads are no multiple of the key's "
                                f"{k_outer[-1]}")
        q_outer, k_outer = q_outer[:-1], k_outer[:-1]
    if not all(
        same_dim(a, b) for a, b in zip(q_outer + tq.shape[-1:], k_outer + tk.shape[-1:])
    ) or not all(same_dim(a, b) for a, b in zip(tk.shape[:-1], tv.shape[:-1])):
        raise PrimTypeError(f"{name}: query (..., L, E), key (..., S, E) and value (..., S, Ev) do not fit")
    if attn_mask is not None:
        tm = tensor_arg(name, "attn_mask", attn_mask)
        if tm.dtype not in (torch.bool, tq.dtype) or tm.rank > tq.rank:
            raise PrimTypeError(f"{name}: attn_mask must be bool or {tq.dtype} and broadcast to (..., L, S)")
        if is_causal:
            raise PrimTypeError(f"{name}: pass either attn_mask or is_causal, not both")
    if scale is not None:
        if not isinstance(scale, (int, float)):
            raise PrimTypeError(f"{name}: scale must be a float or None, got {scale!r}")
    return result(tq.shape[:-1] + tv.shape[-1:], tq.dtype, tq.device)


def _divides(part, whole) -> bool:
    """Whether the dim `part` divides `whole` (symbolic dims only when they are the same)."""
    if isinstance(part, int) and isinstance(whole, int):
        return part > 0 and whole % part == 0
    return same_dim(part, whole)


def _torch_sdpa(query, key, value, attn_mask, is_causal, scale):
    grouped = query.dim() >= 3 and query.shape[-3] != key.shape[-3]
    return torch.nn.functional.scaled_dot_product_attention(
        query, key, value, attn_mask=attn_mask, is_causal=is_causal, scale=scale, enable_gqa=grouped
    )


def _numpy_sdpa(query, key, value, attn_mask, is_causal, scale):
    dtype = query.dtype
    q, k, v = _work(query), _work(key), _work(value)
    if q.ndim >= 3 and q.shape[-3] != k.shape[-3]:  # grouped-query: each key head serves a group
        group = q.shape[-3] // k.shape[-3]
        k, v = np.repeat(k, group, axis=-3), np.repeat(v, group, axis=-3)
    scale = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
    scores = (q @ np.swapaxes(k, -1, -2)) * scale
    if is_causal:
        attn_mask = np.tril(np.ones(scores.shape[-2:], dtype=bool))
    if attn_mask is not None:
        scores = np.where(attn_mask, scores, -np.inf) if attn_mask.dtype == bool else scores + attn_mask
    scores = scores - np.max(scores, axis=-1, keepdims=True)
    weights = np.exp(scores)
    weights = weights / np.sum(weights, axis=-1, keepdims=True)
    return (weights @ v).astype(dtype)


define_prim(
    "prims.scaled_dot_product_attention",
    "query: tensor, key: tensor, value: tensor, attn_mask: tensor?, is_causal: bool, scale: float?",
    kind="library",
    infer=_sdpa_rule,
    torch_impl=_torch_sdpa,
    numpy_impl=_numpy_sdpa,
    doc="softmax(query @ key^T * scale + mask) @ value (scale defaults to 1/sqrt(E); is_causal masks "
    "the upper triangle, top-left aligned). Key and value may have fewer heads (dim -3) than the query: "
    "grouped-query attention, query head h reading key head h // (query heads / key heads). No dropout: "
    "decompositions draw it with philox_rand.",
)
