"""Extern calls: library prims with constant arguments, the eager fallback for ops without a loop
lowering (multi-output ones too), allocation-only and random prims, and the errors for ops that
cannot run that way."""

import functools
import logging

import pytest
import torch

import torchsmith.prims
from torchsmith.inductor import LoweringError, compile_graph, lower, to_prims
from torchsmith.inductor import cpu_pipeline as compile_fx
from torchsmith.inductor.loop_ir.program import ExternCall
from torchsmith.inductor.testing import assert_matches_eager, make_graph
from torchsmith.ir import GraphBuilder, TensorType, events, interpret
from torchsmith.ir.graph import ArgList
from torchsmith.ir.symbolic import symbol

F32, I64 = torch.float32, torch.int64


def test_convolution_and_attention_run_torch_kernels_with_their_constants():
    def body(b, x, w, bias, w2, q, k, v, mask):
        c = b.op("aten.convolution.default", x, w, bias, [1, 1], [1, 1], [1, 1], False, [0, 0], 1)
        c = b.op("aten.relu.default", c)
        grouped = b.op("aten.convolution.default", c, w2, None, [2, 2], [0, 1], [1, 1], False, [0, 0], 2)
        causal = b.op("aten.scaled_dot_product_attention.default", q, k, v, None, 0.0, True)
        masked = b.op("aten.scaled_dot_product_attention.default", q, k, v, mask, 0.0, False, scale=0.5)
        return grouped, causal, masked

    types = {
        "x": ((2, 3, 9, 8), F32), "w": ((4, 3, 3, 3), F32), "bias": ((4,), F32), "w2": ((6, 2, 3, 2), F32),
        "q": ((2, 5, 8), F32), "k": ((2, 7, 8), F32), "v": ((2, 7, 4), F32), "mask": ((5, 7), F32),
    }  # fmt: skip
    graph = make_graph("library", types, body)
    program = lower(torchsmith.prims.decompose(graph))
    calls = [b for b in program.buffers if isinstance(b, ExternCall)]
    assert [c.kernel for c in calls] == ["prims.convolution"] * 2 + ["prims.scaled_dot_product_attention"] * 2
    assert not program.fallbacks  # library calls by design, not fallbacks
    inputs = [torch.randn(*shape, dtype=dtype) for shape, dtype in types.values()]
    assert_matches_eager(compile_graph(graph), graph, *inputs, rtol=1e-5, atol=1e-5)


def test_fallbacks_run_eagerly_are_listed_and_logged_once(caplog):
    def body(b, x, index, src):
        values, indices = b.op("aten.topk.default", b.op("aten.mul.Tensor", x, 2.0), 3)
        again, _ = b.op("aten.topk.default", x, 2)
        sorted_values, order = b.op("aten.sort.default", x, 1, True)
        shifted = b.op("aten.add.Tensor", indices, 1)  # a loop reading the second output
        total = b.op("aten.cumsum.default", x, 0)
        scattered = b.op("aten.scatter_add.default", x, 1, index, src)
        return values, shifted, again, sorted_values, order, total, scattered

    types = {"x": ((4, 6), F32), "index": ((4, 5), I64), "src": ((4, 5), F32)}
    graph = make_graph("fallbacks", types, body)
    with caplog.at_level(logging.INFO, logger="torchsmith.inductor.fallback"):
        compiled = compile_graph(graph)
    ops = [op for op, _ in compiled.program.fallbacks]
    # A short cumsum is a masked-reduction loop (lowerings_scan) and scatter_add a scatter loop
    # (lowerings_scatter), not extern calls.
    assert ops == ["aten.topk.default", "aten.sort.default"]
    assert sum("aten.topk.default runs eagerly" in r.getMessage() for r in caplog.records) == 1
    x = torch.randn(4, 6)
    index = torch.tensor([[0, 0, 0, 5, 5]] * 4)  # duplicates accumulate
    assert_matches_eager(compiled, graph, x, index, torch.randn(4, 5))


def test_index_put_accumulates_duplicates_and_scatter_writes():
    def body(b, x, rows, values, index):
        put = b.op("aten.index_put.default", x, [rows], values, True)
        return put, b.op("aten.scatter.value", x, 0, index, 3.0)

    types = {"x": ((5, 3), F32), "rows": ((4,), I64), "values": ((4, 3), F32), "index": ((2, 3), I64)}
    graph = make_graph("writes", types, body)
    rows = torch.tensor([1, 1, -1, 3])
    index = torch.tensor([[0, 1, 2], [3, 4, 0]])  # distinct per column: which write wins is defined
    xt = torch.randn(3, 5).t()  # a non-contiguous operand
    inputs = xt.contiguous(), rows, torch.randn(4, 3), index
    assert_matches_eager(compile_graph(graph), graph, *inputs)


def test_empty_allocates_and_philox_matches_the_prim_bit_for_bit():
    b = GraphBuilder("creation")
    seed = b.input("seed", TensorType.make((), I64))
    empty = b.op("prims.empty_strided", [3, 4], [1, 3], dtype=F32, device=torch.device("cpu"))
    rand = b.op("prims.philox_rand", [64, 3], seed, 7, dtype=F32, device=torch.device("cpu"))
    randn = b.op("prims.philox_randn", [5, 2], 11, 3, dtype=torch.float64, device=torch.device("cpu"))
    graph = b.build(empty, b.op("prims.mul", rand, rand), randn)
    compiled = compile_graph(graph)
    got, expected = compiled(torch.tensor(1234)), interpret(graph, torch.tensor(1234))
    assert got[0].shape == (3, 4) and got[0].stride() == (1, 3) and got[0].dtype == F32
    assert torch.equal(got[1], expected[1]) and torch.equal(got[2], expected[2])


def test_tensor_literal_from_python_data():
    b = GraphBuilder("literal")
    x = b.input("x", TensorType.make((2, 2), F32))
    data = ArgList([ArgList([1.0, 2.5]), ArgList([-3.0, 4.0])])
    literal = b.op("torch.tensor", data, dtype=F32, device=torch.device("cpu"))
    graph = b.build(b.op("aten.mul.Tensor", x, literal))
    assert_matches_eager(compile_graph(graph), graph, torch.randn(2, 2))


def test_scalar_tensor_literal_is_a_constant_loop_not_a_copy_per_call():
    b = GraphBuilder("scalar_literal")
    x = b.input("x", TensorType.make((2, 2), F32))
    literal = b.op("torch.tensor", -0.5, dtype=F32, device=torch.device("cpu"))
    graph = b.build(b.op("aten.mul.Tensor", x, literal))
    compiled = compile_graph(graph)
    assert_matches_eager(compiled, graph, torch.randn(2, 2))
    assert not [buffer for buffer in compiled.program.buffers if isinstance(buffer, ExternCall)]


def test_mutating_op_is_refused_with_the_node():
    b = GraphBuilder("mutating")
    x = b.input("x", TensorType.make((3,), F32))
    graph = b.build(b.op("aten.add_.Tensor", x, x))
    with pytest.raises(LoweringError, match=r"aten\.add_\.Tensor mutates") as info:
        lower(graph)
    assert info.value.node is graph.nodes[0]


def test_convolution_backward_with_unrequested_outputs():
    def body(b, grad, x, w):
        # output_mask skips the input gradient: that output is None, the others tensors.
        _, grad_w, grad_b = b.op(
            "aten.convolution_backward.default", grad, x, w, [4], [1, 1], [1, 1], [1, 1], False, [0, 0], 1,
            [False, True, True],
        )  # fmt: skip
        return grad_w, b.op("aten.mul.Tensor", grad_b, 2.0)

    types = {"grad": ((2, 4, 6, 6), F32), "x": ((2, 3, 6, 6), F32), "w": ((4, 3, 3, 3), F32)}
    graph = make_graph("conv_backward", types, body)
    inputs = [torch.randn(*shape) for shape, _ in types.values()]
    assert_matches_eager(compile_graph(graph), graph, *inputs, rtol=1e-5, atol=1e-5)


def test_data_dependent_result_shape_is_refused():
    b = GraphBuilder("nonzero")
    x = b.input("x", TensorType.make((5,), F32))
    nonzero = b.op("aten.nonzero.default", x, out_type=TensorType.make((symbol("u0"), 1), I64))
    with pytest.raises(LoweringError, match=r"aten\.nonzero\.default's result depends on data"):
        lower(b.build(nonzero))


def test_extern_calls_with_symbolic_sizes():
    s0 = symbol("s0")
    b = GraphBuilder("symbolic")
    x = b.input("x", TensorType.make((s0, 4), F32))
    w = b.input("w", TensorType.make((4, 3), F32))
    total = b.op("prims.cumsum", x, 0)
    product = b.op("prims.mm", b.op("prims.flip", x, [0]), w)
    empty = b.op("prims.empty", [s0, 2], dtype=F32, device=torch.device("cpu"))
    graph = b.build(total, product, empty)
    compiled = compile_graph(graph)
    for rows in (1, 6):
        x, w = torch.randn(rows, 4), torch.randn(4, 3)
        got, expected = compiled(x, w), interpret(graph, x, w)
        torch.testing.assert_close(got[:2], expected[:2])
        assert got[2].shape == (rows, 2)


def test_philox_loops_match_the_prim_with_symbolic_sizes():
    s0, cpu = symbol("s0"), torch.device("cpu")
    b = GraphBuilder("random")
    seed = b.input("seed", TensorType.make((), I64))
    x = b.input("x", TensorType.make((s0, 5), F32))
    uniform = b.op("prims.philox_rand", [s0, 5], seed, 7, dtype=F32, device=cpu)
    wide = b.op("prims.philox_rand", [300], -3, 2**40 + 5, dtype=torch.float64, device=cpu)
    normal = b.op("prims.philox_randn", [33, 3], seed, 0, dtype=F32, device=cpu)
    graph = b.build(b.op("prims.mul", uniform, x), wide, normal)
    compiled = compile_graph(graph)
    assert not compiled.program.fallbacks  # loops computing Philox in C++, not the prim's torch code
    for rows in (1, 40):
        inputs = torch.tensor(2**35 + 17), torch.randn(rows, 5)
        for got, expected in zip(compiled(*inputs), interpret(graph, *inputs)):
            assert torch.equal(got, expected)


def test_fallback_emits_one_event_per_op():
    b = GraphBuilder("events")
    x = b.input("x", TensorType.make((4, 2000), F32))  # scans too long for the loop form
    first = b.op("prims.cumsum", x, 1)
    graph = b.build(b.op("prims.cumsum", first, 1))
    with events.observe() as seen:
        lower(graph)
    fallbacks = [e.payload for e in seen if (e.stage, e.kind) == ("inductor", "fallback")]
    assert [(p["name"], p["op"]) for p in fallbacks] == [("events", "prims.cumsum")]


def test_bias_add_joins_the_matmul_as_addmm(monkeypatch):
    def body(b, x, w, bias, w2):
        hidden = b.op("aten.addmm.default", bias, x, b.op("aten.t.default", w))  # nn.Linear
        shared = b.op("aten.mm.default", x, w2)  # read twice: stays an mm
        twice = b.op("aten.add.Tensor", shared, shared)
        return b.op("aten.relu.default", hidden), twice

    types = {"x": ((6, 5), F32), "w": ((4, 5), F32), "bias": ((4,), F32), "w2": ((5, 3), F32)}
    graph = make_graph("linear", types, body)
    kernels = [b.kernel for b in lower(to_prims(graph), addmm=True).buffers if isinstance(b, ExternCall)]
    assert sorted(kernels) == ["extern.addmm", "prims.mm"]
    assert "extern.addmm" not in str(lower(to_prims(graph)))  # off unless asked (Triton fuses its own)
    monkeypatch.setattr(compile_fx, "lower", functools.partial(lower, addmm=True))
    inputs = [torch.randn(*shape) for shape, _ in types.values()]
    assert_matches_eager(compile_graph(graph), graph, *inputs)


@pytest.mark.parametrize("seq_first", [True, False])
def test_linear_on_a_sequence_first_view_is_one_mm(seq_first):
    """nn.MultiheadAttention with batch_first=True projects a (L, B, E) transposed view of its input:
    aten's matmul makes that a bmm with the weight broadcast over L (no fold without a copy). Its rows
    are the input's rows in memory order, so it runs as one mm over all of them, read back through
    strides."""

    def body(b, x, w, bias):
        view = b.op("aten.transpose.int", x, 0, 1) if seq_first else x  # (6, 4, 16) or (4, 6, 16)
        batch, rows = (6, 4) if seq_first else (4, 6)
        weight = b.op("aten.expand.default", b.op("aten.t.default", w), [batch, 16, 24])
        return (b.op("aten.add.Tensor", b.op("aten.bmm.default", view, weight), bias),)

    types = {"x": ((4, 6, 16), F32), "w": ((24, 16), F32), "bias": ((24,), F32)}
    graph = make_graph("seq_first_linear", types, body)
    inputs = [torch.randn(4, 6, 16), torch.randn(24, 16), torch.randn(24)]
    program = lower(to_prims(graph))
    kernels = [b.kernel for b in program.buffers if isinstance(b, ExternCall)]
    assert kernels == ["prims.mm"], kernels
    assert_matches_eager(compile_graph(graph, inputs), graph, *inputs, atol=1e-5, rtol=1e-5)


def test_bmm_of_distinct_matrices_stays_a_bmm():
    def body(b, x, y):
        return (b.op("aten.bmm.default", b.op("aten.transpose.int", x, 0, 1), y),)

    graph = make_graph("bmm", {"x": ((5, 3, 8), F32), "y": ((3, 8, 7), F32)}, body)
    inputs = [torch.randn(5, 3, 8), torch.randn(3, 8, 7)]
    program = lower(to_prims(graph))
    assert [b.kernel for b in program.buffers if isinstance(b, ExternCall)] == ["prims.bmm"]
    assert_matches_eager(compile_graph(graph, inputs), graph, *inputs, atol=1e-5, rtol=1e-5)
