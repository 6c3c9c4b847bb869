"""GraphBuilder: value naming, several outputs, output types from meta tensors or infer rules,
requires_grad, and the errors it raises for graphs that would not be valid."""

import pytest
import torch

from torchsmith.ir import (
    ArgList,
    GraphBuilder,
    GraphBuildError,
    Node,
    OpSchema,
    Slice,
    SymIntType,
    TensorType,
    Value,
    parse_type,
    register_op,
    verify,
)
from torchsmith.ir.builder import name_hint
from torchsmith.ir.registry import ArgSpec


@pytest.mark.parametrize(
    "op, hint",
    [
        ("aten.addmm.default", "addmm"),
        ("aten.add_.Tensor", "add"),
        ("torch.nn.functional.linear", "linear"),
        ("torch.Tensor.__getitem__", "getitem"),
        ("operator.add", "add"),
        ("prims.convert_element_type", "convert_element_type"),
        ("torch.Tensor.__", "v"),
    ],
)
def test_name_hints(op, hint):
    assert name_hint(op) == hint


def test_names_are_fresh_and_readable():
    b = GraphBuilder("g")
    x = b.input("x", "f32[4] cpu")
    a1 = b.op("aten.relu.default", x)
    a2 = b.op("aten.relu.default", a1)
    a3 = b.op("aten.relu.default", a2, out_name="act")
    a4 = b.op("aten.relu.default", a3)
    assert [v.name for v in (a1, a2, a3, a4)] == ["relu", "relu_1", "act", "relu_2"]
    graph = b.build(a4)
    assert [n.outputs[0].name for n in graph.nodes] == ["relu", "relu_1", "act", "relu_2"]
    assert graph.outputs == (a4,)


def test_a_fresh_name_skips_names_taken_explicitly():
    b = GraphBuilder("g")
    x = b.input("relu", "f32[4] cpu")
    y = b.op("aten.relu.default", x, out_name="relu_1")
    z = b.op("aten.relu.default", y)
    assert z.name == "relu_2"


def test_several_outputs():
    b = GraphBuilder("g")
    x = b.input("x", "f32[4, 6] cpu")
    values, indices = b.op("aten.max.dim", x, 1)
    assert values.type == parse_type("f32[4] cpu") and indices.type == parse_type("i64[4] cpu")
    chunks = b.op("aten.split.Tensor", x, 2, 1)
    assert len(chunks) == 3 and all(c.type == parse_type("f32[4, 2]{6, 1} cpu") for c in chunks)
    one = b.op("aten.split.Tensor", x, 6, 1)
    assert isinstance(one, tuple) and len(one) == 1  # a list-returning op stays a tuple
    pair = b.op("aten.max.dim", x, 0, out_type=["f32[6] cpu", "i64[6] cpu"], out_name=["m", "i"])
    assert [v.name for v in pair] == ["m", "i"]
    graph = verify(b.build(values, *chunks, pair[1]))
    assert len(graph.nodes[0].outputs) == 2 and len(graph.nodes[1].outputs) == 3


def test_meta_inference_gives_shapes_dtypes_strides_and_device():
    b = GraphBuilder("g")
    w = b.input("w", "f32[256, 64] cuda:0")  # no GPU needed: types come from meta tensors
    t = b.op("aten.t.default", w)
    assert t.type == parse_type("f32[64, 256]{1, 64} cuda:0")
    h = b.op("aten._to_copy.default", t, dtype=torch.float16)
    assert h.type.dtype == torch.float16 and h.type.device == "cuda:0"
    s = b.op("aten.sum.dim_IntList", w, [1], True)
    assert s.type == parse_type("f32[256, 1] cuda:0")
    size = b.op("aten.sym_size.int", w, 0)
    assert size.type == SymIntType(256)
    full = b.op("aten.full.default", [2, 3], 1.0, device=torch.device("cpu"))
    assert full.type == parse_type("f32[2, 3] cpu")


def test_torch_level_ops_infer_by_meta():
    b = GraphBuilder("g")
    x = b.input("x", "f32[8, 16] cpu")
    w = b.input("w", "f32[32, 16] cpu")
    y = b.op("torch.nn.functional.linear", x, w)
    r = b.op("torch.relu", y)
    item = b.op("torch.Tensor.__getitem__", r, (slice(None), 0))
    added = b.op("torch.Tensor.add_", r, 1.0)
    assert y.type == r.type == added.type == parse_type("f32[8, 32] cpu")
    assert item.type == parse_type("f32[8]{32} cpu")


def test_symbolic_inputs_need_an_out_type_or_an_infer_rule():
    b = GraphBuilder("g")
    x = b.input("x", "f32[s0, 4] cpu")
    with pytest.raises(GraphBuildError, match="relu.default: cannot infer output types from symbolic input"):
        b.op("aten.relu.default", x)
    y = b.op("aten.relu.default", x, out_type="f32[s0, 4] cpu")
    assert y.type.shape[0].name == "s0"


def _twice_infer(args, kwargs):
    t = args[0].type
    return t.replace(shape=(t.shape[0] * 2,) + t.shape[1:])


register_op(
    "buildertest.twice",
    lambda x: torch.cat([x, x]),
    schema=OpSchema((ArgSpec("x", "tensor"),), num_outputs=1),
    infer=_twice_infer,
    replace=True,
)


def test_infer_rules_work_symbolically():
    b = GraphBuilder("g")
    x = b.input("x", "f32[s0, 3] cpu")
    y = b.op("buildertest.twice", x)
    assert str(y.type) == "f32[2*s0, 3] cpu"
    assert y.name == "twice"


def test_requires_grad_propagates_to_floating_outputs():
    b = GraphBuilder("g")
    x = b.input("x", "f32[4, 6] cpu grad")
    c = b.input("c", "f32[4, 6] cpu")
    assert b.op("aten.mul.Tensor", x, c).type.requires_grad
    assert not b.op("aten.mul.Tensor", c, c).type.requires_grad
    values, indices = b.op("aten.max.dim", x, 1)
    assert values.type.requires_grad and not indices.type.requires_grad
    assert not b.op("aten.gt.Scalar", x, 0).type.requires_grad  # bool results never need grad
    with torch.no_grad():
        assert not b.op("aten.mul.Tensor", x, c).type.requires_grad


def test_undefined_argument_is_an_error():
    other = GraphBuilder("other").input("y", "f32[4] cpu")
    b = GraphBuilder("g")
    x = b.input("x", "f32[4] cpu")
    with pytest.raises(GraphBuildError, match="aten.add.Tensor: argument %y is not defined in graph g"):
        b.op("aten.add.Tensor", x, other)
    with pytest.raises(GraphBuildError, match="argument %y is not defined"):
        b.op("aten.cat.default", [x, other], out_type="f32[8] cpu")  # inside a list
    with pytest.raises(GraphBuildError, match="argument %y is not defined"):
        b.op("aten.add.Tensor", x, x, alpha=Value("y", SymIntType(2)))  # inside kwargs
    with pytest.raises(GraphBuildError, match="graph output %y is not a value defined in graph g"):
        b.build(other)


def test_duplicate_names_are_errors():
    b = GraphBuilder("g")
    x = b.input("x", "f32[4] cpu")
    with pytest.raises(GraphBuildError, match="value %x is already defined in graph g"):
        b.input("x", "f32[4] cpu")
    with pytest.raises(GraphBuildError, match="value %x is already defined"):
        b.op("aten.relu.default", x, out_name="x")
    with pytest.raises(GraphBuildError, match="must be an identifier"):
        b.op("aten.relu.default", x, out_name="not a name")
    with pytest.raises(GraphBuildError, match="2 output names for 1 outputs"):
        b.op("aten.relu.default", x, out_name=["a", "b"])


def test_add_node_checks_names():
    b = GraphBuilder("g")
    x = b.input("x", "f32[4] cpu")
    node = Node("aten.relu.default", (x,), (), (Value("r", TensorType.make((4,), torch.float32)),))
    assert b.add_node(node) is node
    with pytest.raises(GraphBuildError, match="output %r is already defined"):
        b.add_node(node)
    stray = Node("aten.relu.default", (Value("q", x.type),), (), (Value("s", x.type),))
    with pytest.raises(GraphBuildError, match="argument %q is not defined"):
        b.add_node(stray)
    assert verify(b.build(node.outputs[0])).ops() == ["aten.relu.default"]


def test_arguments_are_frozen():
    b = GraphBuilder("g")
    x = b.input("x", "f32[4, 4] cpu")
    y = b.op("torch.Tensor.__getitem__", x, (slice(1, None), [0, 2]))
    node = b.build(y).nodes[0]
    index = node.args[1]
    assert type(index) is tuple and isinstance(index[0], Slice) and isinstance(index[1], ArgList)
    hash(node)  # nodes stay hashable
    with pytest.raises(GraphBuildError, match="cannot use Tensor"):
        b.op("aten.add.Tensor", x, torch.ones(4, 4))


def test_outputs_may_be_added_in_steps():
    b = GraphBuilder("g")
    x = b.input("x", "f32[4] cpu")
    y = b.op("aten.relu.default", x)
    b.output(y)
    graph = b.build(x)
    assert graph.outputs == (y, x) and graph.inputs == (x,)
