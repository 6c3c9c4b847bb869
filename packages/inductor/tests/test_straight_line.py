"""A graph without size symbols runs as one generated function: it must do exactly what the step
closures do (allocations, buffers in dead ones' storage, library matmuls and their strides, other
library calls, outputs), and a caller that replaces the steps still gets them run."""

import torch

from torchsmith.inductor import compile_graph
from torchsmith.inductor.runtime import extern_plan
from torchsmith.inductor.testing import assert_matches_eager, make_graph
from torchsmith.ir import TensorType
from torchsmith.ir.symbolic import symbol

F32 = torch.float32


def _chain(b, x, w, q, k, v):
    t1 = b.op("aten.mm.default", x, w)
    t2 = b.op("aten.exp.default", b.op("aten.mul.Tensor", t1, 0.01))  # in t1's storage
    t3 = b.op("aten.mm.default", t2, w)
    t4 = b.op("aten.sin.default", t3)
    t5 = b.op("aten.mm.default", t4, w)
    t6 = b.op("aten.cos.default", b.op("aten.permute.default", t5, [1, 0]))  # reads t5 transposed
    t7 = b.op("aten.mm.default", t6, w)
    # a [16, 1] result: its strides are free where the size is 1
    first_column = b.op("aten.slice.Tensor", x, 1, 0, 1)
    column = b.op("aten.mm.default", b.op("aten.permute.default", t7, [1, 0]), first_column)
    attention = b.op("aten.scaled_dot_product_attention.default", q, k, v)  # a library call, not a matmul
    rows = b.op("aten.sum.dim_IntList", b.op("aten.exp.default", x), [1])  # a fresh buffer
    return b.op("aten.add.Tensor", t7, 1.0), t2, column, b.op("aten.mul.Tensor", attention, 2.0), rows


def _graph():
    types = {"x": ((16, 16), F32), "w": ((16, 16), F32), "q": ((2, 4, 8, 16), F32),
             "k": ((2, 4, 8, 16), F32), "v": ((2, 4, 8, 16), F32)}
    return make_graph("straight", types, _chain)


def _inputs():
    g = torch.Generator().manual_seed(0)
    shapes = ((16, 16), (16, 16), (2, 4, 8, 16), (2, 4, 8, 16), (2, 4, 8, 16))
    return [torch.randn(*s, generator=g) * 0.3 for s in shapes]


def test_the_generated_function_does_what_the_steps_do():
    graph = _graph()
    compiled = compile_graph(graph)
    source = compiled._straight.source
    # kernels through their addresses, matmuls inline, the attention call as its closure, buffers
    # in dead ones' storage, dead buffers dropped
    # (through the native caller once it is loaded, else ctypes: test_native_calls covers both)
    assert ".data_ptr()" in source or "call" in source
    assert "r = k" in source and "(v, b, sv, scratch)" in source
    assert "empty_strided(" in source and "= None" in source
    assert "(v)" in source  # a matmul reading a view of its argument (the transposed product)
    inputs = _inputs()
    assert_matches_eager(compiled, graph, *inputs, rtol=1e-4, atol=1e-4)
    straight = [t.clone() for t in compiled(*inputs)]
    compiled._run = list(compiled._run)  # another list: the steps run one by one
    stepped = compiled(*inputs)
    for a, b in zip(straight, stepped, strict=True):
        assert a.shape == b.shape and a.stride() == b.stride() and torch.equal(a, b)
    # outputs of one call survive the next (no output's storage is handed on)
    compiled._run = compiled._planned_run
    first = compiled(*inputs)
    kept = [t.clone() for t in first]
    compiled(*[t * 2 for t in inputs])
    for a, b in zip(first, kept):
        assert torch.equal(a, b)


def test_matmul_results_in_other_strides_are_put_in_the_planned_ones(monkeypatch):
    graph = _graph()
    compiled = compile_graph(graph)
    inputs = _inputs()
    expected = [t.clone() for t in compiled(*inputs)]
    # the library answering in column-major strides: the planned strides must still hold
    real = torch.mm
    transposed = lambda a, b: real(b.t(), a.t()).t()  # noqa: E731
    for name, value in list(compiled._straight.__globals__.items()):
        if value is real:
            monkeypatch.setitem(compiled._straight.__globals__, name, transposed)
    got = compiled(*inputs)
    for a, b in zip(got, expected, strict=True):
        assert a.stride() == b.stride()
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


def test_a_replaced_step_list_runs_step_by_step():
    graph = _graph()
    compiled = compile_graph(graph)
    seen = []

    def counted(run):
        return lambda *a: seen.append(run) or run(*a)

    compiled._run = [counted(run) for run in compiled._planned_run]
    assert_matches_eager(compiled, graph, *_inputs(), rtol=1e-4, atol=1e-4)
    assert len(seen) == len(compiled._planned_run)


def test_only_plain_matmuls_are_written_inline():
    graph = _graph()
    compiled = compile_graph(graph)
    calls = [b for b in compiled.program.buffers if getattr(b, "kernel", None)]
    assert any(extern_plan.returns_own_layout(c) for c in calls)
    assert not all(extern_plan.returns_own_layout(c) for c in calls)  # the attention call


def test_graphs_with_size_symbols_keep_the_step_loop():
    s0 = symbol("s0")

    def body(b, x, w):
        return b.op("prims.cos", b.op("prims.mm", b.op("prims.exp", x), w))

    graph = make_graph("sym", {"x": TensorType.make((s0, 8), F32), "w": ((8, 8), F32)}, body)
    compiled = compile_graph(graph)
    assert compiled._straight is None
    for rows in (3, 40):
        assert_matches_eager(compiled, graph, torch.randn(rows, 8), torch.randn(8, 8), rtol=1e-5, atol=1e-5)
