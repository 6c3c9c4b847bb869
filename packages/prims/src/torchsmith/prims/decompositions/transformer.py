"""Decompositions of PyTorch's fused transformer fast paths: `aten._transformer_encoder_layer_fwd`
(what `nn.TransformerEncoderLayer` calls in eval mode under no_grad) and
`aten._native_multi_head_attention` (the same for `nn.MultiheadAttention`). They become the ATen ops
the fast path is made of (linear, layer norm, gelu/relu, attention), so a backend fuses the
residual adds, norms and activations around its matmuls instead of calling one opaque kernel.

Masks, as the fused kernels read them (checked against eager in the tests):
- `mask_type` 0: an (L, L) attention mask; 1: a (B, L) key padding mask; 2: a (B, H, L, L) mask.
- A bool mask is True where attention is forbidden; a float mask is forbidden where it is
  nonzero (the fast path does not add float masks: `nn.TransformerEncoderLayer` turns bool masks
  into 0/-inf floats first, which read the same either way).
- A query whose keys are all masked gives nan, as eager's masked softmax does; so masked attention
  is written out as bmm + softmax + bmm (the fused sdpa kernel gives 0 there), while unmasked
  attention is `aten.scaled_dot_product_attention`, which backends keep as a library kernel.
"""

import math

import torch

from torchsmith.ir.symbolic import normalize_dim
from torchsmith.prims.decompose import KEEP, register_decomposition

FLOAT32_64 = (torch.float32, torch.float64)
ENCODER_DECLINES = (
    "inputs that are not 3-d float32/float64 (float16/bfloat16 layer norms stay whole, see norms.py) or "
    "whose embedding size is symbolic, "
    "embed_dim not divisible by num_heads, query/key shapes or a mask (without mask_type, or of a "
    "shape) that eager rejects"
)
MHA_DECLINES = (
    ENCODER_DECLINES + "; need_weights=True (eager returns the head-averaged weights of its own softmax, "
    "not decomposed yet)"
)


def _mask_shape(e, mask, mask_type, full):
    """The shape the mask broadcasts from against scores `full` = (B, H, L, S), or None when eager
    rejects it."""
    batch, heads, length, keys = full
    shape = [e.type(mask).shape[d] for d in range(e.type(mask).rank)]
    wanted = {0: [length, keys], 1: [batch, keys], 2: list(full)}.get(mask_type)
    if wanted is None or len(shape) != len(wanted):
        return None
    if any(normalize_dim(a - b) != 0 for a, b in zip(shape, wanted)):
        return None
    return {0: [1, 1, length, keys], 1: [batch, 1, 1, keys], 2: wanted}[mask_type]


def _supported(e, query, key, embed_dim, num_heads, mask, mask_type) -> bool:
    tq, tk = e.type(query), e.type(key)
    if tq.rank != 3 or tq.dtype not in FLOAT32_64 or embed_dim % num_heads != 0:
        return False
    if normalize_dim(tq.shape[2] - embed_dim) != 0:
        return False  # a symbolic embedding size: the heads' split needs it known
    if tk.rank != 3 or any(normalize_dim(a - b) != 0 for a, b in zip(tq.shape, tk.shape)):
        return False  # eager requires query, key and value of one shape
    if mask is None:
        return True
    return _mask_shape(e, mask, mask_type, [tq.shape[0], num_heads, tq.shape[1], tk.shape[1]]) is not None


def _additive_mask(e, mask, mask_type, full, dtype, device):
    """The mask as 0 (attend) / -inf (forbidden) in `dtype`, shaped to broadcast against `full`."""
    forbidden = mask if e.type(mask).dtype == torch.bool else e.ne(mask, 0)
    shape = [e.type(mask).shape[d] for d in range(e.type(mask).rank)]
    zeros = e.full(shape, 0.0, dtype=dtype, device=device)
    additive = e.where(forbidden, float("-inf"), zeros)
    return e.reshape(additive, _mask_shape(e, mask, mask_type, full))


def self_attention(
    e, query, key, value, embed_dim, num_heads, qkv_weight, qkv_bias, proj_weight, proj_bias, mask, mask_type
):
    """Multi-head attention of `query` (B, L, D) over `key`, `value` (B, S, D) as the fused kernels
    compute it: the in-projection (one matmul when query, key and value are one tensor, else the
    three row blocks of `qkv_weight`), heads split, softmax(q k^T / sqrt(d_head) + mask) v, heads
    merged, out-projection."""
    tq, tk = e.type(query), e.type(key)
    batch, length, keys = tq.shape[0], tq.shape[1], tk.shape[1]
    head = embed_dim // num_heads
    if query is key is value:
        qkv = e.aten("aten.linear.default", query, qkv_weight, qkv_bias)
        parts = [e.slice(qkv, 2, k * embed_dim, (k + 1) * embed_dim, 1) for k in range(3)]
    else:
        parts = [
            e.aten(
                "aten.linear.default",
                x,
                e.slice(qkv_weight, 0, k * embed_dim, (k + 1) * embed_dim, 1),
                e.slice(qkv_bias, 0, k * embed_dim, (k + 1) * embed_dim, 1),
            )
            for k, x in enumerate((query, key, value))
        ]

    def heads(x, size):  # (B, size, D) -> (B, H, size, d_head)
        return e.permute(e.reshape(x, [batch, size, num_heads, head]), [0, 2, 1, 3])

    q, k, v = heads(parts[0], length), heads(parts[1], keys), heads(parts[2], keys)
    if mask is None:
        y = e.aten("aten.scaled_dot_product_attention.default", q, k, v)
    else:
        rows = normalize_dim(batch * num_heads)
        scores = e.bmm(
            e.reshape(e.mul(q, 1.0 / math.sqrt(head)), [rows, length, head]),
            e.reshape(e.permute(k, [0, 1, 3, 2]), [rows, head, keys]),
        )
        full = [batch, num_heads, length, keys]
        additive = _additive_mask(e, mask, mask_type, full, tq.dtype, tq.device)
        scores = e.add(e.reshape(scores, full), e.broadcast_to(additive, full))
        weights = e.aten("aten._softmax.default", scores, -1, False)
        y = e.bmm(e.reshape(weights, [rows, length, keys]), e.reshape(v, [rows, keys, head]))
        y = e.reshape(y, [batch, num_heads, length, head])
    merged = e.reshape(e.permute(y, [0, 2, 1, 3]), [batch, length, embed_dim])
    return e.aten("aten.linear.default", merged, proj_weight, proj_bias)


@register_decomposition("aten._transformer_encoder_layer_fwd.default", declines=ENCODER_DECLINES)
def transformer_encoder_layer_fwd(
    e, src, embed_dim, num_heads, qkv_weight, qkv_bias, proj_weight, proj_bias, use_gelu, norm_first, eps,
    norm_weight_1, norm_bias_1, norm_weight_2, norm_bias_2, ffn_weight_1, ffn_bias_1, ffn_weight_2,
    ffn_bias_2, mask=None, mask_type=None,
):  # fmt: skip
    if not _supported(e, src, src, embed_dim, num_heads, mask, mask_type):
        return KEEP

    def norm(x, weight, bias):
        return e.aten("aten.native_layer_norm.default", x, [embed_dim], weight, bias, eps)[0]

    def attention(x):
        return self_attention(
            e, x, x, x, embed_dim, num_heads, qkv_weight, qkv_bias, proj_weight, proj_bias, mask, mask_type
        )

    def feed_forward(x):
        hidden = e.aten("aten.linear.default", x, ffn_weight_1, ffn_bias_1)
        hidden = e.aten("aten.gelu.default" if use_gelu else "aten.relu.default", hidden)
        return e.aten("aten.linear.default", hidden, ffn_weight_2, ffn_bias_2)

    x = src
    if norm_first:
        x = e.add(x, attention(norm(x, norm_weight_1, norm_bias_1)))
        return e.add(x, feed_forward(norm(x, norm_weight_2, norm_bias_2)))
    x = norm(e.add(x, attention(x)), norm_weight_1, norm_bias_1)
    return norm(e.add(x, feed_forward(x)), norm_weight_2, norm_bias_2)


@register_decomposition("aten._native_multi_head_attention.default", declines=MHA_DECLINES)
def native_multi_head_attention(
    e, query, key, value, embed_dim, num_head, qkv_weight, qkv_bias, proj_weight, proj_bias, mask=None,
    need_weights=True, average_attn_weights=True, mask_type=None,
):  # fmt: skip
    if need_weights or not _supported(e, query, key, embed_dim, num_head, mask, mask_type):
        return KEEP
    projections = (qkv_weight, qkv_bias, proj_weight, proj_bias)
    out = self_attention(e, query, key, value, embed_dim, num_head, *projections, mask, mask_type)
    # Eager's second result without weights is an undefined tensor; its meta function says empty.
    return out, e.full([0], 0.0, dtype=e.type(query).dtype, device=e.type(query).device)
