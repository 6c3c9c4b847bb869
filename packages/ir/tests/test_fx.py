"""torch.fx interop: our graph -> fx -> our graph is exact, fx graphs from symbolic_trace run like eager."""

import operator

import pytest
import sympy
import torch
import torch.fx
import torch.nn.functional as F

from torchsmith.ir import (
    FxConversionError,
    GraphBuilder,
    floordiv,
    from_fx,
    interpret,
    lifted_attributes,
    mod,
    register_op,
    symbol,
    to_fx,
)
from torchsmith.ir.fx import fx_dim
from torchsmith.ir.random_graph import example_inputs, random_graph
from torchsmith.ir.types import ScalarType, SymIntType, TensorType

s0, s1 = symbol("s0"), symbol("s1")


def assert_same(actual, expected):
    assert len(actual) == len(expected)
    for a, e in zip(actual, expected):
        if isinstance(e, torch.Tensor):
            assert isinstance(a, torch.Tensor) and a.dtype == e.dtype and a.shape == e.shape
            torch.testing.assert_close(a, e, equal_nan=True)
        else:
            assert a == e or (a != a and e != e)


def aten_mlp():
    b = GraphBuilder("mlp")
    x = b.input("x", "f32[s0, 8] cpu")
    w = b.input("w", "f32[16, 8] cpu")
    bias = b.input("max", "f32[16] cpu")  # a builtin's name: fx renames the node, we keep ours
    t = b.op("aten.t.default", w, out_type="f32[8, 16]{1, 8} cpu")
    y = b.op("aten.addmm.default", bias, x, t, out_type="f32[s0, 16] cpu")
    r = b.op("aten.gelu.default", y, approximate="tanh", out_type="f32[s0, 16] cpu")
    v = b.op("aten.view.default", r, [2 * s0, 8], out_type="f32[2*s0, 8] cpu")
    m, i = b.op("aten.max.dim", v, 1, out_type=["f32[2*s0] cpu", "i64[2*s0] cpu"], out_name=["m", "lambda"])
    g = b.build(v, m, i)
    return g.stamped("capture", 0.25)


def test_aten_round_trip_is_exact_and_runs():
    g = aten_mlp()
    gm = to_fx(g)
    assert isinstance(gm, torch.fx.GraphModule)
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    assert [n.target for n in placeholders] == ["x", "w", "max_1"]  # `max` would shadow the builtin
    assert [n.meta["torchsmith_name"] for n in placeholders] == ["x", "w", "max"]
    assert torch.ops.aten.addmm.default in [n.target for n in gm.graph.nodes]
    assert from_fx(gm) == g
    inputs = [torch.randn(3, 8), torch.randn(16, 8), torch.randn(16)]
    assert_same(list(gm(*inputs)), interpret(g, *inputs))
    gm.graph.lint()


def test_multi_output_uses_getitem():
    gm = to_fx(aten_mlp())
    (call,) = [n for n in gm.graph.nodes if n.target is torch.ops.aten.max.dim]
    assert sorted(u.args[1] for u in call.users if u.target is operator.getitem) == [0, 1]
    assert [t for t in call.meta["torchsmith_type"]] == [
        TensorType.make([2 * s0], torch.float32), TensorType.make([2 * s0], torch.int64)
    ]


def test_symbolic_arguments_are_computed_from_inputs_and_fold_back():
    b = GraphBuilder("sym")
    x = b.input("x", "f32[s0, s1] cpu")
    n = b.input("n", "sym(s1)")
    y = b.op("aten.view.default", x, [sympy.Max(s0, 2) * 0 + s0 * s1], out_type="f32[s0*s1] cpu")
    start, stop = floordiv(s0, 2), s0 * s1 - mod(s1, 3)
    z = b.op("aten.slice.Tensor", y, 0, start, stop, out_type="f32[s0*s1 - s0 // 2 - s1 % 3] cpu")
    w = b.op("aten.new_zeros.default", z, [n, s1 + 1], out_type="f32[s1, s1 + 1] cpu")
    u = b.op("aten.new_ones.default", z, [sympy.Max(s0, s1)], out_type="f32[max(s0, s1)] cpu")
    g = b.build(z, w, u)
    gm = to_fx(g)
    targets = [n.target for n in gm.graph.nodes]
    assert torch.ops.aten.sym_size.int in targets and operator.floordiv in targets and operator.mod in targets
    assert from_fx(gm) == g
    inputs = [torch.randn(5, 4), 4]
    assert_same(list(gm(*inputs)), interpret(g, *inputs))


def test_torch_level_round_trip_with_methods_functions_operators():
    b = GraphBuilder("torchy")
    x = b.input("x", "f32[4, 6] cpu")
    k = b.input("k", "sym(4)")
    c = b.input("lambda", "float")
    a, d = b.op("torch.split", x, 3, dim=1, out_type=["f32[4, 3]{6, 1} cpu", "f32[4, 3]{6, 1} cpu"])
    s = b.op("operator.add", a, d, out_type="f32[4, 3] cpu")
    m = b.op("torch.Tensor.mul", s, c, out_type="f32[4, 3] cpu")
    t = b.op("torch.nn.functional.gelu", m, approximate="tanh", out_type="f32[4, 3] cpu")
    h = b.op("torch.Tensor.__getitem__", t, (slice(None, 2), Ellipsis), out_type="f32[2, 3]{3, 1} cpu")
    q = b.op("torch.cat", [h, h], dim=0, out_type="f32[4, 3] cpu")
    r = b.op("torch.Tensor.to", q, torch.float64, out_type="f64[4, 3] cpu")
    n = b.op("torch.Tensor.size", x, 0, out_type="sym(4)")
    p = b.op("operator.mul", n, k, out_type="sym(16)")
    g = b.build(r, p)
    gm = to_fx(g)
    assert "call_method" in {n.op for n in gm.graph.nodes}
    assert from_fx(gm) == g
    inputs = [torch.randn(4, 6), 4, 1.5]
    assert_same(list(gm(*inputs)), interpret(g, *inputs))


@pytest.mark.parametrize("seed", range(12))
def test_random_graph_round_trip(seed):
    g = random_graph(seed, 40, symbolic=seed % 2 == 0)
    gm = to_fx(g)
    assert from_fx(gm) == g
    inputs = example_inputs(g)
    assert_same(list(gm(*inputs)), interpret(g, *inputs))


@pytest.mark.parametrize("seed", range(6))
def test_random_graph_without_our_metadata_converts_from_example_inputs(seed):
    g = random_graph(seed, 40, symbolic=seed % 2 == 0)
    gm = to_fx(g)
    for fx_node in gm.graph.nodes:  # now it looks like any fx graph
        for key in [k for k in fx_node.meta if k.startswith("torchsmith") or k == "tensor_meta"]:
            del fx_node.meta[key]
    inputs = example_inputs(g)
    converted = from_fx(gm, example_inputs=inputs)
    assert_same(interpret(converted, *inputs, check_types=True), list(gm(*inputs)))


def traced_function(x, y):
    n = x.shape[0]
    a, b = torch.split(x, 2, dim=1)
    z = F.gelu(a + b * 2, approximate="tanh") - y.sum(dim=-1, keepdim=True)
    z = z.view(n, -1)[:, 1:]
    z = torch.cat([z, torch.relu(z)], dim=1).to(torch.float64)
    return z, (x.size(1) * 2, torch.max(z, dim=1))


def test_symbolic_trace_function_runs_like_eager():
    gm = torch.fx.symbolic_trace(traced_function)
    x, y = torch.randn(3, 4), torch.randn(3, 5)
    g = from_fx(gm, example_inputs=(x, y))
    z, (n, (values, indices)) = traced_function(x, y)
    assert_same(interpret(g, x, y, check_types=True), [z, n, values, indices])
    assert g.name == "traced_function"
    assert g.outputs[1].type == SymIntType(8)
    assert [v.name for v in g.inputs] == ["x", "y"]


class MLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.l1 = torch.nn.Linear(4, 8)
        self.l2 = torch.nn.Linear(8, 2)
        self.register_buffer("scale", torch.tensor(2.0))

    def forward(self, x):
        return self.l2(torch.relu(self.l1(x))) * self.scale


class InliningTracer(torch.fx.Tracer):
    def is_leaf_module(self, module, qualified_name):
        return False


def test_module_with_lifted_parameters_runs_like_eager():
    torch.manual_seed(0)
    model = MLP()
    gm = torch.fx.GraphModule(model, InliningTracer().trace(model))
    x = torch.randn(3, 4)
    g = from_fx(gm, (x,), lift_attributes=True)
    attributes = lifted_attributes(gm)
    assert [name for name, _ in attributes] == ["l1.weight", "l1.bias", "l2.weight", "l2.bias", "scale"]
    assert [v.name for v in g.inputs] == ["x", "l1_weight", "l1_bias", "l2_weight", "l2_bias", "scale"]
    assert g.inputs[1].type.requires_grad
    (out,) = interpret(g, x, *[t for _, t in attributes])
    torch.testing.assert_close(out, model(x))
    assert "torch.nn.functional.linear" in g.ops()


def test_types_from_shape_prop_metadata_and_inference():
    gm = torch.fx.symbolic_trace(lambda x: torch.relu(x) + 1)
    from torch.fx.passes.shape_prop import ShapeProp

    ShapeProp(gm).propagate(torch.randn(2, 3, dtype=torch.float64))
    g = from_fx(gm)
    assert g.inputs[0].type == TensorType.make([2, 3], torch.float64)
    x = torch.randn(2, 3, dtype=torch.float64)
    assert_same(interpret(g, x, check_types=True), [torch.relu(x) + 1])


def test_types_from_meta_val():
    gm = torch.fx.symbolic_trace(lambda x, k: x.sum(dim=0) * k)
    meta = torch.device("meta")
    vals = iter([torch.empty(5, 2, device=meta), 3.0] + [torch.empty(2, device=meta)] * 2)
    for fx_node in gm.graph.nodes:
        if fx_node.op != "output":
            fx_node.meta["val"] = next(vals)
    g = from_fx(gm)
    assert g.inputs[0].type == TensorType.make([5, 2], torch.float32, device="meta")
    assert g.inputs[1].type == ScalarType("float")


def test_torch_symint_metadata_becomes_symbolic_dims():
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    shape_env = ShapeEnv()
    s = shape_env.create_symintnode(sympy.Symbol("s0", integer=True, positive=True), hint=4)
    assert fx_dim(s) == s0
    assert fx_dim(s * 2 + 1) == 2 * s0 + 1
    assert fx_dim(s // 2) == floordiv(s0, 2)
    assert fx_dim(s % 3) == mod(s0, 3)
    assert fx_dim(torch.sym_max(s, 3)) == sympy.Max(s0, 3)


def test_registered_op_round_trip():
    def scale(x, factor):
        return x * factor

    register_op("testfx.scale", scale, replace=True)
    b = GraphBuilder("custom")
    x = b.input("x", "f32[3] cpu")
    g = b.build(b.op("testfx.scale", x, 2.0, out_type="f32[3] cpu"))
    gm = to_fx(g)
    assert from_fx(gm) == g
    for fx_node in gm.graph.nodes:
        fx_node.meta.pop("torchsmith_op", None)
    assert from_fx(gm).ops() == ["testfx.scale"]


def test_flat_outputs_only_dicts_refused():
    gm = torch.fx.symbolic_trace(lambda x: {"y": x + 1})
    with pytest.raises(FxConversionError, match="dict"):
        from_fx(gm, (torch.randn(2),))


def test_call_module_is_refused_with_advice():
    gm = torch.fx.symbolic_trace(MLP())
    with pytest.raises(FxConversionError, match="calls submodule 'l1' .Linear.*is_leaf_module"):
        from_fx(gm, (torch.randn(3, 4),))


def test_get_attr_without_lifting_is_refused():
    model = MLP()
    gm = torch.fx.GraphModule(model, InliningTracer().trace(model))
    with pytest.raises(FxConversionError, match="attribute 'l1.weight'; pass lift_attributes=True"):
        from_fx(gm, (torch.randn(3, 4),))


def test_untyped_graph_needs_example_inputs():
    gm = torch.fx.symbolic_trace(lambda x: x + 1)
    with pytest.raises(FxConversionError, match="has no type: pass example_inputs="):
        from_fx(gm)


def test_unknown_callable_is_refused():
    def helper(x):
        return x + 1

    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    graph.output(graph.call_function(helper, (x,)))
    gm = torch.fx.GraphModule(torch.nn.Module(), graph)
    with pytest.raises(FxConversionError, match="has no torchsmith op; register it"):
        from_fx(gm, (torch.randn(2),))


def test_symbol_without_source_is_refused():
    b = GraphBuilder("nosource")
    x = b.input("x", "f32[4] cpu")
    g = b.build(b.op("aten.new_zeros.default", x, [s1], out_type="f32[s1] cpu"))
    with pytest.raises(FxConversionError, match="symbol s1 is not a size, stride or value of any graph"):
        to_fx(g)


def test_example_input_failure_names_the_node():
    gm = torch.fx.symbolic_trace(lambda x: x.view(7))
    with pytest.raises(FxConversionError, match="running fx node .*view"):
        from_fx(gm, (torch.randn(2, 3),))


def test_names_that_would_shadow_globals_of_the_fx_code():
    b = GraphBuilder("shadow")
    names = ["torch", "inf", "getattr", "self", "lambda"]
    values = [b.input(name, "f32[3] cpu") for name in names]
    total = values[0]
    for value in values[1:]:
        total = b.op("aten.add.Tensor", total, value, out_type="f32[3] cpu", out_name=f"{value.name}_sum")
    scaled = b.op("aten.mul.Scalar", total, float("inf"), out_type="f32[3] cpu", out_name="device")
    g = b.build(b.op("aten._to_copy.default", scaled, device=torch.device("cpu"), out_type="f32[3] cpu"))
    gm = to_fx(g)
    assert from_fx(gm) == g
    inputs = [torch.randn(3) for _ in names]
    assert_same(list(gm(*inputs)), interpret(g, *inputs))


def test_an_fx_rewrite_shows_up_in_our_graph():
    # An fx pass edits the module (here: relu -> sigmoid); from_fx must follow the new target,
    # not the op name that to_fx left in node.meta.
    b = GraphBuilder("rewrite")
    x = b.input("x", "f32[s0, 3] cpu")
    y = b.op("aten.relu.default", x, out_type="f32[s0, 3] cpu")
    chunks = b.op("aten.split.Tensor", y, 3, 0, out_type=["f32[s0, 3] cpu"])  # one chunk, still a list
    g = b.build(*chunks)
    gm = to_fx(g)
    for fx_node in gm.graph.nodes:
        if fx_node.target is torch.ops.aten.relu.default:
            fx_node.target = torch.ops.aten.sigmoid.default
    gm.recompile()
    rewritten = from_fx(gm)
    assert rewritten.ops() == ["aten.sigmoid.default", "aten.split.Tensor"]
    x_value = torch.randn(2, 3)
    assert_same(interpret(rewritten, x_value), [torch.sigmoid(x_value)])
    assert_same(list(gm(x_value)), [torch.sigmoid(x_value)])
