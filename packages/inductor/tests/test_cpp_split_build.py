"""A big translation unit is compiled in parts (one compiler process per core) and linked into one
library that behaves like the single-part build."""

import torch

from torchsmith.inductor import BUILD_STATS, compile_graph
from torchsmith.inductor.cpp.build import KERNEL_MARK, SPLIT_FROM_KERNELS, split_source
from torchsmith.inductor.testing import assert_matches_eager, make_graph


def _many_kernels(b, x, w):
    # Reductions with different ranges cannot share a kernel: each is its own kernel.
    outs = []
    t = x
    for k in range(3 * SPLIT_FROM_KERNELS):
        t = b.op("aten.tanh.default", b.op("aten.add.Tensor", t, w))
        outs.append(b.op("aten.sum.dim_IntList", t, [k % 2]))
        t = b.op("aten.mul.Tensor", t, 1.01)
    return tuple(outs) + (t,)


def test_split_source_keeps_every_kernel_once():
    head = "// head\n"
    kernels = [
        f'{KERNEL_MARK}\nextern "C" void k{i}() {{ {"x" * i} }}\n' for i in range(SPLIT_FROM_KERNELS + 3)
    ]
    parts = split_source(head + "".join(kernels), 2)
    assert len(parts) == 2 and all(p.startswith(head) for p in parts)
    for i in range(len(kernels)):
        assert sum(f"void k{i}()" in p for p in parts) == 1
    assert split_source(head + "".join(kernels[:3]), 2) == [head + "".join(kernels[:3])]  # small: one part
    assert len(split_source(head + "".join(kernels), 1)) == 1


def test_graph_built_in_parts_matches_eager(monkeypatch):
    monkeypatch.setenv("TORCHSMITH_COMPILE_JOBS", "3")
    graph = make_graph("split", {"x": ((12, 40), torch.float32), "w": ((40,), torch.float32)}, _many_kernels)
    before = BUILD_STATS.compiled
    compiled = compile_graph(graph)
    assert BUILD_STATS.compiled == before + 1
    assert compiled.source.count(KERNEL_MARK) >= SPLIT_FROM_KERNELS
    assert len(split_source(compiled.source, 3)) == 3
    assert_matches_eager(compiled, graph, torch.randn(12, 40), torch.randn(40), rtol=1e-5, atol=1e-5)
