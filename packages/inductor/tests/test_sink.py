"""A buffer only library calls read moves to just before the first of them: a backward's GELU
recompute, placed at the graph's start, then shares one kernel with the GELU's backward."""

import pytest
import torch

from torchsmith.inductor import lower, to_prims
from torchsmith.inductor.fusion.scheduler import schedule
from torchsmith.inductor.loop_ir.program import ComputedBuffer, ExternCall
from torchsmith.inductor.lowering.inline import inline_pointwise
from torchsmith.inductor.lowering.sink import sink_extern_inputs, sink_output_externs
from torchsmith.inductor.testing import assert_matches_eager, make_graph


def gelu_backward_graph(device="cpu"):
    """What autograd's backward of `gelu(pre) @ w` makes: the GELU output recomputed first, the
    input gradient's matmul, the weight gradient's matmul reading the recompute, then the GELU's
    backward reading the input gradient and `pre` again."""

    def body(b, pre, grad, w):
        out = b.op("aten.gelu.default", pre)  # the recompute: only the matmul below reads it
        grad_in = b.op("aten.mm.default", grad, w)
        grad_w = b.op("aten.mm.default", b.op("aten.t.default", grad), out)
        return b.op("aten.gelu_backward.default", grad_in, pre), grad_w

    f32 = torch.float32
    types = {"pre": ((64, 32), f32, device), "grad": ((64, 16), f32, device), "w": ((16, 32), f32, device)}
    return make_graph("gelu_backward", types, body)


def _program():
    program, _ = inline_pointwise(lower(to_prims(gelu_backward_graph())))
    return program


def test_recompute_moves_to_just_before_its_matmul():
    program = _program()
    sunk = sink_extern_inputs(program)
    names = [b.name for b in sunk.buffers]
    externs = [b for b in sunk.buffers if isinstance(b, ExternCall)]
    read_by_matmul = {view.buffer for e in externs for view in e.args}
    recompute = next(b for b in program.buffers if isinstance(b, ComputedBuffer) and b.name in read_by_matmul)
    assert program.buffers.index(recompute) == 0  # computed first, before either matmul
    externs = [e.name for e in externs]
    assert names.index(recompute.name) == names.index(externs[1]) - 1  # right before the weight matmul
    assert names.index(recompute.name) > names.index(externs[0])  # after the input gradient's matmul
    assert sorted(names) == sorted(b.name for b in program.buffers)


def test_recompute_and_gelu_backward_share_a_kernel_after_sinking():
    def kernels(program):
        return [g for g in schedule(program, target="triton").groups if isinstance(g[0], ComputedBuffer)]

    program = _program()
    assert len(kernels(program)) == 2
    assert len(kernels(sink_extern_inputs(program))) == 1


def test_sunk_program_compiles_to_the_same_values(monkeypatch):
    if not torch.cuda.is_available():
        monkeypatch.setenv("TRITON_INTERPRET", "1")
    pytest.importorskip("triton", reason="triton is not installed (pip install triton==3.6.0)")
    from torchsmith.inductor.gpu_pipeline import compile_graph_triton

    device = "cuda" if torch.cuda.is_available() else "cpu"
    graph = gelu_backward_graph(device)
    inputs = [torch.randn(64, 32, device=device), torch.randn(64, 16, device=device),
              torch.randn(16, 32, device=device)]
    compiled = compile_graph_triton(graph, inputs)
    assert sum(1 for _ in compiled.kernels) == 1
    assert_matches_eager(compiled, graph, *inputs, atol=1e-5, rtol=1e-4)


def linear_backward_graph():
    """A linear layer's backward as autograd orders it: the weight gradient's matmul (only a graph
    output) before the input gradient's matmul, both reading the activation gradient."""

    def body(b, x, w, grad):
        g = b.op("aten.mul.Tensor", grad, 2.0)
        grad_w = b.op("aten.mm.default", b.op("aten.t.default", g), x)
        grad_x = b.op("aten.mm.default", g, w)
        return grad_w, b.op("aten.relu.default", grad_x)

    f32 = torch.float32
    types = {"x": ((64, 32), f32), "w": ((16, 32), f32), "grad": ((64, 16), f32)}
    return make_graph("linear_backward", types, body)


def test_output_only_matmul_moves_after_the_last_reader_of_its_inputs():
    program, _ = inline_pointwise(lower(to_prims(linear_backward_graph())))
    externs = [b.name for b in program.buffers if isinstance(b, ExternCall)]
    moved = sink_output_externs(program)
    names = [b.name for b in moved.buffers]
    grad_w, grad_x = externs  # program order: the weight gradient first
    # right after the last reader of the activation gradient, before the relu that follows it
    assert names.index(grad_w) == names.index(grad_x) + 1
    assert sorted(names) == sorted(b.name for b in program.buffers)


def test_moving_is_idempotent():
    program, _ = inline_pointwise(lower(to_prims(linear_backward_graph())))
    once = sink_output_externs(program)
    assert sink_output_externs(once).buffers == once.buffers  # nothing left to move


def test_moved_program_compiles_to_the_same_values():
    from torchsmith.inductor import compile_graph

    graph = linear_backward_graph()
    inputs = [torch.randn(64, 32), torch.randn(16, 32), torch.randn(64, 16)]
    assert_matches_eager(compile_graph(graph, inputs), graph, *inputs, atol=1e-5, rtol=1e-4)
