"""Softmax attention written out as matmuls, through the backend's decomposition (which fuses it to
the attention prim, prims.fuse_attention) and the C++ path: one flash-attention extern call reading
q, k and v in place, its result stored heads-last so merging the heads is a view, and the values
of eager."""

import torch

from torchsmith.inductor import compile_graph
from torchsmith.inductor.device_compilers import to_prims_keep
from torchsmith.inductor.loop_ir.program import ComputedBuffer, ExternCall
from torchsmith.inductor.testing import assert_matches_eager, make_graph

B, L, H, E = 2, 16, 4, 8


def _self_attention(b, qkv, keep):
    """transformers-style: split a (B, L, 3*H*E) projection into heads, scores * scale + mask
    (0 / finfo.min from a bool mask), softmax, weighted values, heads merged."""

    def heads(k):
        part = b.op("aten.slice.Tensor", qkv, 2, k * H * E, (k + 1) * H * E)
        return b.op("aten.permute.default", b.op("aten.view.default", part, [B, L, H, E]), [0, 2, 1, 3])

    def flat(x, shape):
        return b.op(
            "aten._unsafe_view.default",
            b.op("aten.clone.default", x, memory_format=torch.contiguous_format),
            shape,
        )

    q, k, v = heads(0), heads(1), heads(2)
    kt = b.op("aten.transpose.int", k, -1, -2)
    scores = b.op("aten.bmm.default", flat(q, [B * H, L, E]), flat(kt, [B * H, E, L]))
    scores = b.op("aten.mul.Tensor", b.op("aten._unsafe_view.default", scores, [B, H, L, L]), E**-0.5)
    zero = b.op("aten.scalar_tensor.default", 0.0, dtype=torch.float32)
    low = b.op("aten.scalar_tensor.default", torch.finfo(torch.float32).min, dtype=torch.float32)
    scores = b.op("aten.add.Tensor", scores, b.op("aten.where.self", keep, zero, low))
    probs = b.op("aten._softmax.default", scores, -1, False)
    out = b.op("aten.bmm.default", flat(probs, [B * H, L, L]), flat(v, [B * H, L, E]))
    out = b.op("aten.permute.default", b.op("aten._unsafe_view.default", out, [B, H, L, E]), [0, 2, 1, 3])
    merged = b.op(
        "aten.view.default",
        b.op("aten.clone.default", out, memory_format=torch.contiguous_format),
        [B * L, H * E],
    )
    return b.op("aten.sum.dim_IntList", merged, [1])  # a consumer reading the merged heads


def test_written_out_attention_runs_as_one_sdpa_call_without_copies():
    graph = make_graph(
        "attention",
        {"qkv": ((B, L, 3 * H * E), torch.float32), "keep": ((B, 1, L, L), torch.bool)},
        _self_attention,
    )
    compiled = compile_graph(to_prims_keep(graph))
    calls = [b for b in compiled.program.buffers if isinstance(b, ExternCall)]
    assert [c.kernel for c in calls] == ["prims.scaled_dot_product_attention"]
    assert calls[0].layout.strides == (L * H * E, E, H * E, 1)  # heads-last
    loops = [b for b in compiled.program.buffers if isinstance(b, ComputedBuffer)]
    assert all("clone" not in b.origin for b in loops)  # no head-split or head-merge copies
    keep = torch.ones(B, 1, L, L, dtype=torch.bool).tril()
    keep[1, :, :, 10:] = False
    assert_matches_eager(compiled, graph, torch.randn(B, L, 3 * H * E), keep, rtol=1e-5, atol=1e-5)


def test_attention_over_contiguous_heads_keeps_a_contiguous_result():
    """q, k, v already (B, H, L, E): CPU flash attention writes its result in that order too, so the
    result is stored contiguous and the graph runs the one call, no copy into another layout."""

    def attention(b, q, k, v):  # as torch.softmax(q @ k.transpose(-2, -1) * scale, -1) @ v traces
        def rows(x, shape):
            return b.op("aten.view.default", x, shape)

        kt = rows(b.op("aten.transpose.int", k, -2, -1), [B * H, E, L])
        scores = b.op("aten.bmm.default", rows(q, [B * H, L, E]), kt)
        scores = b.op("aten._unsafe_view.default", scores, [B, H, L, L])
        weights = b.op("aten._softmax.default", b.op("aten.mul.Tensor", scores, E**-0.5), -1, False)
        out = b.op("aten.bmm.default", rows(weights, [B * H, L, L]), rows(v, [B * H, L, E]))
        return b.op("aten._unsafe_view.default", out, [B, H, L, E])

    shape = ((B, H, L, E), torch.float32)
    graph = make_graph("contiguous_attention", {"q": shape, "k": shape, "v": shape}, attention)
    compiled = compile_graph(to_prims_keep(graph))
    calls = [b for b in compiled.program.buffers if isinstance(b, ExternCall)]
    assert [c.kernel for c in calls] == ["prims.scaled_dot_product_attention"]
    assert calls[0].layout.strides == (H * L * E, L * E, E, 1)
    assert not [b for b in compiled.program.buffers if isinstance(b, ComputedBuffer)]
    q, k, v = (torch.randn(B, H, L, E) for _ in range(3))
    assert_matches_eager(compiled, graph, q, k, v, rtol=1e-5, atol=1e-5)
