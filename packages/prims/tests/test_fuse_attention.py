"""fuse_attention: softmax attention written out as bmm + softmax + bmm (as transformers' eager
attention decomposes) becomes prims.scaled_dot_product_attention when it provably computes the
same values, and is left alone otherwise (masks that may hold -inf, weights read elsewhere)."""

import torch

from torchsmith.ir import GraphBuilder, interpret
from torchsmith.ir.verifier import verify
from torchsmith.prims import decompose
from torchsmith.prims.fuse_attention import fuse_attention

B, H, L, E = 2, 3, 5, 4
MIN = torch.finfo(torch.float32).min


def _flat(b, x, shape):
    """What matmul records for a 4-d operand: a contiguous copy viewed as (B*H, X, Y)."""
    return b.op(
        "aten._unsafe_view.default",
        b.op("aten.clone.default", x, memory_format=torch.contiguous_format),
        shape,
    )


def _attention_graph(*, scale=("mul", 0.5), mask=None, weights_out=False):
    """q, k, v (B, H, L, E) -> softmax(q @ k^T [*|/ scale] [+ mask]) @ v, in aten ops; `mask` is
    None, "input" (a float graph input), or the fill value of a where() mask (B, 1, L, L)."""
    b = GraphBuilder("attention")
    q, k, v = (b.input(n, f"f32[{B}, {H}, {L}, {E}] cpu") for n in "qkv")
    cond = b.input("keep", f"b8[{B}, 1, {L}, {L}] cpu") if mask not in (None, "input") else None
    given = b.input("mask", f"f32[{B}, 1, {L}, {L}] cpu") if mask == "input" else None
    kt = b.op("aten.transpose.int", k, -1, -2)
    scores = b.op("aten.bmm.default", _flat(b, q, [B * H, L, E]), _flat(b, kt, [B * H, E, L]))
    scores = b.op("aten._unsafe_view.default", scores, [B, H, L, L])
    if scale is not None:
        op, c = scale
        scores = b.op("aten.mul.Tensor" if op == "mul" else "aten.div.Tensor", scores, c)
    if cond is not None:
        zero = b.op("aten.scalar_tensor.default", 0.0, dtype=torch.float32)
        fill = b.op("aten.scalar_tensor.default", mask, dtype=torch.float32)
        scores = b.op("aten.add.Tensor", scores, b.op("aten.where.self", cond, zero, fill))
    elif given is not None:
        scores = b.op("aten.add.Tensor", scores, given)
    probs = b.op("aten._softmax.default", scores, -1, False)
    out = b.op("aten.bmm.default", _flat(b, probs, [B * H, L, L]), _flat(b, v, [B * H, L, E]))
    out = b.op("aten._unsafe_view.default", out, [B, H, L, E])
    merged = b.op(
        "aten.clone.default",
        b.op("aten.permute.default", out, [0, 2, 1, 3]),
        memory_format=torch.contiguous_format,
    )
    merged = b.op("aten.view.default", merged, [B, L, H * E])
    graph = b.build(merged, probs) if weights_out else b.build(merged)
    inputs = [torch.randn(B, H, L, E, generator=torch.Generator().manual_seed(i)) for i in range(3)]
    if cond is not None:
        keep = torch.ones(B, 1, L, L, dtype=torch.bool).tril()
        keep[1, :, :, 3:] = False
        keep[1, :, 0, :] = False  # a query with every key masked
        inputs.append(keep)
    if given is not None:
        inputs.append(torch.randn(B, 1, L, L))
    return graph, inputs


def _fused(graph):
    prims = decompose(graph)
    fused = verify(fuse_attention(prims))
    return prims, fused


def _attention_nodes(graph) -> int:
    return sum(n.op == "prims.scaled_dot_product_attention" for n in graph.nodes)


def test_scaled_attention_becomes_one_sdpa_node_with_the_same_values():
    for scale in (("mul", 0.5), ("div", 2.0), None):
        graph, inputs = _attention_graph(scale=scale)
        prims, fused = _fused(graph)
        assert _attention_nodes(fused) == 1 and "prims.bmm" not in fused.ops()
        assert "prims.clone" not in fused.ops()  # the head-split and head-merge copies are gone
        assert fused.stamps[-1].pass_name == "fuse_attention"
        torch.testing.assert_close(interpret(fused, *inputs)[0], interpret(graph, *inputs)[0])


def test_a_finite_where_mask_is_fused_and_a_fully_masked_query_matches():
    graph, inputs = _attention_graph(mask=MIN)
    prims, fused = _fused(graph)
    assert _attention_nodes(fused) == 1
    got, expected = interpret(fused, *inputs)[0], interpret(graph, *inputs)[0]
    assert not expected.isnan().any()
    torch.testing.assert_close(got, expected)


def test_masks_that_may_hold_minus_inf_are_left_alone():
    # -inf masks give nan for a fully masked query in the softmax, 0 in fused kernels.
    for mask in (float("-inf"), "input"):
        graph, _ = _attention_graph(mask=mask)
        prims, fused = _fused(graph)
        assert _attention_nodes(fused) == 0 and fused is prims


def test_attention_weights_read_elsewhere_are_left_alone():
    graph, inputs = _attention_graph(weights_out=True)
    prims, fused = _fused(graph)
    assert _attention_nodes(fused) == 0
    for got, expected in zip(interpret(fused, *inputs), interpret(graph, *inputs)):
        torch.testing.assert_close(got, expected)


def test_graphs_without_attention_are_returned_unchanged():
    b = GraphBuilder("mm")
    x = b.input("x", "f32[3, 4, 4] cpu")
    graph = decompose(b.build(b.op("aten.bmm.default", x, x)))
    assert fuse_attention(graph) is graph
