"""compile_to_python against the reference interpreter (and eager PyTorch): random graphs, in-place
ops on inputs, list and slice arguments, multi-output ops, symbolic shapes and error messages."""

import math
import re

import pytest
import torch
import torch.nn.functional as F

from torchsmith.ir import (
    GraphBuilder,
    InterpretError,
    example_inputs,
    floordiv,
    interpret,
    mod,
    random_graph,
    symbol,
    verify,
)
from torchsmith.ir.pycodegen import compile_to_python


def _clone(inputs):
    return [x.clone() if isinstance(x, torch.Tensor) else x for x in inputs]


def _assert_same(got, want):
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        if isinstance(w, torch.Tensor):
            assert isinstance(g, torch.Tensor)
            assert (g.shape, g.dtype, g.stride()) == (w.shape, w.dtype, w.stride())
            torch.testing.assert_close(g, w, equal_nan=True, rtol=0, atol=0)
        elif isinstance(w, float) and math.isnan(w):
            assert math.isnan(g)
        else:
            assert type(g) is type(w) and g == w


@pytest.mark.parametrize("seed", range(50))
def test_random_graphs_match_the_interpreter(seed):
    graph = random_graph(seed=seed, num_nodes=25, symbolic=seed % 3 != 0)
    fn = compile_to_python(graph)
    inputs = example_inputs(graph)
    torch.manual_seed(seed)
    want = interpret(graph, *_clone(inputs))
    torch.manual_seed(seed)
    got = fn(*_clone(inputs))
    _assert_same(got, want)
    compile(fn.source, "<check>", "exec")  # the source is kept and is valid Python on its own


def test_torch_level_graph_with_in_place_op_mutating_an_input():
    b = GraphBuilder("torch_mlp")
    x = b.input("x", "f32[8, 16] cpu")
    w = b.input("w", "f32[32, 16] cpu")
    bias = b.input("b", "f32[32] cpu")
    acc = b.input("acc", "f32[8, 16] cpu")
    h = b.op("torch.nn.functional.linear", x, w, bias)
    r = b.op("torch.relu", h)
    first = b.op("torch.Tensor.__getitem__", r, (slice(None), slice(0, 16)))
    mutated = b.op("torch.Tensor.add_", acc, first, alpha=2.0)
    graph = verify(b.build(r, mutated))
    fn = compile_to_python(graph)
    assert "slice(None, None, None), slice(0, 16, None)" in fn.source

    torch.manual_seed(1)
    inputs = [torch.randn(8, 16), torch.randn(32, 16), torch.randn(32), torch.randn(8, 16)]
    ex, ew, eb, eacc = _clone(inputs)
    er = torch.relu(F.linear(ex, ew, eb))
    eacc.add_(er[:, 0:16], alpha=2.0)
    out_r, out_mutated = fn(*inputs)
    torch.testing.assert_close(out_r, er)
    torch.testing.assert_close(inputs[3], eacc)
    assert out_mutated is inputs[3]  # the very input object, mutated in place


def test_list_arguments_and_multi_output_ops():
    b = GraphBuilder("lists")
    x = b.input("x", "f32[6, 10] cpu")
    y = b.input("y", "f32[4, 10] cpu")
    c = b.op("aten.cat.default", [x, y, x])
    values, indices = b.op("aten.max.dim", x, 1, True)
    chunks = b.op("aten.split.Tensor", x, 4, 1)
    single = b.op("torch.split", y, 10, 1, out_type="f32[4, 10] cpu")  # returns a 1-tuple
    graph = verify(b.build(c, values, indices, single, *chunks))
    inputs = [torch.randn(6, 10), torch.randn(4, 10)]
    fn = compile_to_python(graph)
    assert "[v_x, v_y, v_x]" in fn.source
    _assert_same(fn(*inputs), interpret(graph, *inputs))


def test_symbolic_shapes_and_sym_arguments():
    s0 = symbol("s0")
    b = GraphBuilder("dyn")
    x = b.input("x", "f32[s0, 4] cpu")
    n = b.input("n", "sym(s1)")
    v = b.op("aten.view.default", x, [s0 * 2, 2], out_type="f32[2*s0, 2] cpu")
    size = b.op("aten.sym_size.int", v, 0, out_type="sym(2*s0)")
    z = b.op("aten.new_zeros.default", x, [n, s0 + 1], out_type="f32[s1, s0 + 1] cpu")
    half = floordiv(s0, 2) + mod(s0, 2)
    narrow = b.op("aten.slice.Tensor", x, 0, 0, half, out_type="f32[s0 // 2 + s0 % 2, 4] cpu")
    graph = verify(b.build(v, size, z, narrow))
    fn = compile_to_python(graph)
    assert "sym_s0 = v_x.shape[0]" in fn.source and "_evaluate" not in fn.source
    for rows, count in ((3, 2), (5, 7), (8, 1)):
        inputs = [torch.randn(rows, 4), count]
        _assert_same(fn(*inputs), interpret(graph, *inputs))
        assert fn(*inputs)[3].shape[0] == (rows + 1) // 2


def test_symbols_bound_by_strides_and_inconsistent_symbols():
    b = GraphBuilder("strided")
    x = b.input("x", "f32[4, 3]{s0, 1} cpu")
    y = b.op("aten.clone.default", x, out_type="f32[4, 3] cpu")
    base = torch.randn(4, 8)
    (out,) = compile_to_python(verify(b.build(y)))(base[:, :3])
    torch.testing.assert_close(out, base[:, :3])

    b = GraphBuilder("g")
    x, y = b.input("x", "f32[s0] cpu"), b.input("y", "f32[s0] cpu")
    fn = compile_to_python(b.build(b.op("aten.add.Tensor", x, y, out_type="f32[s0] cpu")))
    with pytest.raises(InterpretError, match="symbol s0 is 3 elsewhere but 4 in the shape of input %y"):
        fn(torch.ones(3), torch.ones(4))


def test_special_constants_are_bound():
    b = GraphBuilder("consts")
    x = b.input("x", "f32[3] cpu")
    y = b.op("aten.clamp.default", x, -math.inf, math.inf)
    z = b.op("aten.to.dtype", y, torch.float64, out_type="f64[3] cpu")
    w = b.op("aten.mul.Scalar", z, -0.0)
    graph = verify(b.build(w))
    fn = compile_to_python(graph)
    assert "float64" in fn.source and "neg_inf" in fn.source
    inputs = [torch.tensor([1.0, -2.0, 3.0])]
    _assert_same(fn(*inputs), interpret(graph, *inputs))
    assert math.copysign(1.0, fn(*inputs)[0][0].item()) == -1.0


def test_an_error_names_the_node_and_its_source_line():
    b = GraphBuilder("mlp")
    x = b.input("x", "f32[8, 16] cpu")
    w = b.input("w", "f32[4, 16] cpu")
    h = b.op("aten.relu.default", x)
    t = b.op("aten.t.default", w)
    y = b.op("aten.mm.default", h, t, out_type="f32[8, 4] cpu", source="model.py:21")
    z = b.op("aten.neg.default", y)
    fn = compile_to_python(verify(b.build(z)))
    with pytest.raises(RuntimeError) as info:  # the op's own exception type, as in eager
        fn(torch.randn(8, 16), torch.randn(4, 15))
    notes = "\n".join(getattr(info.value, "__notes__", []))
    assert "while running %mm: f32[8, 4] cpu = aten.mm.default(%relu, %t)" in notes
    assert "(from model.py:21)" in notes
    assert not isinstance(info.value, InterpretError)


def test_wrong_output_count_is_reported():
    b = GraphBuilder("g")
    x = b.input("x", "f32[6] cpu")
    parts = b.op("aten.split.Tensor", x, 2, out_type=["f32[2] cpu", "f32[2] cpu"])  # really 3 chunks
    fn = compile_to_python(b.build(*parts))
    with pytest.raises(InterpretError, match=re.escape("aten.split.Tensor(%x, 2)") + ".*returned 3 values"):
        fn(torch.randn(6))


def test_gradients_flow_as_in_eager():
    b = GraphBuilder("grad")
    x = b.input("x", "f32[5, 4] cpu grad")
    w = b.input("w", "f32[3, 4] cpu grad")
    y = b.op("torch.nn.functional.linear", x, w)
    graph = verify(b.build(b.op("torch.tanh", y)))
    xs = torch.randn(5, 4, requires_grad=True)
    ws = torch.randn(3, 4, requires_grad=True)
    (out,) = compile_to_python(graph)(xs, ws)
    out.sum().backward()
    xe, we = xs.detach().clone().requires_grad_(), ws.detach().clone().requires_grad_()
    torch.tanh(F.linear(xe, we)).sum().backward()
    torch.testing.assert_close(xs.grad, xe.grad)
    torch.testing.assert_close(ws.grad, we.grad)


def test_a_list_returning_aten_op_with_one_output_is_unpacked():
    # aten.unbind of a size-1 dim returns a one-element list; its one output is that element.
    b = GraphBuilder("g")
    x = b.input("x", "f32[1, 4] cpu")
    (row,) = b.op("aten.unbind.int", x, 0, out_type=["f32[4] cpu"])
    graph = b.build(b.op("aten.neg.default", row))
    x_value = torch.randn(1, 4)
    torch.testing.assert_close(compile_to_python(graph)(x_value)[0], -x_value[0])
