"""Kernel-local buffers (cpp_local) and the index-only inlining that feeds them, against eager.

Softmax-like kernels keep their row max, exp values and sum in arrays of the outer iteration; a
causal mask built from iota compares is computed inside the loops. Values are compared with the
reference interpreter (eager PyTorch) on odd sizes (vector tails), masked rows and rows that are
entirely -inf (softmax gives nan there, as eager does).
"""

import math

import pytest
import torch

from torchsmith.inductor import compile_graph, lower, to_prims
from torchsmith.inductor.cpp.codegen import local_buffers
from torchsmith.inductor.fusion.memory_plan import plan_memory
from torchsmith.inductor.fusion.scheduler import schedule
from torchsmith.inductor.loop_ir.program import Constant, IndexValue, Op, index_var
from torchsmith.inductor.loop_ir.simplify import simplify
from torchsmith.inductor.lowering.inline import inline_pointwise
from torchsmith.inductor.testing import assert_matches_eager, make_graph

F32, I64 = torch.float32, torch.int64
CPU = torch.device("cpu")


def kernel_count(compiled) -> int:
    return compiled.source.count('extern "C" void kernel')


def causal_softmax(scale: float):
    def body(b, x):
        n = x.type.shape[-1]
        ones = b.op("aten.ones.default", [n, n], dtype=torch.bool, device=CPU)
        causal = b.op("aten.tril.default", ones)
        scores = b.op("aten.div.Scalar", x, scale)
        masked = b.op("aten.masked_fill.Scalar", scores, b.op("aten.bitwise_not.default", causal), -math.inf)
        return b.op("aten._softmax.default", masked, -1, False)

    return body


def softmax(b, x):
    return b.op("aten._softmax.default", x, -1, False)


@pytest.mark.parametrize("shape", [(2, 3, 37, 37), (1, 2, 16, 16), (3, 1, 5, 5)])
def test_causal_softmax_is_one_kernel_with_local_rows(shape):
    graph = make_graph("causal", {"x": (shape, F32)}, causal_softmax(math.sqrt(8)))
    compiled = compile_graph(graph)
    x = torch.randn(shape)
    assert_matches_eager(compiled, graph, x, rtol=1e-5, atol=1e-6)
    # The mask is computed from the loop indices: no iota or mask kernel, no stored mask.
    assert kernel_count(compiled) == 1
    # Only the result has storage: the masked scores, max, exp values and sum are local arrays.
    assert [a.buffer for a in compiled.memory_plan.allocations] == [compiled.program.outputs[0].buffer]
    # golden/causal_softmax.txt shows the local arrays (`l_exp[`) and, in this masking kernel, our
    # exp (`ts::exp_f32`), fast on -inf where libmvec's takes a scalar path per such lane.


def test_rows_entirely_masked_give_nan_as_eager():
    def body(b, x, keep):
        masked = b.op("aten.masked_fill.Scalar", x, b.op("aten.logical_not.default", keep), -math.inf)
        return b.op("aten._softmax.default", masked, -1, False)

    graph = make_graph("masked", {"x": ((6, 19), F32), "keep": ((6, 19), torch.bool)}, body)
    compiled = compile_graph(graph)
    x, keep = torch.randn(6, 19), torch.rand(6, 19) > 0.5
    keep[1] = False  # a row of -inf: nan everywhere
    keep[2] = True
    keep[3, :] = False
    keep[3, 18] = True  # one kept element, in the vector tail: exactly 1
    assert_matches_eager(compiled, graph, x, keep, rtol=1e-5, atol=1e-6)
    out = compiled(x, keep)[0]
    assert torch.isnan(out[1]).all() and out[3, 18] == 1


@pytest.mark.parametrize(
    "rows, cols", [(70, 1), (70, 7), (70, 33), (70, 1000), (70, 1031), (13, 33), (7, 5000), (64, 4100)]
)
def test_softmax_values_and_no_exp_buffer(rows, cols):
    # 7 rows: too few to thread, the kernel threads each member inside the row, over shared arrays.
    graph = make_graph("softmax", {"x": ((rows, cols), F32)}, softmax)
    compiled = compile_graph(graph)
    x = torch.randn(rows, cols) * 10
    x[3, -1] = 60.0  # the row's max in the vector tail
    x[4] = -math.inf  # all -inf: nan
    x[5, cols // 2] = math.inf  # one inf: nan where x - max is inf - inf
    x[6, 0] = math.nan
    assert_matches_eager(compiled, graph, x, rtol=1e-5, atol=1e-6)
    assert len(compiled.memory_plan.allocations) == 1
    # No masking constant: libmvec's vector expf (golden/reductions.txt's softmax, written with libmvec).


def test_local_buffers_need_every_reader_in_the_kernel():
    def body(b, x):
        m = b.op("aten.amax.default", x, [1], True)
        e = b.op("aten.exp.default", b.op("aten.sub.Tensor", x, m))
        s = b.op("aten.sum.dim_IntList", e, [1], True)
        return b.op("aten.div.Tensor", e, s), m  # the max is an output too: it needs memory

    graph = make_graph("softmax_and_max", {"x": ((8, 24), F32)}, body)
    program, _ = inline_pointwise(lower(to_prims(graph)))
    plan = schedule(program)
    local = local_buffers(program, plan.groups)
    assert "exp" in local and "sum" in local and "amax" not in local
    memory = plan_memory(program, list(plan.steps), local)
    assert {a.buffer for a in memory.allocations}.isdisjoint(local)
    compiled = compile_graph(graph)
    assert_matches_eager(compiled, graph, torch.randn(8, 24), rtol=1e-5, atol=1e-6)


def test_too_long_rows_stay_in_memory():
    graph = make_graph("softmax", {"x": ((4, 20000), F32)}, softmax)
    program, _ = inline_pointwise(lower(to_prims(graph)))
    plan = schedule(program)
    local = local_buffers(program, plan.groups)
    assert "exp" not in local  # 80 KB per row: more than a kernel keeps on its stack
    compiled = compile_graph(graph)
    assert_matches_eager(compiled, graph, torch.randn(4, 20000), rtol=1e-5, atol=1e-6)


def test_layer_norm_keeps_values_with_local_statistics():
    def body(b, x, w, bias):
        return b.op("aten.native_layer_norm.default", x, [45], w, bias, 1e-5)[0]

    graph = make_graph("ln", {"x": ((37, 45), F32), "w": ((45,), F32), "bias": ((45,), F32)}, body)
    compiled = compile_graph(graph)
    inputs = (torch.randn(37, 45) * 3 + 5, torch.randn(45), torch.randn(45))
    assert_matches_eager(compiled, graph, *inputs, rtol=1e-4, atol=1e-5)
    assert len(compiled.memory_plan.allocations) == 1


# ---- expr_simplify (no C++ build) ---------------------------------------------------------------


def test_simplify_drops_iota_arithmetic_and_bool_where():
    i0 = IndexValue(index_var(0), I64)
    iota = Op("add", (Op("mul", (i0, Constant(1, I64)), I64), Constant(0, I64)), I64)
    assert simplify(iota) == i0
    le = Op("le", (i0, Constant(3, I64)), torch.bool)
    where = Op("where", (le, Constant(True, torch.bool), Constant(False, torch.bool)), torch.bool)
    assert simplify(where) == le
    flipped = Op("where", (le, Constant(False, torch.bool), Constant(True, torch.bool)), torch.bool)
    assert simplify(Op("bitwise_not", (flipped,), torch.bool)) == le


def test_simplify_keeps_float_additions_and_dtype_changes():
    x = IndexValue(index_var(0), F32)
    plus_zero = Op("add", (x, Constant(0.0, F32)), F32)  # -0.0 + 0.0 is +0.0: not a no-op
    assert simplify(plus_zero) == plus_zero
    assert simplify(Op("mul", (x, Constant(1.0, F32)), F32)) == x
    widened = Op("add", (IndexValue(index_var(0), torch.int32), Constant(0, I64)), I64)
    assert simplify(widened) == widened  # the result is int64, its operand int32
    bool_mul = Op("mul", (Constant(True, torch.bool), Constant(1, torch.bool)), torch.bool)
    assert simplify(bool_mul) == bool_mul


# ---- division by a row invariant (multiplied by its reciprocal) ---------------------------------


def test_division_by_row_sums_including_tiny_zero_and_special_sums():
    def body(b, x, y):
        return b.op("aten.div.Tensor", x, b.op("aten.sum.dim_IntList", y, [1], True))

    graph = make_graph("normalize", {"x": ((8, 21), F32), "y": ((8, 21), F32)}, body)
    compiled = compile_graph(graph)
    # The reciprocal path is what this test checks: golden/row_division.txt shows this graph using it.
    x, y = torch.randn(8, 21) * 1e3, torch.rand(8, 21)
    y[1] = 0  # x / 0: inf, -inf, nan for 0
    x[1, 3] = 0
    y[2] = 0
    y[2, 0] = 1e-44  # a denormal sum: its plain reciprocal overflows to inf
    x[2, :5] = torch.tensor([1e-30, -1e-35, 3.0, 0.0, 1e-40])
    y[3] = 0
    y[3, 5] = 3e-38  # tiny normal
    y[4, 2] = math.inf
    y[5, 7] = math.nan
    got, expected = compiled(x, y)[0], x / y.sum(1, keepdim=True)
    # Within 2.5 ulp: the reciprocal rounds once more, and our row sums accumulate in double.
    torch.testing.assert_close(got, expected, rtol=3e-7, atol=0, equal_nan=True)


def test_exp_of_masked_and_very_negative_values():
    def body(b, x):
        return b.op("aten.exp.default", x)

    graph = make_graph("exp", {"x": ((3, 37), F32)}, body)
    compiled = compile_graph(graph)
    x = torch.randn(3, 37) * 40
    x[0, :8] = torch.tensor([-math.inf, -1e9, -87.5, -88.7, -100.0, -103.9, -104.5, math.nan])
    x[1, :4] = torch.tensor([math.inf, 88.7, 89.0, -0.0])
    got, expected = compiled(x)[0], torch.exp(x)
    torch.testing.assert_close(got, expected, rtol=3e-7, atol=0, equal_nan=True)


@pytest.mark.parametrize("width", [37, 1024])
def test_softmax_row_exp_is_computed_inside_its_sum_loop(width):
    # exp(x - max) is stored to its local row inside the sum's loop: three passes over a row
    # (max; exp and sum; scale), not four.
    graph = make_graph("softmax", {"x": ((5, width), F32)}, softmax)
    compiled = compile_graph(graph)
    x = torch.randn(5, width)
    x[2, 3] = float("nan")
    assert_matches_eager(compiled, graph, x, rtol=1e-5, atol=1e-6)
    source = compiled.source
    assert "l_exp[r0] =" in source and "l_exp[i1] =" not in source, source
