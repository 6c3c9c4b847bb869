"""A buffer only library calls read moves to just before the first of them: a backward's GELU
recompute, placed at the graph's start, then shares one kernel with the GELU's backward."""

import pytest
import torch

from torchsmith.inductor import lower, to_prims
from torchsmith.inductor.fusion.scheduler import schedule
from torchsmith.inductor.loop_ir.program import ComputedBuffer, ExternCall
from torchsmith.inductor.lowering.inline import inline_pointwise
from torchsmith.inductor.lowering.sink import sink_extern_inputs
from torchsmith.inductor.testing import assert_matches_eager, make_graph


def gelu_backward_graph():
    """What autograd's backward of `gelu(pre) @ w` makes: the GELU output recomputed first, the
    input gradient's matmul, the weight gradient's matmul reading the recompute, then the GELU's
    backward reading the input gradient and `pre` again."""

    def body(b, pre, grad, w):
        out = b.op("aten.gelu.default", pre)  # the recompute: only the matmul below reads it
        grad_in = b.op("aten.mm.default", grad, w)
        grad_w = b.op("aten.mm.default", b.op("aten.t.default", grad), out)
        return b.op("aten.gelu_backward.default", grad_in, pre), grad_w

    f32 = torch.float32
    types = {"pre": ((64, 32), f32), "grad": ((64, 16), f32), "w": ((16, 32), f32)}
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
    graph = gelu_backward_graph()
    inputs = [torch.randn(64, 32), torch.randn(64, 16), torch.randn(16, 32)]
    compiled = compile_graph_triton(graph, inputs)
    assert sum(1 for _ in compiled.kernels) == 1
    assert_matches_eager(compiled, graph, *[x.to(device) for x in inputs], atol=1e-5, rtol=1e-4)
