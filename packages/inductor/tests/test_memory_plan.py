"""The memory plan: dead buffers' storage is reused (pooled by size, or in place), inputs and outputs
never are, and the wrapper following the plan still matches eager."""

import torch

from torchsmith.inductor import compile_graph, lower, to_prims
from torchsmith.inductor.fusion.memory_plan import plan_memory
from torchsmith.inductor.fusion.scheduler import schedule
from torchsmith.inductor.loop_ir.program import (
    ComputedBuffer,
    ExternCall,
    InputBuffer,
    Layout,
    Load,
    LoopProgram,
    Op,
    Pointwise,
    TensorView,
    index_var,
)
from torchsmith.inductor.lowering.inline import inline_pointwise
from torchsmith.inductor.testing import assert_matches_eager, make_graph
from torchsmith.ir import TensorType
from torchsmith.ir.symbolic import symbol

F32 = torch.float32


def mm_chain(b, x, w):
    # Each pointwise step feeds a matmul, so it stays a buffer that the matmul after it reads.
    t1 = b.op("aten.mm.default", x, w)
    t2 = b.op("aten.exp.default", b.op("aten.mul.Tensor", t1, 0.01))
    t3 = b.op("aten.mm.default", t2, w)
    t4 = b.op("aten.sin.default", t3)
    t5 = b.op("aten.mm.default", t4, w)
    t6 = b.op("aten.cos.default", b.op("aten.permute.default", t5, [1, 0]))  # reads t5 transposed
    return b.op("aten.mm.default", t6, w), t2


def planned(graph):
    program, _ = inline_pointwise(lower(to_prims(graph)))
    steps = list(schedule(program).steps)
    return program, steps, plan_memory(program, steps)


def chain_graph():
    return make_graph("chain", {"x": ((16, 16), F32), "w": ((16, 16), F32)}, mm_chain)


def test_in_place_and_pooled_reuse_of_dead_buffers():
    program, _, plan = planned(chain_graph())
    by_buffer = {a.buffer: (a.donor, a.in_place) for a in plan.allocations}
    # exp reads the dead matmul result at the element it writes: in place (an output may take a dead
    # intermediate's storage; it is never handed on).
    assert by_buffer["exp"] == ("mm", True)
    assert by_buffer["sin"] == ("mm_1", True)
    # cos reads mm_2 transposed, so not in place over it: it takes dead sin's storage from the pool.
    assert by_buffer["cos"] == ("sin", False)
    assert "mm_2" in plan.frees[5] and "exp" not in sum(plan.frees, ())


def test_inputs_and_outputs_are_never_donors():
    program, _, plan = planned(chain_graph())
    protected = {b.name for b in program.inputs} | {v.buffer for v in program.outputs}
    assert all(a.donor not in protected for a in plan.allocations)
    assert plan.reused >= 2


def test_wrapper_follows_the_plan_and_matches_eager(monkeypatch):
    graph = chain_graph()
    compiled = compile_graph(graph)
    new = sum(a.donor is None for a in compiled.memory_plan.allocations)
    calls = []
    real = torch.empty_strided
    monkeypatch.setattr(torch, "empty_strided", lambda *a, **k: calls.append(a) or real(*a, **k))
    x, w = torch.randn(16, 16), torch.randn(16, 16) * 0.3
    assert_matches_eager(compiled, graph, x, w, rtol=1e-4, atol=1e-4)
    assert len(calls) == new < len(compiled.memory_plan.allocations)
    # Outputs survive later calls: their storage is never handed to another buffer.
    first = [t.clone() for t in compiled(x, w)]
    kept = compiled(x, w)
    compiled(x * 2, w)
    for a, b in zip(first, kept):
        torch.testing.assert_close(a, b)


def test_symbolic_sizes_plan_by_size_expression():
    s0 = symbol("s0")

    def body(b, x, w):
        t = b.op("prims.mm", b.op("prims.exp", x), w)
        u = b.op("prims.mm", b.op("prims.sin", t), w)
        return b.op("prims.cos", b.op("prims.mul", u, 0.5))

    graph = make_graph("sym_chain", {"x": TensorType.make((s0, 8), F32), "w": ((8, 8), F32)}, body)
    _, _, plan = planned(graph)
    assert plan.reused == 2
    compiled = compile_graph(graph)
    for rows in (3, 40):
        assert_matches_eager(compiled, graph, torch.randn(rows, 8), torch.randn(8, 8), rtol=1e-5, atol=1e-5)


def test_further_outputs_of_an_extern_call_keep_what_they_may_view_alive():
    # torch may return further outputs of a call (split, unbind) as views of its result or its
    # arguments: `a` and `f` must outlive `e`, so `d` may not take their storage while `e` is read.
    layout = Layout((4,), (1,), F32)
    i0 = index_var(0)

    def pointwise(name, op, *sources):
        value = Op(op, tuple(Load(s, i0, F32) for s in sources), F32)
        return ComputedBuffer(name, layout, Pointwise((4,), value))

    def view(name):
        return TensorView(name, (4,), (1,), 0, F32)

    a = pointwise("a", "exp", "x")
    f = ExternCall("f", layout, "aten.some_multi_output_op", (view("a"),))
    e = ExternCall("e", layout, "extern.output", (view("f"),), params=(1,))
    b, d, c = pointwise("b", "sin", "f"), pointwise("d", "cos", "x"), pointwise("c", "add", "e", "d")
    steps = [(a,), (f,), (e,), (b,), (d,), (c,)]
    program = LoopProgram("aliases", 1, (InputBuffer("x", 0, layout),), (), tuple(s[0] for s in steps),
                          (view("c"), view("b")))  # fmt: skip
    plan = plan_memory(program, steps)
    assert plan.donor_of()["d"] not in ("a", "f")
    assert "a" not in sum(plan.frees[:5], ())


def test_cpp_threads_option_sets_openmp_threads_for_the_call_only():
    def body(b, x):
        return b.op("aten.sum.dim_IntList", b.op("aten.exp.default", x), [1])

    graph = make_graph("threads", {"x": ((64, 64), F32)}, body)
    compiled = compile_graph(graph, options={"cpp.threads": 1})
    set_threads, get_threads, wanted = compiled._threads
    before = get_threads()
    seen = []
    compiled._threads = (lambda n: (seen.append(n), set_threads(n))[1], get_threads, wanted)
    assert_matches_eager(compiled, graph, torch.randn(64, 64), rtol=1e-5, atol=1e-5)
    assert seen == [1, before] and get_threads() == before


def test_a_donor_of_the_same_layout_serves_as_it_is(monkeypatch):
    graph = chain_graph()
    compiled = compile_graph(graph)
    donors = {a.buffer: a.donor for a in compiled.memory_plan.allocations}
    assert donors["cos"] == "sin" and donors["exp"] == "mm" and donors["sin"] == "mm_1"
    views = []
    real = torch.Tensor.as_strided
    monkeypatch.setattr(torch.Tensor, "as_strided", lambda self, *a: views.append(a) or real(self, *a))
    x, w = torch.randn(16, 16), torch.randn(16, 16) * 0.3
    assert_matches_eager(compiled, graph, x, w, rtol=1e-4, atol=1e-4)
    views.clear()
    compiled(x, w)
    # exp and sin take the library matmul results' tensors, cos takes sin's (a kernel's own buffer),
    # each dead by then and of the same 16x16 layout at offset 0: no view is made for any of them
    assert views == []


def reshaped_chain(b, x, w):
    t1 = b.op("aten.mm.default", x, w)  # [16, 16]
    t2 = b.op("aten.sin.default", b.op("aten.mul.Tensor", t1, 0.5))  # read by the next matmul
    t3 = b.op("aten.mm.default", t2, w)
    # [4, 64] in a dead buffer's storage: only kernels read it (two reductions over either axis),
    # so its tensor gives them an address and nothing else
    wide = b.op("aten.exp.default", b.op("aten.view.default", b.op("aten.cos.default", t3), [4, 64]))
    return b.op("aten.sum.dim_IntList", wide, [1]), b.op("aten.amax.default", wide, [0])


def test_a_buffer_only_kernels_read_takes_its_donor_tensor_as_it_is(monkeypatch):
    graph = make_graph("reshaped", {"x": ((16, 16), F32), "w": ((16, 16), F32)}, reshaped_chain)
    compiled = compile_graph(graph)
    donated = [a for a in compiled.memory_plan.allocations if a.donor is not None]
    assert donated, "the plan reuses no storage: the test checks nothing"
    x, w = torch.randn(16, 16), torch.randn(16, 16) * 0.3
    assert_matches_eager(compiled, graph, x, w, rtol=1e-4, atol=1e-4)
    views = []
    real = torch.Tensor.as_strided
    monkeypatch.setattr(torch.Tensor, "as_strided", lambda self, *a: views.append(a) or real(self, *a))
    compiled(x, w)
    assert views == []
    assert_matches_eager(compiled, graph, x, w, rtol=1e-4, atol=1e-4)
