"""The scheduler against eager: inlining, vertical and horizontal grouping, and the recorded decisions.

Kernel counts are checked in the generated C++ (one `extern "C"` function per kernel); values always
against the reference interpreter (eager PyTorch). Decision-only tests need no C++ compiler.
"""

import logging

import pytest
import torch

from torchsmith.inductor import compile_graph, lower, to_prims
from torchsmith.inductor.fusion.scheduler import FusionDecision, schedule
from torchsmith.inductor.loop_ir.program import ComputedBuffer, loads
from torchsmith.inductor.lowering.inline import MAX_DUPLICATED_OPS, inline_pointwise
from torchsmith.inductor.testing import assert_matches_eager, make_graph, rotary_cat
from torchsmith.ir import TensorType
from torchsmith.ir.events import observe
from torchsmith.ir.symbolic import symbol

F32 = torch.float32


def softmax(b, x, dim=1):
    m = b.op("aten.amax.default", x, [dim], True)
    e = b.op("aten.exp.default", b.op("aten.sub.Tensor", x, m))
    return b.op("aten.div.Tensor", e, b.op("aten.sum.dim_IntList", e, [dim], True))


def kernel_count(compiled) -> int:
    return compiled.source.count('extern "C" void kernel')


def scheduled(graph):
    program, inlined = inline_pointwise(lower(to_prims(graph)))
    return program, inlined, schedule(program)


# ---- decisions (no C++ build) -------------------------------------------------------------------


def test_softmax_groups_into_one_kernel_with_reasons():
    program, inlined, plan = scheduled(make_graph("softmax", {"x": ((8, 16), F32)}, softmax))
    # sub lives in exp; exp (a library call, read by sum and div) is stored once per row, not recomputed.
    assert [b.name for b in program.buffers] == ["amax", "exp", "sum", "div"]
    assert [[b.name for b in g] for g in plan.groups] == [["amax", "exp", "sum", "div"]]
    decisions = [*inlined, *plan.decisions]
    assert all(isinstance(d, FusionDecision) and d.reason for d in decisions)
    taken = [(d.kind, d.producer, d.consumer, d.taken) for d in decisions]
    assert ("inline", "sub", "exp", True) in taken and ("inline", "exp", "div", False) in taken
    assert ("vertical", "amax", "exp", True) in taken and ("vertical", "exp", "sum", True) in taken


def test_layer_norm_statistics_stay_buffers_read_once_per_row():
    def body(b, x, w, bias):
        return b.op("aten.native_layer_norm.default", x, [32], w, bias, 1e-5)[0]

    graph = make_graph("ln", {"x": ((4, 32), F32), "w": ((32,), F32), "bias": ((32,), F32)}, body)
    _, inlined, plan = scheduled(graph)
    assert len(plan.groups) == 1
    broadcast = [d for d in inlined if not d.taken]
    assert broadcast and all("broadcast" in d.reason for d in broadcast)


def expensive_chain(b, x):
    for op in ("sin", "cos", "exp", "tanh", "sigmoid"):
        x = b.op(f"aten.{op}.default", x)
    return x


def test_expensive_producer_with_several_consumers_stays_a_buffer():
    def body(b, x):
        t = expensive_chain(b, x)
        # the second consumer reads it transposed: another element per iteration, no shared loop
        return b.op("aten.mul.Tensor", t, 2.0), b.op("aten.add.Tensor", b.op("aten.t.default", t), 1.0)

    program, inlined, _ = scheduled(make_graph("dup", {"x": ((4, 8), F32)}, body))
    refused = [d for d in inlined if not d.taken]
    assert refused and all("load sites" in d.reason for d in refused)
    cost = int(refused[0].reason.split("cost ")[1].split(" ")[0])
    assert cost * 2 > MAX_DUPLICATED_OPS and "x 2 load sites" in refused[0].reason
    assert len(program.buffers) == 3  # the chain, then its two cheap consumers


def test_expensive_producer_read_by_siblings_of_one_loop_is_computed_once_in_it():
    # A GELU's erf term read by its output and by its derivative: both consumers read it at the same
    # element of the same loops, so it is inlined into both and their shared kernel computes it once.
    def body(b, x):
        t = expensive_chain(b, x)
        return b.op("aten.mul.Tensor", t, x), b.op("aten.add.Tensor", t, 1.0)

    graph = make_graph("siblings_dup", {"x": ((4, 8), F32)}, body)
    program, inlined, plan = scheduled(graph)
    assert all(d.taken for d in inlined)
    assert any("computed once in their shared loop" in d.reason for d in inlined)
    assert len(program.buffers) == 2 and [len(g) for g in plan.groups] == [2]
    compiled = compile_graph(graph, [torch.randn(4, 8)])
    assert kernel_count(compiled) == 1
    kernel = compiled.source.split("// @torchsmith-kernel")[-1]
    assert kernel.count("sinf(") == 1  # once per element, not once per consumer
    assert_matches_eager(compiled, graph, torch.randn(4, 8))


def test_siblings_that_cannot_share_a_loop_keep_an_expensive_producer_stored():
    # The second consumer also reads a row sum of the first: it runs after the first's kernel.
    def body(b, x):
        t = expensive_chain(b, x)
        first = b.op("aten.mul.Tensor", t, x)
        total = b.op("aten.sum.dim_IntList", first, [1], True)
        return first, b.op("aten.add.Tensor", t, total)

    graph = make_graph("siblings_apart", {"x": ((4, 8), F32)}, body)
    _, inlined, _ = scheduled(graph)
    refused = [d for d in inlined if "load sites" in d.reason]
    assert refused and not any(d.taken for d in refused) and "x 2 load sites" in refused[0].reason
    assert_matches_eager(compile_graph(graph, [torch.randn(4, 8)]), graph, torch.randn(4, 8))


def test_residual_stream_is_not_recomputed_from_its_start_in_every_layer():
    # A transformer's residual stream: each layer's h is read by the next layer norm's input and by
    # the next residual add, which runs after a matmul. Neither reader stays in memory for sure (the
    # add's operand is inlined into the add), so h must not count as read by siblings of one loop:
    # that would carry every earlier layer's adds into each later kernel.
    def body(b, x, w):
        h = x
        for _ in range(8):
            normed_input = b.op("aten.mul.Tensor", h, 2.0)
            var, mean = b.op("aten.var_mean.correction", normed_input, [1], correction=0, keepdim=True)
            normed = b.op("aten.mul.Tensor", b.op("aten.sub.Tensor", normed_input, mean), var)
            h = b.op("aten.add.Tensor", b.op("aten.mul.Tensor", h, 3.0), b.op("aten.mm.default", normed, w))
        return h

    graph = make_graph("residual_stream", {"x": ((4, 16), F32), "w": ((16, 16), F32)}, body)
    program, _, _ = scheduled(graph)
    widest = max(len({load.buffer for load in loads(b.body.value)}) for b in program.buffers
                 if isinstance(b, ComputedBuffer))
    assert widest <= 4, [str(b) for b in program.buffers]
    x, w = torch.randn(4, 16), torch.randn(16, 16) / 4
    assert_matches_eager(compile_graph(graph, [x, w]), graph, x, w)


def test_cross_row_read_is_refused_and_still_correct_shape():
    # softmax over columns of a square matrix: the statistics are indexed by the column (i1), which
    # is not the outer loop of the rows; grouping them would read a column maximum not yet computed.
    _, _, plan = scheduled(make_graph("colsoftmax", {"x": ((16, 16), F32)}, lambda b, x: softmax(b, x, 0)))
    refused = {d.consumer: d.reason for d in plan.decisions if not d.taken and d.kind == "vertical"}
    assert "it reads amax at i1, outside the outer iteration" in refused["exp"]
    assert "it reads sum at i1, outside the outer iteration" in refused["div"]
    # Nothing shares the row loop with a column statistic it reads; the column sum of exp joins the
    # kernel storing exp (one pass over its rows: cpp/cross_reduction.py).
    assert [len(g) for g in plan.groups] == [1, 2, 1]


def test_siblings_reading_the_same_rows_fuse_horizontally():
    def body(b, x):
        return b.op("aten.sum.dim_IntList", x, [1]), b.op("aten.amax.default", x, [1])

    _, _, plan = scheduled(make_graph("siblings", {"x": ((8, 16), F32)}, body))
    assert len(plan.groups) == 1
    assert [d.kind for d in plan.decisions if d.taken] == ["horizontal"]


def test_fusion_decisions_are_logged(caplog):
    with caplog.at_level(logging.INFO, logger="torchsmith.inductor.fusion"):
        scheduled(make_graph("softmax", {"x": ((8, 16), F32)}, softmax))
    text = caplog.text
    assert "inline sub -> exp: fused" in text and "inline exp -> sum: refused" in text
    assert "vertical amax -> exp: fused" in text


# ---- compiled against eager -------------------------------------------------------------------------


def test_softmax_one_kernel_matches_eager_and_emits_events():
    graph = make_graph("softmax", {"x": ((37, 300), F32)}, softmax)
    with observe() as events:
        compiled = compile_graph(graph)
    assert kernel_count(compiled) == 1
    assert_matches_eager(compiled, graph, torch.randn(37, 300) * 4)
    kinds = {(e.stage, e.kind) for e in events}
    assert {("inductor", k) for k in ("loops", "fusion", "code", "time")} <= kinds
    code = next(e for e in events if e.kind == "code")
    assert code.payload["language"] == "c++"
    fusion = next(e for e in events if e.kind == "fusion")
    assert fusion.payload["decisions"] == compiled.decisions and compiled.decisions


def test_log_softmax_layer_norm_gelu_residual_and_epilogues():
    def body(b, x, y, w, bias):
        lsm = b.op("aten._log_softmax.default", x, 1, False)
        ln = b.op("aten.native_layer_norm.default", y, [48], w, bias, 1e-5)[0]
        h = b.op("aten.add.Tensor", y, b.op("aten.gelu.default", ln, approximate="tanh"))  # residual
        scaled = b.op("aten.mul.Tensor", b.op("aten.sum.dim_IntList", x, [1]), 2.0)  # reduction epilogue
        total = b.op("aten.mul.Tensor", b.op("aten.sum.default", y), 0.5)  # full reduction epilogue
        return lsm, h, scaled, total

    types = {"x": ((20, 33), F32), "y": ((20, 48), F32), "w": ((48,), F32), "bias": ((48,), F32)}
    graph = make_graph("mix", types, body)
    compiled = compile_graph(graph)
    # log_softmax with its epilogue sibling, layer norm with gelu and the residual, the full sum.
    assert kernel_count(compiled) == 3
    args = (torch.randn(20, 33) * 3, torch.randn(20, 48), torch.randn(48), torch.randn(48))
    assert_matches_eager(compiled, graph, *args, rtol=1e-4, atol=1e-4)


def test_symbolic_sizes_and_non_contiguous_input():
    s0, s1 = symbol("s0"), symbol("s1")
    x_type = TensorType.make((s0, s1), F32, strides=(1, s0))  # a transposed input

    def prims_softmax(b, x):  # prims infer their types symbolically (aten ops would need out_type=)
        def row_stat(op, t):
            return b.op("prims.broadcast_in_dim", b.op(op, t, [1]), [s0, s1], [0])

        e = b.op("prims.exp", b.op("prims.sub", x, row_stat("prims.amax", x)))
        return b.op("prims.div", e, row_stat("prims.sum", e))

    graph = make_graph("sym_softmax", {"x": x_type}, prims_softmax)
    compiled = compile_graph(graph)
    assert kernel_count(compiled) == 1
    for rows, cols in ((5, 7), (33, 130)):
        x = torch.randn(cols, rows).t()
        assert_matches_eager(compiled, graph, x)


def test_column_softmax_is_correct_when_grouping_is_refused():
    graph = make_graph("colsoftmax", {"x": ((16, 16), F32)}, lambda b, x: softmax(b, x, 0))
    compiled = compile_graph(graph)
    assert kernel_count(compiled) == 3  # amax; exp with its column sum; the division
    assert_matches_eager(compiled, graph, torch.randn(16, 16))


def test_output_code_log_names_the_origin_of_each_fused_buffer(caplog):
    graph = make_graph("softmax_log", {"x": ((6, 10), F32)}, softmax)
    with caplog.at_level(logging.INFO, logger="torchsmith.inductor.output_code"):
        compile_graph(graph)
    text = caplog.text
    assert "kernel0:" in text and "prims.amax" in text and "after inlining" in text
    assert "memory plan" in text and 'extern "C"' in text


def test_elementwise_chain_read_through_a_reshape_is_inlined_by_flat_offset():
    def body(b, x, y):
        t = b.op("aten.mul.Tensor", b.op("aten.exp.default", x), y)  # [4, 6, 8], elementwise
        return b.op("aten.sum.dim_IntList", b.op("aten.view.default", t, [24, 8]), [1])

    graph = make_graph("flat", {"x": ((4, 6, 8), F32), "y": ((4, 6, 8), F32)}, body)
    program, inlined, plan = scheduled(graph)
    assert all(d.taken for d in inlined) and len(program.buffers) == 1
    assert str(program.buffers[0].body.value) == "mul(exp(load(x, 8*i0 + r0)), load(y, 8*i0 + r0))"
    compiled = compile_graph(graph)
    assert_matches_eager(compiled, graph, torch.randn(4, 6, 8), torch.randn(4, 6, 8), rtol=1e-5, atol=1e-5)


def test_rotary_halves_computed_then_cat_inline_into_the_cat():
    # cat reads each half at a clamped index (min(7, i2), max(0, i2 - 8)): the halves' arithmetic is
    # computed inside the cat's loop instead of being stored and read back.
    graph = make_graph("rotary", {"x": ((3, 4, 16), F32), "c": ((4, 8), F32), "s": ((4, 8), F32)}, rotary_cat)
    program, inlined, plan = scheduled(graph)
    assert [b.name for b in program.buffers] == ["cat"], [d for d in inlined if not d.taken]
    compiled = compile_graph(graph)
    assert kernel_count(compiled) == 1
    x, c, s = torch.randn(3, 4, 16), torch.randn(4, 8), torch.randn(4, 8)
    assert_matches_eager(compiled, graph, x, c, s, rtol=1e-6, atol=1e-6)


def test_channels_last_activation_inlines_into_the_padding_that_reads_it():
    # a channels-last activation read by constant_pad_nd at clamped indices (max(0, min(15, i2 - 1))):
    # the nested clamp is one term and the buffer's dims are ordered by stride (N, H, W, C), so the
    # activation is computed inside the padding's loop instead of being stored and read back
    cl = TensorType.make((2, 8, 16, 16), F32, strides=(2048, 1, 128, 8))

    def body(b, x, scale):
        y = b.op("aten.hardtanh.default", b.op("aten.mul.Tensor", x, scale), 0.0, 6.0)
        return b.op("aten.constant_pad_nd.default", y, [1, 1, 1, 1], 0.0)

    graph = make_graph("pad_act", {"x": cl, "scale": ((8, 1, 1), F32)}, body)
    program, inlined, plan = scheduled(graph)
    assert len(program.buffers) == 1, [str(d) for d in inlined if not d.taken]
    x = torch.randn(2, 16, 16, 8).permute(0, 3, 1, 2) * 4
    compiled = compile_graph(graph)
    assert kernel_count(compiled) == 1
    assert_matches_eager(compiled, graph, x, torch.rand(8, 1, 1) + 0.5, rtol=0, atol=0)


def batch_norm_eval(b, x, mean, var, weight, bias):
    """x [N, C, H, W] normalized by per-channel statistics as eval-mode BatchNorm decomposes."""
    def channel(v):
        return b.op("aten.view.default", v, [v.type.shape[0], 1, 1])

    inv = b.op("aten.reciprocal.default", b.op("aten.sqrt.default", b.op("aten.add.Tensor", var, 1e-5)))
    y = b.op("aten.mul.Tensor", b.op("aten.sub.Tensor", x, channel(mean)), channel(inv))
    return b.op("aten.add.Tensor", b.op("aten.mul.Tensor", y, channel(weight)), channel(bias))


BN_INPUTS = {"mean": ((8,), F32), "var": ((8,), F32), "weight": ((8,), F32), "bias": ((8,), F32)}


def bn_arguments(x):
    return x, torch.randn(8), torch.rand(8) + 0.1, torch.randn(8), torch.randn(8)


def test_per_channel_statistics_are_a_prologue_of_the_kernel_that_reads_them():
    # 1 / sqrt(var + eps) per channel cannot share the image's loops nor be inlined per element:
    # its kernel computes it whole (into an array of the call) before the normalization's loops
    cl = TensorType.make((2, 8, 6, 6), F32, strides=(288, 1, 48, 8))
    graph = make_graph("bn", {"x": cl, **BN_INPUTS}, lambda b, x, *s: b.op("aten.relu.default",
                                                                          batch_norm_eval(b, x, *s)))
    program, inlined, plan = scheduled(graph)
    assert len(plan.groups) == 1, [str(d) for d in plan.decisions]
    assert any("whole before its loops" in d.reason for d in plan.decisions if d.taken)
    compiled = compile_graph(graph)
    assert kernel_count(compiled) == 1
    assert "float l_reciprocal[8];" in compiled.source
    x = torch.randn(2, 6, 6, 8).permute(0, 3, 1, 2)
    assert_matches_eager(compiled, graph, *bn_arguments(x), rtol=1e-6, atol=1e-6)


def test_a_prologue_read_by_two_kernels_is_stored_and_both_read_it():
    def body(b, x, z, *stats):
        inv = b.op("aten.rsqrt.default", b.op("aten.add.Tensor", stats[1], 1e-5))  # [8]
        y = b.op("aten.mul.Tensor", x, b.op("aten.view.default", inv, [8, 1, 1]))  # [2, 8, 6, 6]
        s = b.op("aten.sum.dim_IntList", b.op("aten.mul.Tensor", z, inv), [1])  # [5], reads inv per row
        return y, s

    graph = make_graph("bn2", {"x": ((2, 8, 24, 24), F32), "z": ((5, 8), F32), **BN_INPUTS}, body)
    compiled = compile_graph(graph)
    assert kernel_count(compiled) == 2 and "l_rsqrt" not in compiled.source
    args = bn_arguments(torch.randn(2, 8, 24, 24))
    assert_matches_eager(compiled, graph, args[0], torch.randn(5, 8), *args[1:], rtol=1e-5, atol=1e-5)


def test_a_scalar_prologue_before_a_tensor_loop():
    def body(b, x, t):
        scale = b.op("aten.rsqrt.default", b.op("aten.add.Tensor", t, 1.0))  # 0-d
        return b.op("aten.mul.Tensor", x, scale)

    graph = make_graph("scalar", {"x": ((64, 33), F32), "t": ((), F32)}, body)
    compiled = compile_graph(graph)
    assert kernel_count(compiled) == 1
    assert_matches_eager(compiled, graph, torch.randn(64, 33), torch.tensor(3.0), rtol=1e-6, atol=1e-6)


def test_a_graph_of_extern_calls_only_builds_nothing(monkeypatch):
    import torchsmith.inductor.cpu_pipeline as compile_fx

    def no_build(source):
        raise AssertionError("a graph without kernels must not run the C++ compiler")

    monkeypatch.setattr(compile_fx, "load_library", no_build)
    graph = make_graph("mm_only", {"x": ((3, 4), F32), "w": ((4, 5), F32)},
                       lambda b, x, w: b.op("aten.mm.default", x, w))  # fmt: skip
    compiled = compile_graph(graph)
    assert kernel_count(compiled) == 0
    assert_matches_eager(compiled, graph, torch.randn(3, 4), torch.randn(4, 5))


def test_embedding_lookups_inline_into_their_layer_norm_with_checks_before_the_row():
    # Word, position and token-type rows summed, then layer-normed: the gathers pick one row per
    # token (their indices do not change along the hidden dim), so they are read inside the norm's
    # kernel, each index checked once per row; an id out of range still raises eager's error.
    def body(b, ids, types, pos, words, positions, kinds, w, bias):
        rows = b.op("aten.add.Tensor", b.op("aten.embedding.default", words, ids),
                    b.op("aten.embedding.default", kinds, types))  # fmt: skip
        rows = b.op("aten.add.Tensor", rows, b.op("aten.embedding.default", positions, pos))
        return b.op("aten.native_layer_norm.default", rows, [16], w, bias, 1e-5)[0]

    i64 = torch.int64
    types_ = {"ids": ((2, 5), i64), "types": ((2, 5), i64), "pos": ((1, 5), i64),
              "words": ((30, 16), F32), "positions": ((8, 16), F32), "kinds": ((2, 16), F32),
              "w": ((16,), F32), "bias": ((16,), F32)}  # fmt: skip
    graph = make_graph("embeddings", types_, body)
    compiled = compile_graph(graph)
    assert kernel_count(compiled) == 1
    inner = compiled.source.split("#pragma omp simd", 1)[1].split("}", 1)[0]
    assert "checked_index" not in inner, inner
    g = torch.Generator().manual_seed(0)
    inputs = [torch.randint(0, 30, (2, 5), generator=g), torch.randint(0, 2, (2, 5), generator=g),
              torch.arange(5)[None], torch.randn(30, 16, generator=g), torch.randn(8, 16, generator=g),
              torch.randn(2, 16, generator=g), torch.randn(16, generator=g),
              torch.randn(16, generator=g)]  # fmt: skip
    assert_matches_eager(compiled, graph, *inputs, rtol=1e-5, atol=1e-5)
    inputs[0][1, 3] = 30
    with pytest.raises(IndexError):
        compiled(*inputs)
