"""The kernel emitter takes groups of buffers that share outer loops: the form the scheduler will
hand it. A hand-made group turns softmax into one loop nest over rows."""

import torch

from torchsmith.inductor import CompiledGraph, generate_cpp, load_library, lower, to_prims
from torchsmith.inductor.testing import assert_matches_eager, make_graph


def softmax_graph(rows: int, cols: int):
    def body(b, x):
        m = b.op("aten.amax.default", x, [1], True)
        e = b.op("aten.exp.default", b.op("aten.sub.Tensor", x, m))
        return b.op("aten.div.Tensor", e, b.op("aten.sum.dim_IntList", e, [1], True))

    return make_graph("softmax", {"x": ((rows, cols), torch.float32)}, body)


def test_softmax_as_one_loop_nest():
    graph = softmax_graph(300, 200)
    prims_graph = to_prims(graph)
    program = lower(prims_graph)
    group = tuple(program.buffers)  # amax, sub, exp, sum, div: every one reads only its own row
    source, kernels = generate_cpp(program, [group])
    assert len(kernels) == 1
    # One parallel loop over rows; the members loop over columns inside it.
    assert source.count("#pragma omp parallel for") == 1
    assert source.count("for (int64_t i0 = 0;") == 1
    compiled = CompiledGraph(program, load_library(source), kernels, source, prims_graph)
    assert_matches_eager(compiled, graph, torch.randn(300, 200) * 3)
