"""The verifier: a good graph passes, and each kind of broken graph fails with a message that names
the node (in its text form), its source line and what was expected."""

import pytest
import torch

from torchsmith.ir import (
    ArgList,
    GraphBuilder,
    Node,
    OpSchema,
    Slice,
    SymIntType,
    TensorType,
    Value,
    VerifyError,
    interpret,
    parse_type,
    register_op,
    symbol,
    verify,
)
from torchsmith.ir.registry import ArgSpec
from torchsmith.ir.text import format_node
from torchsmith.ir.verifier import maybe_verify, verify_enabled


def mlp_graph(source="model.py:12"):
    b = GraphBuilder("mlp")
    x = b.input("x", "f32[s0, 16] cpu")
    w = b.input("w", "f32[32, 16] cpu")
    bias = b.input("b", "f32[32] cpu")
    t = b.op("aten.t.default", w)
    y = b.op("aten.addmm.default", bias, x, t, out_type="f32[s0, 32] cpu", source=source)
    z = b.op("aten.relu.default", y, out_type="f32[s0, 32] cpu")
    return b.build(z)


def errors_of(graph) -> str:
    with pytest.raises(VerifyError) as info:
        verify(graph)
    return str(info.value)


def node_text(node: Node) -> str:
    return format_node(node.replace(source=None))


def with_node(graph, index: int, node: Node):
    nodes = list(graph.nodes)
    nodes[index] = node
    return graph.replace(nodes=tuple(nodes))


# -- good graphs ----------------------------------------------------------------------------


def test_good_graph_passes_and_is_returned():
    graph = mlp_graph()
    assert verify(graph) is graph


def test_empty_graph_passes():
    assert verify(GraphBuilder("empty").build()).nodes == ()


def _aten_samples(b: GraphBuilder):
    x = b.input("x", "f32[8, 16] cpu grad")
    w = b.input("w", "f32[32, 16] cpu")
    bias = b.input("b", "f32[32] cpu")
    idx = b.input("i", "i64[4] cpu")
    n = b.input("n", "int")
    f = b.input("f", "float")
    mask = b.op("aten.gt.Scalar", x, 0)
    return [
        ("aten.addmm.default", (bias, x, b.op("aten.t.default", w)), {}),
        ("aten.add.Tensor", (x, 1), {}),
        ("aten.add.Tensor", (x, x), {"alpha": 2}),
        ("aten.mul.Tensor", (x, f), {"out_type": "f32[8, 16] cpu grad"}),
        ("aten.sub.Tensor", (x, n), {"out_type": "f32[8, 16] cpu grad"}),
        ("aten.sum.dim_IntList", (x, [1]), {"keepdim": True}),
        ("aten.sum.dim_IntList", (x, 1), {}),
        ("aten.sum.default", (x,), {"dtype": torch.float64}),
        ("aten.max.dim", (x, 1), {}),
        ("aten.split.Tensor", (x, 4, 1), {}),
        ("aten.cat.default", ([x, x],), {"dim": 0}),
        ("aten.view.default", (x, [4, 32]), {}),
        ("aten.expand.default", (bias, [8, 32]), {}),
        ("aten.index.Tensor", (x, [None, idx]), {}),
        ("aten.gelu.default", (x,), {"approximate": "tanh"}),
        ("aten.where.self", (mask, x, b.op("aten.scalar_tensor.default", 0.0)), {}),
        ("aten.full.default", ([2, 3], 1.0), {"dtype": torch.float32, "device": torch.device("cpu")}),
        ("aten.zeros.default", ([2, 3],), dict(dtype=torch.float64, layout=torch.strided, pin_memory=False)),
        ("aten.slice.Tensor", (x, 1, 0, 8, 2), {}),
        ("aten.select.int", (x, 0, n), {"out_type": "f32[16] cpu grad"}),
        ("aten.clone.default", (x,), {"memory_format": torch.contiguous_format}),
        ("aten._to_copy.default", (x,), {"dtype": torch.float16}),
        ("aten.native_layer_norm.default", (x, [16], None, None, 1e-5), {}),
        ("aten.var_mean.correction", (x, [1]), {"correction": 1, "keepdim": True}),
        ("aten.sym_size.int", (x, 0), {}),
        ("aten.add_.Tensor", (b.op("aten.clone.default", x), 1.0), {}),
        ("aten.topk.default", (x, 3), {}),
        ("aten.embedding.default", (w, idx), {}),
        ("aten.unbind.int", (x,), {}),
        ("aten.masked_fill.Scalar", (x, mask, 0.0), {}),
        ("aten._softmax.default", (x, 1, False), {}),
        ("torch.nn.functional.gelu", (x,), {"approximate": "tanh"}),
        ("torch.Tensor.__getitem__", (x, (slice(None), slice(0, 4))), {}),
    ]


def test_builder_graphs_of_real_aten_ops_pass_and_run():
    b = GraphBuilder("samples")
    outputs = []
    for op, args, kwargs in _aten_samples(b):
        result = b.op(op, *args, **kwargs)
        outputs.extend(result if isinstance(result, tuple) else [result])
    graph = verify(b.build(*outputs))
    inputs = (torch.randn(8, 16), torch.randn(32, 16), torch.randn(32), torch.tensor([0, 3, 1, 2]), 3, 1.5)
    assert len(interpret(graph, *inputs, check_types=True)) == len(outputs)


def test_symbols_derived_from_bound_symbols_pass():
    b = GraphBuilder("derived")
    x = b.input("x", "f32[s0, 4] cpu")
    y = b.op("aten.view.default", x, [symbol("s0") * 2, 2], out_type="f32[2*s0, 2] cpu")
    z = b.op("aten.cat.default", [y, y], out_type="f32[4*s0, 2] cpu")
    verify(b.build(z))


def test_symbols_bound_by_strides_and_sym_inputs_pass():
    b = GraphBuilder("bound")
    x = b.input("x", "f32[4, 4]{s1, 1} cpu")
    n = b.input("n", "sym(s2)")
    y = b.op("aten.view.default", x, [n, -1], out_type="f32[s2, 16 // s2] cpu")
    verify(b.build(y))


# -- SSA and order ----------------------------------------------------------------------------


def test_value_defined_twice_is_an_error():
    graph = mlp_graph()
    relu = graph.nodes[2]
    clash = relu.replace(outputs=(Value("t", relu.outputs[0].type),))
    message = errors_of(with_node(graph, 2, clash).replace(outputs=(clash.outputs[0],)))
    assert "%t is already defined by node 0" in message
    assert node_text(clash) in message


def test_node_output_named_like_an_input_is_an_error():
    graph = mlp_graph()
    t = graph.nodes[0]
    clash = t.replace(outputs=(Value("x", t.outputs[0].type),))
    message = errors_of(with_node(graph, 0, clash))
    assert "%x is already defined by graph input %x" in message


def test_use_before_definition_names_the_node_and_source():
    graph = mlp_graph(source="model.py:12")
    swapped = graph.replace(nodes=(graph.nodes[1], graph.nodes[0], graph.nodes[2]))
    message = errors_of(swapped)
    assert node_text(graph.nodes[1]) in message
    assert "at model.py:12" in message
    assert "uses %t before it is defined" in message and "topological order" in message


def test_undefined_value_in_kwargs_nested_lists_and_slices():
    b = GraphBuilder("g")
    x = b.input("x", "f32[4, 4] cpu")
    ghost = Value("ghost", parse_type("f32[4, 4] cpu"))
    n_ghost = Value("n_ghost", SymIntType(2))
    nodes = [
        Node("aten.cat.default", (ArgList([x, ghost]),), (), (Value("cat", parse_type("f32[8, 4] cpu")),)),
        Node("aten.add.Tensor", (x, x), (("alpha", n_ghost),), (Value("add", parse_type("f32[4, 4] cpu")),)),
        Node("torch.Tensor.__getitem__", (x, (Slice(None, n_ghost, None),)), (),
             (Value("item", parse_type("f32[2, 4] cpu")),)),
    ]
    graph = b.build().replace(nodes=tuple(nodes), outputs=(nodes[0].outputs[0],))
    message = errors_of(graph)
    assert "3 problems" in message
    assert "uses %ghost before it is defined: no graph input or earlier node defines it" in message
    assert message.count("uses %n_ghost before it is defined") == 2
    for node in nodes:
        assert node_text(node) in message


def test_undefined_graph_output():
    graph = mlp_graph()
    message = errors_of(graph.replace(outputs=(Value("nowhere", parse_type("f32[2] cpu")),)))
    assert "graph output 0: uses %nowhere before it is defined" in message


# -- types and symbols ----------------------------------------------------------------------------


def test_type_at_use_must_match_the_definition():
    graph = mlp_graph()
    relu = graph.nodes[2]
    wrong_use = Value("addmm", parse_type("f32[s0, 33] cpu"))
    bad = relu.replace(args=(wrong_use,))
    message = errors_of(with_node(graph, 2, bad))
    assert node_text(bad) in message
    assert "uses %addmm with type f32[s0, 33] cpu, but it was defined with type f32[s0, 32] cpu" in message


def test_unbound_symbol_in_an_output_type():
    graph = mlp_graph()
    relu = graph.nodes[2]
    bad = relu.replace(outputs=(Value("relu", parse_type("f32[s7, 32] cpu")),))
    message = errors_of(with_node(graph, 2, bad).replace(outputs=bad.outputs))
    assert node_text(bad) in message
    assert "uses unbound symbol s7" in message and "bound: s0" in message


def test_unbound_symbol_in_a_sym_argument():
    b = GraphBuilder("g")
    x = b.input("x", "f32[s0, 4] cpu")
    y = b.op("aten.view.default", x, [symbol("s0") * symbol("s9")], out_type="f32[4*s0] cpu", source="m.py:3")
    message = errors_of(b.build(y))
    assert "an argument sym(s0*s9) uses unbound symbol s9" in message
    assert "at m.py:3" in message


def test_symbol_appearing_only_inside_an_expression_is_not_bound():
    b = GraphBuilder("g")
    x = b.input("x", "f32[2*s0] cpu")
    message = errors_of(b.build(x))
    assert "graph input %x" in message and "unbound symbol s0" in message


# -- ops and schemas ----------------------------------------------------------------------------


def test_unknown_op():
    graph = mlp_graph()
    bad = graph.nodes[2].replace(op="aten.not_an_op.default")
    message = errors_of(with_node(graph, 2, bad))
    assert node_text(bad) in message and "torch.ops.aten has no not_an_op.default" in message
    bad = graph.nodes[2].replace(op="nodialect.relu")
    assert "must be registered" in errors_of(with_node(graph, 2, bad))


def test_too_many_positional_arguments():
    graph = mlp_graph()
    relu = graph.nodes[2]
    bad = relu.replace(args=relu.args + (1,))
    message = errors_of(with_node(graph, 2, bad))
    assert node_text(bad) in message
    assert "takes at most 1 positional argument, got 2; expected aten.relu.default(self: tensor)" in message


def test_missing_required_argument():
    graph = mlp_graph()
    addmm = graph.nodes[1]
    bad = addmm.replace(args=addmm.args[:2])
    message = errors_of(with_node(graph, 1, bad))
    assert node_text(bad) in message and "at model.py:12" in message
    assert "missing required argument 'mat2'" in message


def test_unknown_keyword_argument():
    graph = mlp_graph()
    bad = graph.nodes[2].replace(kwargs=(("inplace", True),))
    message = errors_of(with_node(graph, 2, bad))
    assert node_text(bad) in message and "unknown keyword argument 'inplace'" in message


def test_argument_given_twice():
    graph = mlp_graph()
    relu = graph.nodes[2]
    bad = relu.replace(kwargs=(("self", relu.args[0]),))
    assert "argument 'self' is given both by position and by keyword" in errors_of(with_node(graph, 2, bad))


def test_wrong_argument_kind():
    graph = mlp_graph()
    addmm = graph.nodes[1]
    bad = addmm.replace(kwargs=(("beta", "two"),))
    message = errors_of(with_node(graph, 1, bad))
    assert node_text(bad) in message
    assert "argument 'beta' is \"two\", but the schema expects scalar" in message


def test_number_for_a_tensor_only_where_eager_accepts_it():
    b = GraphBuilder("g")
    x = b.input("x", "f32[4] cpu")
    c = b.op("aten.gt.Scalar", x, 0)
    b.op("aten.add.Tensor", x, 1)  # torch.ops.aten wraps the number
    w = b.op("aten.where.self", c, x, 0.0, out_type="f32[4] cpu")  # eager refuses it
    message = errors_of(b.build(w))
    assert "1 problem" in message
    assert "argument 'other' is 0.0, but the schema expects tensor" in message


def test_tensor_given_for_an_int_list():
    b = GraphBuilder("g")
    x = b.input("x", "f32[4] cpu")
    y = b.op("aten.view.default", x, x, out_type="f32[4] cpu")
    assert "argument 'size' is %x: f32[4] cpu, but the schema expects ints" in errors_of(b.build(y))


def test_wrong_number_of_outputs():
    graph = mlp_graph()
    relu = graph.nodes[2]
    bad = relu.replace(outputs=relu.outputs + (Value("extra", relu.outputs[0].type),))
    message = errors_of(with_node(graph, 2, bad))
    assert node_text(bad) in message and "has 2 outputs, but aten.relu.default returns 1" in message


def test_arguments_that_are_not_ir_arguments():
    graph = mlp_graph()
    relu = graph.nodes[2]
    bad = relu.replace(args=(relu.args[0], torch.ones(2)))
    message = errors_of(with_node(graph, 2, bad))
    assert "holds Tensor" in message and "not an IR argument" in message


def test_torch_level_ops_accept_any_arguments():
    b = GraphBuilder("g")
    x = b.input("x", "f32[4] cpu")
    y = b.op("torch.nn.functional.gelu", x, approximate="tanh")
    z = b.op("torch.Tensor.add_", y, 1.0, alpha=2)
    verify(b.build(z))


# -- registered ops with schemas and infer rules -------------------------------------------------


def _double_infer(args, kwargs):
    t = args[0].type
    return t.replace(shape=(t.shape[0] * 2,) + t.shape[1:])


register_op(
    "verifytest.double",
    lambda x, *, twice=True: torch.cat([x, x]),
    schema=OpSchema((ArgSpec("x", "tensor"), ArgSpec("twice", "bool", kwarg_only=True, has_default=True)),
                    num_outputs=1),
    infer=_double_infer,
    replace=True,
)
register_op(
    "verifytest.broken_rule",
    lambda x: x,
    infer=lambda args, kwargs: args[5],
    replace=True,
)


def test_registered_op_with_right_types_passes():
    b = GraphBuilder("g")
    x = b.input("x", "f32[s0, 3] cpu")
    y = b.op("verifytest.double", x, twice=True)
    graph = verify(b.build(y))
    assert str(graph.outputs[0].type) == "f32[2*s0, 3] cpu"


def test_declared_output_type_must_match_the_infer_rule():
    b = GraphBuilder("g")
    x = b.input("x", "f32[s0, 3] cpu")
    y = b.op("verifytest.double", x, out_type="f32[s0, 3] cpu", source="layer.py:7")
    graph = b.build(y)
    message = errors_of(graph)
    assert node_text(graph.nodes[0]) in message and "at layer.py:7" in message
    expected = "declared output types (f32[s0, 3] cpu) differ from what verifytest.double's infer rule"
    assert f"{expected} computes (f32[2*s0, 3] cpu)" in message


def test_registered_schema_kwarg_only_parameter_given_by_position():
    b = GraphBuilder("g")
    x = b.input("x", "f32[2] cpu")
    y = b.op("verifytest.double", x, True, out_type="f32[4] cpu")
    assert "takes at most 1 positional argument, got 2" in errors_of(b.build(y))


register_op(
    "verifytest.every_other_row",
    lambda x: x[::2].unsqueeze(1),
    infer=lambda args, kwargs: TensorType.make((2, 1, 3), args[0].type.dtype, strides=(6, 3, 1)),
    replace=True,
)


@pytest.mark.parametrize("strides", ["{1, 4}", "{3, 1}"])
def test_a_dense_declared_layout_is_the_layout_a_fresh_result_is_made_in(strides):
    b = GraphBuilder("g")
    x = b.input("x", "f32[2, 3] cpu")
    verify(b.build(b.op("verifytest.double", x, out_type=f"f32[4, 3]{strides} cpu")))


def test_strides_of_size_one_dims_are_not_compared():
    b = GraphBuilder("g")
    x = b.input("x", "f32[4, 3] cpu")
    verify(b.build(b.op("verifytest.every_other_row", x, out_type="f32[2, 1, 3]{6, 99, 1} cpu")))


def test_a_view_layout_that_is_not_the_rules_is_refused():
    b = GraphBuilder("g")
    x = b.input("x", "f32[4, 3] cpu")
    y = b.op("verifytest.every_other_row", x, out_type="f32[2, 1, 3]{12, 3, 1} cpu")
    assert "differ from what verifytest.every_other_row's infer rule computes" in errors_of(b.build(y))


def test_failing_infer_rule_is_reported():
    b = GraphBuilder("g")
    x = b.input("x", "f32[2] cpu")
    y = b.op("verifytest.broken_rule", x, out_type="f32[2] cpu")
    assert "the infer rule of verifytest.broken_rule failed: IndexError" in errors_of(b.build(y))


# -- reporting and switches ----------------------------------------------------------------------


def test_all_problems_are_collected_in_graph_order():
    graph = mlp_graph()
    relu = graph.nodes[2]
    bad_relu = relu.replace(op="aten.nope.default")
    bad_t = graph.nodes[0].replace(args=(Value("w", parse_type("f32[1] cpu")),))
    broken = graph.replace(nodes=(bad_t, graph.nodes[1], bad_relu))
    with pytest.raises(VerifyError) as info:
        verify(broken)
    assert len(info.value.problems) == 2
    assert info.value.problems[0].startswith("node 0") and info.value.problems[1].startswith("node 2")


def test_maybe_verify_follows_the_environment(monkeypatch):
    graph = mlp_graph()
    broken = graph.replace(nodes=graph.nodes[1:])
    monkeypatch.delenv("TORCHSMITH_VERIFY", raising=False)
    assert not verify_enabled()
    assert maybe_verify(broken) is broken
    monkeypatch.setenv("TORCHSMITH_VERIFY", "1")
    assert verify_enabled()
    assert maybe_verify(graph) is graph
    with pytest.raises(VerifyError):
        maybe_verify(broken)
    monkeypatch.setenv("TORCHSMITH_VERIFY", "0")
    assert maybe_verify(broken) is broken


def test_values_must_carry_ir_types():
    graph = mlp_graph()
    relu = graph.nodes[2]
    bad = relu.replace(outputs=(Value("relu", "f32[s0, 32] cpu"),))  # text, not a parsed type
    message = errors_of(with_node(graph, 2, bad))
    assert "aten.relu.default(%addmm)" in message
    assert "%relu has type 'f32[s0, 32] cpu'; expected a TensorType, SymIntType or ScalarType" in message
