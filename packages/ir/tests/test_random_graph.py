"""random_graph makes valid graphs: they run under the reference interpreter and every declared
type (shape, dtype, and strides of dims larger than 1) is what eager PyTorch produces."""

import pytest
import torch

from torchsmith.ir import (
    GraphBuilder,
    ScalarType,
    SymIntType,
    TensorType,
    example_inputs,
    format_graph,
    interpret,
    random_graph,
    symbol,
    to_json,
)
from torchsmith.ir.dtypes import DTYPE_BY_NAME
from torchsmith.ir.interpreter import bind_symbols, run_node
from torchsmith.ir.serialize_tables import ARG_KINDS
from torchsmith.ir.symbolic import evaluate


def _run_checking_strides(graph, inputs):
    """Run node by node (as interpret does) and compare strides too, which interpret does not check."""
    bindings = bind_symbols(graph, inputs)
    env = {v.name: x for v, x in zip(graph.inputs, inputs)}
    for node in graph.nodes:
        result = run_node(node, env, bindings)
        results = result if len(node.outputs) > 1 else [result]
        for value, actual in zip(node.outputs, results, strict=True):
            env[value.name] = actual
            if isinstance(value.type, TensorType):
                shape = [evaluate(d, bindings) for d in value.type.shape]
                strides = [evaluate(s, bindings) for s in value.type.strides]
                for size, got, want in zip(shape, actual.stride(), strides, strict=True):
                    assert size <= 1 or got == want, f"{node}: strides {actual.stride()}, declared {strides}"


@pytest.mark.parametrize("symbolic", [True, False])
@pytest.mark.parametrize("seed", range(20))
def test_random_graphs_run_with_their_declared_types(seed, symbolic):
    graph = random_graph(seed, num_nodes=30, symbolic=symbolic)
    inputs = example_inputs(graph, seed=seed)
    outputs = interpret(graph, *inputs, check_types=True)
    assert len(outputs) == len(graph.outputs) >= 1
    _run_checking_strides(graph, inputs)


def test_random_graph_is_deterministic_and_has_the_asked_size():
    for n in (1, 7, 50):
        a, b = random_graph(11, num_nodes=n), random_graph(11, num_nodes=n)
        assert len(a.nodes) == n
        assert format_graph(a) == format_graph(b)
    assert format_graph(random_graph(1)) != format_graph(random_graph(2))


def test_symbolic_flag_controls_free_symbols():
    concrete = random_graph(5, num_nodes=60, symbolic=False)
    assert all(not v.type.free_symbols for v in concrete.values())
    symbolic = [random_graph(seed, num_nodes=60) for seed in range(5)]
    assert any(v.type.free_symbols for g in symbolic for v in g.inputs)


def test_random_graphs_cover_ops_and_every_argument_kind():
    ops, tags = set(), set()

    def collect(arg):
        if isinstance(arg, dict) and len(arg) == 1:
            ((tag, payload),) = arg.items()
            tags.add(tag)
            for item in payload if isinstance(payload, list) else []:
                collect(item)

    for seed in range(30):
        doc = to_json(random_graph(seed, num_nodes=60))
        for node in doc["graph"]["nodes"]:
            ops.add(node["op"])
            for arg in node["args"] + list(node.get("kwargs", {}).values()):
                collect(arg)
    expected = {
        "aten.max.dim", "aten.mm.default", "aten.cat.default", "aten.view.default", "aten.permute.default",
        "aten.sum.dim_IntList", "torch.Tensor.__getitem__", "aten.sym_size.int",
    }
    assert expected <= ops
    assert any(op.startswith("torch.") for op in ops)
    assert tags == {kind.tag for kind in ARG_KINDS}


def test_example_inputs_follow_declared_types_and_sizes():
    graph = random_graph(3, num_nodes=10)
    symbols = sorted(set().union(*(v.type.free_symbols for v in graph.inputs)))
    sizes = {name: 3 + i for i, name in enumerate(symbols)}
    inputs = example_inputs(graph, sizes=sizes)
    for value, x in zip(graph.inputs, inputs):
        assert x.dtype == value.type.dtype
        assert list(x.shape) == [evaluate(d, sizes) for d in value.type.shape]
        assert list(x.stride()) == [evaluate(s, sizes) for s in value.type.strides]
    again = example_inputs(graph, sizes=sizes)
    assert all(torch.equal(a, b) for a, b in zip(inputs, again))


def test_example_inputs_for_sym_scalar_and_grad_inputs():
    b = GraphBuilder("g")
    n = symbol("n")
    x = b.input("x", TensorType.make([n, 3], torch.float64, strides=[1, n], requires_grad=True))
    k = b.input("k", SymIntType(2 * symbol("n")))
    flags = [b.input(f"c_{kind}", ScalarType(kind)) for kind in ("bool", "int", "float", "complex", "none")]
    every_dtype = [b.input(f"t_{name}", TensorType.make([2, n], d)) for name, d in DTYPE_BY_NAME.items()]
    graph = b.build(x, k, *flags, *every_dtype)
    x_in, k_in, *rest = example_inputs(graph, sizes={"n": 4})
    scalars, tensors = rest[:5], rest[5:]
    assert x_in.shape == (4, 3) and x_in.stride() == (1, 4) and x_in.requires_grad
    assert k_in == 8
    assert [type(s) for s in scalars] == [bool, int, float, complex, type(None)]
    assert [t.dtype for t in tensors] == list(DTYPE_BY_NAME.values())
    interpret(graph, x_in, k_in, *rest, check_types=True)
