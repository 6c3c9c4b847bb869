"""The reference interpreter against eager PyTorch: aten and torch level graphs, several outputs,
list arguments, symbolic shapes, type checks, gradients and error messages."""

import re

import pytest
import torch
import torch.nn.functional as F

from torchsmith.ir import GraphBuilder, InterpretError, interpret, symbol, verify


def aten_mlp(batch="8"):
    b = GraphBuilder("mlp")
    x = b.input("x", f"f32[{batch}, 16] cpu")
    w1 = b.input("w1", "f32[32, 16] cpu grad")
    b1 = b.input("b1", "f32[32] cpu grad")
    w2 = b.input("w2", "f32[4, 32] cpu grad")
    t1 = b.op("aten.t.default", w1)
    h = b.op("aten.addmm.default", b1, x, t1, out_type=f"f32[{batch}, 32] cpu grad")
    a = b.op("aten.gelu.default", h, approximate="tanh", out_type=f"f32[{batch}, 32] cpu grad")
    t2 = b.op("aten.t.default", w2)
    y = b.op("aten.mm.default", a, t2, out_type=f"f32[{batch}, 4] cpu grad", source="model.py:21")
    return verify(b.build(y))


def mlp_params():
    torch.manual_seed(0)
    return [torch.randn(32, 16), torch.randn(32), torch.randn(4, 32)]


def eager_mlp(x, w1, b1, w2):
    return F.gelu(F.linear(x, w1, b1), approximate="tanh") @ w2.t()


def test_aten_mlp_matches_eager():
    x = torch.randn(8, 16)
    params = mlp_params()
    (y,) = interpret(aten_mlp(), x, *params, check_types=True)
    torch.testing.assert_close(y, eager_mlp(x, *params))


def test_torch_level_mlp_with_indexing_and_in_place_add():
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

    torch.manual_seed(1)
    inputs = [torch.randn(8, 16), torch.randn(32, 16), torch.randn(32), torch.randn(8, 16)]
    eager_inputs = [t.clone() for t in inputs]
    ex, ew, eb, eacc = eager_inputs
    er = torch.relu(F.linear(ex, ew, eb))
    eout = eacc.add_(er[:, 0:16], alpha=2.0)

    acc_before = inputs[3].data_ptr()
    out_r, out_mutated = interpret(graph, *inputs, check_types=True)
    torch.testing.assert_close(out_r, er)
    torch.testing.assert_close(inputs[3], eacc)  # the input was mutated in place, as in eager
    assert out_mutated is inputs[3] and inputs[3].data_ptr() == acc_before
    torch.testing.assert_close(out_mutated, eout)


def test_multi_output_ops():
    b = GraphBuilder("multi")
    x = b.input("x", "f32[6, 10] cpu")
    values, indices = b.op("aten.max.dim", x, 1, True)
    chunks = b.op("aten.split.Tensor", x, 4, 1)
    assert len(chunks) == 3
    graph = verify(b.build(values, indices, *chunks))
    x_val = torch.randn(6, 10)
    outputs = interpret(graph, x_val, check_types=True)
    ev, ei = torch.max(x_val, 1, keepdim=True)
    torch.testing.assert_close(outputs[0], ev)
    assert torch.equal(outputs[1], ei)
    for got, want in zip(outputs[2:], torch.split(x_val, 4, 1), strict=True):
        torch.testing.assert_close(got, want)
        assert got.stride() == want.stride()


def test_list_arguments():
    b = GraphBuilder("lists")
    x = b.input("x", "f32[2, 3] cpu")
    y = b.input("y", "f32[4, 3] cpu")
    c = b.op("aten.cat.default", [x, y, x])
    s = b.op("aten.stack.default", [x, x], 1)
    graph = verify(b.build(c, s))
    xv, yv = torch.randn(2, 3), torch.randn(4, 3)
    out_c, out_s = interpret(graph, xv, yv, check_types=True)
    torch.testing.assert_close(out_c, torch.cat([xv, yv, xv]))
    torch.testing.assert_close(out_s, torch.stack([xv, xv], 1))


def test_symbolic_shapes_bound_from_inputs_and_sym_arguments_evaluated():
    s0 = symbol("s0")
    b = GraphBuilder("dyn")
    x = b.input("x", "f32[s0, 4] cpu")
    n = b.input("n", "sym(s1)")
    v = b.op("aten.view.default", x, [s0 * 2, 2], out_type="f32[2*s0, 2] cpu")
    size = b.op("aten.sym_size.int", v, 0, out_type="sym(2*s0)")
    z = b.op("aten.new_zeros.default", x, [n, s0 + 1], out_type="f32[s1, s0 + 1] cpu")
    graph = verify(b.build(v, size, z))
    for rows, count in ((3, 2), (5, 7)):
        xv = torch.randn(rows, 4)
        out_v, out_size, out_z = interpret(graph, xv, count, check_types=True)
        torch.testing.assert_close(out_v, xv.view(rows * 2, 2))
        assert out_size == rows * 2
        assert out_z.shape == (count, rows + 1)


def test_symbols_bound_by_strides():
    b = GraphBuilder("strided")
    x = b.input("x", "f32[4, 3]{s0, 1} cpu")
    y = b.op("aten.clone.default", x, out_type="f32[4, 3] cpu")
    graph = verify(b.build(y))
    base = torch.randn(4, 8)
    (out,) = interpret(graph, base[:, :3], check_types=True)
    torch.testing.assert_close(out, base[:, :3])


def test_inconsistent_symbol_values_are_an_error():
    b = GraphBuilder("g")
    x = b.input("x", "f32[s0] cpu")
    y = b.input("y", "f32[s0] cpu")
    graph = b.build(b.op("aten.add.Tensor", x, y, out_type="f32[s0] cpu"))
    with pytest.raises(InterpretError, match="symbol s0 is 3 elsewhere but 4 in the shape of input %y"):
        interpret(graph, torch.ones(3), torch.ones(4))


def test_check_types_catches_a_wrong_declared_shape():
    b = GraphBuilder("g")
    x = b.input("x", "f32[s0, 4] cpu")
    y = b.op("aten.sum.dim_IntList", x, [1], out_type="f32[s0, 1] cpu", source="layer.py:9")  # keepdim=False
    graph = b.build(y)
    interpret(graph, torch.randn(3, 4))  # without the check, it runs
    with pytest.raises(InterpretError) as info:
        interpret(graph, torch.randn(3, 4), check_types=True)
    message = str(info.value)
    assert "aten.sum.dim_IntList(%x, [1])" in message and "layer.py:9" in message
    assert "expected f32[s0, 1] cpu (shape [3, 1]), got f32[3] cpu" in message


def test_check_types_catches_a_wrong_declared_dtype():
    b = GraphBuilder("g")
    x = b.input("x", "f32[4] cpu")
    y = b.op("aten.argmax.default", x, out_type="f32[] cpu")
    expected = "%argmax: expected f32[] cpu (shape []), got i64[] cpu"
    with pytest.raises(InterpretError, match=re.escape(expected)):
        interpret(b.build(y), torch.randn(4), check_types=True)


def test_check_types_catches_wrong_inputs():
    graph = aten_mlp()
    with pytest.raises(InterpretError, match="input of graph mlp: %x: expected f32"):
        interpret(graph, torch.randn(8, 16, dtype=torch.float64), *mlp_params(), check_types=True)
    with pytest.raises(InterpretError, match="expected a tensor, got int"):
        interpret(graph, 3, *mlp_params(), check_types=True)


def test_errors_name_the_node_and_source_line():
    graph = aten_mlp()
    bad_w2 = torch.randn(4, 31)  # mm fails: 32 columns against 31
    with pytest.raises(InterpretError) as info:
        interpret(graph, torch.randn(8, 16), *mlp_params()[:2], bad_w2)
    message = str(info.value)
    assert "while running %mm: f32[8, 4] cpu grad = aten.mm.default(%gelu, %t_1)" in message
    assert "(from model.py:21)" in message
    assert "RuntimeError" in message
    assert isinstance(info.value.__cause__, RuntimeError)


def test_wrong_input_count():
    with pytest.raises(InterpretError, match="graph mlp takes 4 inputs, got 2"):
        interpret(aten_mlp(), torch.randn(8, 16), torch.randn(32, 16))


def test_wrong_output_count_is_reported():
    b = GraphBuilder("g")
    x = b.input("x", "f32[6] cpu")
    parts = b.op("aten.split.Tensor", x, 2, out_type=["f32[2] cpu", "f32[2] cpu"])  # really 3 chunks
    with pytest.raises(InterpretError, match="it returned 3 values for 2 outputs"):
        interpret(b.build(*parts), torch.randn(6))


def test_gradients_flow_as_in_eager():
    graph = aten_mlp("s0")
    x = torch.randn(5, 16)
    params = [p.requires_grad_() for p in mlp_params()]
    (y,) = interpret(graph, x, *params, check_types=True)
    y.square().sum().backward()
    got = [p.grad.clone() for p in params]

    eager_params = [p.detach().clone().requires_grad_() for p in params]
    eager_mlp(x, *eager_params).square().sum().backward()
    for g, p in zip(got, eager_params, strict=True):
        torch.testing.assert_close(g, p.grad)


def test_scalar_and_sym_inputs():
    b = GraphBuilder("scalars")
    x = b.input("x", "f32[3] cpu")
    f = b.input("f", "float")
    n = b.input("n", "int")
    y = b.op("aten.mul.Tensor", x, f, out_type="f32[3] cpu")
    z = b.op("operator.add", n, 1, out_type="int")
    graph = verify(b.build(y, z))
    xv = torch.randn(3)
    out_y, out_z = interpret(graph, xv, 2.5, 4, check_types=True)
    torch.testing.assert_close(out_y, xv * 2.5)
    assert out_z == 5
    with pytest.raises(InterpretError, match="%f: expected float, got int"):
        interpret(graph, xv, 2, 4, check_types=True)
