"""fuse_attention on the forms of hand-written attention beyond float32 without a mask: a
half-precision softmax (conversions to float32 and back in the chain) and the causal -inf mask
(`masked_fill(~ones(L, L).tril(), -inf)`, `where(tril, x, -inf)`), against eager PyTorch."""

import math

import pytest
import torch

from torchsmith.ir import GraphBuilder, interpret
from torchsmith.ir.verifier import verify
from torchsmith.prims import decompose
from torchsmith.prims.fuse_attention import fuse_attention

B, H, L, E = 2, 3, 6, 8
SHORT = {torch.float32: "f32", torch.bfloat16: "bf16", torch.float16: "f16"}


def _attention(dtype, mask: str | None = None, diagonal: int = 0):
    """The ATen graph matmul, scale, [mask,] softmax, matmul trace to; `mask`: None, "masked_fill"
    (~tril -> -inf) or "where" (where(tril, x, -inf)), the tril taken at `diagonal`."""
    b = GraphBuilder("attention")
    t = SHORT[dtype]
    q, k, v = (b.input(n, f"{t}[{B}, {H}, {L}, {E}] cpu") for n in "qkv")
    kt = b.op("aten.transpose.int", k, -2, -1)
    flat_q = b.op("aten.view.default", b.op("aten.expand.default", q, [B, H, L, E]), [B * H, L, E])
    flat_k = b.op("aten.view.default", b.op("aten.expand.default", kt, [B, H, E, L]), [B * H, E, L])
    scores = b.op("aten._unsafe_view.default", b.op("aten.bmm.default", flat_q, flat_k), [B, H, L, L])
    scores = b.op("aten.div.Tensor", scores, math.sqrt(E))
    if mask is not None:
        ones = b.op("aten.ones.default", [L, L], dtype=torch.bool, device=torch.device("cpu"))
        keep = b.op("aten.tril.default", ones, diagonal)
        if mask == "masked_fill":
            dropped = b.op("aten.bitwise_not.default", keep)
            scores = b.op("aten.masked_fill.Scalar", scores, dropped, -math.inf)
        else:
            scores = b.op("aten.where.ScalarOther", keep, scores, -math.inf)
    probs = b.op("aten._softmax.default", scores, -1, False)
    flat_p = b.op("aten.view.default", b.op("aten.expand.default", probs, [B, H, L, L]), [B * H, L, L])
    flat_v = b.op("aten.view.default", b.op("aten.expand.default", v, [B, H, L, E]), [B * H, L, E])
    out = b.op("aten._unsafe_view.default", b.op("aten.bmm.default", flat_p, flat_v), [B, H, L, E])
    inputs = [torch.randn(B, H, L, E, generator=torch.Generator().manual_seed(i)).to(dtype) for i in range(3)]
    return b.build(out), inputs


def _sdpa_nodes(graph):
    return [n for n in graph.nodes if n.op == "prims.scaled_dot_product_attention"]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_precision_softmax_chain_is_fused(dtype):
    graph, inputs = _attention(dtype)
    fused = verify(fuse_attention(decompose(graph)))
    (node,) = _sdpa_nodes(fused)
    assert "prims.bmm" not in fused.ops() and node.output.type.dtype == dtype
    got = interpret(fused, *inputs)[0]
    eager = torch.nn.functional.scaled_dot_product_attention(*inputs)
    torch.testing.assert_close(got, eager)
    torch.testing.assert_close(got, interpret(graph, *inputs)[0], atol=2e-2, rtol=2e-2)


@pytest.mark.parametrize("mask", ["masked_fill", "where"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_causal_minus_inf_mask_becomes_is_causal(mask, dtype):
    graph, inputs = _attention(dtype, mask)
    fused = verify(fuse_attention(decompose(graph)))
    (node,) = _sdpa_nodes(fused)
    assert node.args[3] is None and node.args[4] is True  # no mask tensor: is_causal
    assert not {"prims.iota", "prims.bmm"} & set(fused.ops())  # the mask's nodes went with it
    tolerance = {} if dtype == torch.float32 else {"atol": 2e-2, "rtol": 2e-2}
    torch.testing.assert_close(interpret(fused, *inputs)[0], interpret(graph, *inputs)[0], **tolerance)


@pytest.mark.parametrize("diagonal", [-1, 1])
def test_other_minus_inf_masks_are_left_alone(diagonal):
    # diagonal -1 masks every key of the first query (nan in eager, 0 in a fused kernel); diagonal 1
    # is no causal mask, so is_causal would compute something else.
    graph, _ = _attention(torch.float32, "masked_fill", diagonal)
    prims = decompose(graph)
    assert fuse_attention(prims) is prims


def test_boolean_sdpa_mask_becomes_additive_once_on_its_own_shape():
    """aten's attention with a boolean mask: the -inf additive mask torch's kernels take is made on
    the mask's (L, S) shape, then broadcast; a query with every key masked still gives eager's 0."""
    b = GraphBuilder("sdpa")
    q, k, v = (b.input(n, f"f32[{B}, {H}, {L}, {E}] cpu") for n in "qkv")
    mask = b.input("mask", f"b8[{L}, {L}] cpu")
    graph = b.build(b.op("aten.scaled_dot_product_attention.default", q, k, v, mask))
    prims = verify(decompose(graph))
    (where,) = [n for n in prims.nodes if n.op == "prims.where"]
    assert list(where.output.type.shape) == [L, L] and where.output.type.dtype == torch.float32
    keep = torch.ones(L, L, dtype=torch.bool).tril()
    keep[0] = False
    inputs = [torch.randn(B, H, L, E, generator=torch.Generator().manual_seed(i)) for i in range(3)] + [keep]
    expected = torch.nn.functional.scaled_dot_product_attention(*inputs[:3], attn_mask=keep)
    torch.testing.assert_close(interpret(prims, *inputs)[0], expected)
