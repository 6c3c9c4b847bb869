"""gather, index, embedding and index_select: loops that load at indices read from index tensors
(`Indirect`), checked at run time, against eager PyTorch."""

import pytest
import torch

import torchsmith.prims  # noqa: F401  (registers the prims)
from torchsmith.inductor import compile_graph, lower, to_prims
from torchsmith.inductor.cpp.build import split_source
from torchsmith.inductor.loop_ir.program import ComputedBuffer, Indirect
from torchsmith.inductor.testing import assert_matches_eager, make_graph
from torchsmith.ir import TensorType
from torchsmith.ir.symbolic import symbol

F32, I64 = torch.float32, torch.int64


def _gathers(b, x, g0, g1, e, rows, cols):
    xt = b.op("aten.t.default", x)  # non-contiguous operand, read through its strides
    gathered0 = b.op("aten.gather.default", x, 0, g0)
    gathered1 = b.op("aten.gather.default", xt, -1, g1)
    embedded = b.op("aten.embedding.default", x, e)
    adjacent = b.op("aten.index.Tensor", x, [None, cols])  # negative entries wrap as in eager
    separated = b.op("aten.index.Tensor", b.op("aten.unsqueeze.default", x, 1), [rows, None, cols])
    selected = b.op("aten.index_select.default", xt, 1, rows)
    total = b.op("aten.sum.dim_IntList", b.op("aten.mul.Tensor", gathered0, 2.0), [1])
    return gathered0, gathered1, embedded, adjacent, separated, selected, total


TYPES = {
    "x": ((5, 6), F32), "g0": ((3, 6), I64), "g1": ((6, 2), I64), "e": ((2, 4), I64),
    "rows": ((4,), I64), "cols": ((4,), I64),
}  # fmt: skip


def _inputs():
    return [
        torch.randn(5, 6),
        torch.randint(0, 5, (3, 6)),
        torch.randint(0, 5, (6, 2)),
        torch.randint(0, 5, (2, 4)),
        torch.tensor([4, 0, 2, 2]),
        torch.tensor([-1, 0, 5, -6]),
    ]


def test_gather_index_embedding_index_select_match_eager():
    graph = make_graph("gathers", TYPES, _gathers)
    compiled = compile_graph(graph)
    assert_matches_eager(compiled, graph, *_inputs())


def test_gather_loads_its_operand_in_place():
    program = lower(to_prims(make_graph("gathers", TYPES, _gathers)))
    gather = next(b for b in program.buffers if b.name == "gather")
    assert isinstance(gather, ComputedBuffer) and isinstance(gather.body.value, Indirect)
    assert "let x0 = index(load(g0, 6*i0 + i1), 5) in load(x, i1 + 6*x0)" in str(gather)


def test_out_of_range_index_raises_as_eager_does():
    graph = make_graph("gathers", TYPES, _gathers)
    compiled = compile_graph(graph)
    inputs = _inputs()
    inputs[1][2, 3] = 5  # gather along a dim of size 5: eager raises RuntimeError
    with pytest.raises(RuntimeError, match="index 5 is out of bounds") as info:
        compiled(*inputs)
    assert "prims.gather" in " ".join(info.value.__notes__)
    inputs = _inputs()
    inputs[3][0, 0] = -1  # embedding: negative entries do not wrap, eager raises IndexError
    with pytest.raises(IndexError, match="index -1") as info:
        compiled(*inputs)
    assert "%index = prims.index" in " ".join(info.value.__notes__)
    assert_matches_eager(compiled, graph, *_inputs())  # the record is cleared after raising


def test_gather_with_symbolic_sizes():
    s0 = symbol("s0")

    def body(b, x, index):
        return b.op("prims.gather", x, 1, index), b.op("prims.index", x, (index,))

    graph = make_graph(
        "symbolic", {"x": TensorType.make((s0, 7), F32), "index": TensorType.make((s0, 3), I64)}, body
    )
    compiled = compile_graph(graph)
    for rows in (2, 6):
        x, index = torch.randn(rows, 7), torch.randint(0, 2, (rows, 3))
        assert_matches_eager(compiled, graph, x, index)


def _scatters(b, x, s, r):
    stepped = b.op("aten.slice_scatter.default", x, s, 1, 1, 7, 2)
    selected = b.op("aten.select_scatter.default", x, r, 0, -1)
    whole = b.op("aten.slice_scatter.default", x, b.op("aten.mul.Tensor", x, 2.0), 0, 0)
    return stepped, selected, whole


def test_slice_and_select_scatter_are_pointwise_selects():
    types = {"x": ((4, 8), F32), "s": ((4, 3), F32), "r": ((8,), F32)}
    graph = make_graph("scatters", types, _scatters)
    compiled = compile_graph(graph)
    assert not compiled.program.fallbacks  # no index_put kernel: loops only
    assert_matches_eager(compiled, graph, torch.randn(4, 8), torch.randn(4, 3), torch.randn(8))


def test_index_put_at_data_positions_is_a_scatter_loop_for_cpp_only():
    def body(b, x, rows, values):
        return b.op("aten.index_put.default", x, [rows], values, False)

    types = {"x": ((5, 3), F32), "rows": ((2,), I64), "values": ((2, 3), F32)}
    graph = make_graph("index_put", types, body)
    program = lower(to_prims(graph))  # lower's default: for a code generator without scatter loops
    assert [op for op, _ in program.fallbacks] == ["prims.index_put"]
    program = lower(to_prims(graph), scatter_loops=True)
    assert not program.fallbacks
    assert "scatter [5, 3] from load(x, 3*i0 + i1); over [2, 3]: set at r1 + 3*x0" in str(program)


def test_scatter_of_one_element_per_line_is_a_loop():
    def body(b, grad, target, x):
        picked = b.op("aten.unsqueeze.default", target, 1)
        one_hot = b.op("aten.scatter.value", b.op("aten.zeros_like.default", x), 1, picked, -1.0)
        added = b.op("aten.scatter_add.default", x, 1, picked, b.op("aten.unsqueeze.default", grad, 1))
        return b.op("aten.mul.Tensor", one_hot, 3.0), added

    types = {"grad": ((5,), F32), "target": ((5,), I64), "x": ((5, 7), F32)}
    graph = make_graph("one_hot", types, body)
    compiled = compile_graph(graph)
    assert not compiled.program.fallbacks
    inputs = [torch.randn(5), torch.tensor([0, 6, 3, 3, 1]), torch.randn(5, 7)]
    assert_matches_eager(compiled, graph, *inputs)
    inputs[1][2] = 7
    with pytest.raises(RuntimeError, match="index 7 is out of bounds"):
        compiled(*inputs)


def test_index_checks_work_in_a_library_built_in_parts():
    # Enough independent kernels that cpp_build compiles the translation unit in parts: the index
    # record and its accessor must stay one per library.
    types = {f"y{k}": ((k + 2, 3), F32) for k in range(9)} | {"x": ((5, 6), F32), "index": ((3, 6), I64)}

    def body(b, *values):
        *ys, x, index = values
        exps = tuple(b.op("aten.exp.default", y) for y in ys)
        return (b.op("aten.gather.default", x, 0, index), *exps)

    graph = make_graph("parts", types, body)
    compiled = compile_graph(graph)
    assert len(split_source(compiled.source, 2)) > 1
    inputs = [torch.randn(*shape) for shape, _ in list(types.values())[:-1]] + [torch.randint(0, 5, (3, 6))]
    assert_matches_eager(compiled, graph, *inputs)
    inputs[-1][1, 1] = -2
    with pytest.raises(RuntimeError, match="index -2 is out of bounds"):
        compiled(*inputs)
