"""Op names resolve only through the registry: ATen overloads, registered ops (prims) and the
explicit table of torch/Tensor/operator/math functions. Anything else is refused at load/verify,
before the interpreter, the Python code generator or a stage command line could call it."""

import json

import pytest
import torch
from adversarial_corpus import outcome, record

from torchsmith.ir import UnknownOpError, compile_to_python, dumps, interpret, lookup_op, parse_graph, verify
from torchsmith.ir.op_table import python_op_table

GRAPH = """graph f(%x: f32[4] cpu):
  %y: f32[4] cpu = OP(%x)
  return (%y)
"""
HOSTILE_OPS = [
    "torch.os.system",
    "torch.load",
    "torch.save",
    "torch.from_file",
    "torch.manual_seed",
    "torch.Tensor.__reduce_ex__",
    "torch.Tensor.register_hook",
    "torch.nn.functional.torch.os.system",
    "torch.serialization.load",
    "torch.hub.load",
    "torch._C._get_tracing_state",
    "operator.methodcaller",
    "operator.attrgetter",
    "operator.call",
    "math.__loader__.load_module",
    "aten.__class__.__init__",
    "aten.add.__call__",
    "aten.add",
    "aten.nope.default",
    "prims.nope",
    "builtins.eval",
    "os.system",
    "torch.Tensor.__class__.__subclasses__",
    "torch..add",
    "torch.add(",
    "aten.add.Tensor; import os",
    "aten.from_file.default",
]


@pytest.mark.parametrize("op", HOSTILE_OPS)
def test_hostile_op_names_are_refused_at_verify(op):
    doc = json.loads(dumps(parse_graph(GRAPH.replace("OP", "aten.relu.default"))))
    doc["graph"]["nodes"][0]["op"] = op
    from torchsmith.ir import loads

    assert outcome("op names: hostile", lambda: verify(loads(json.dumps(doc)))) == "clear"
    graph = loads(json.dumps(doc))  # reading alone does not resolve ops; running does, and refuses
    assert outcome("op names: hostile (interpret)", lambda: interpret(graph, torch.randn(4))) == "clear"
    assert outcome("op names: hostile (pycodegen)", lambda: compile_to_python(graph)) == "clear"
    with pytest.raises(UnknownOpError, match="op"):
        lookup_op(op)


def test_stage_command_lines_refuse_hostile_ops(tmp_path, capsys):
    doc = json.loads(dumps(parse_graph(GRAPH.replace("OP", "aten.relu.default"))))
    doc["graph"]["nodes"][0]["op"] = "torch.os.system"
    path = tmp_path / "hostile.json"
    path.write_text(json.dumps(doc))
    for main, argv in stage_mains(str(path)):
        status = main(argv)
        lines = capsys.readouterr().err.strip().splitlines()
        clear = status == 2 and len(lines) == 1 and "torch.os.system" in lines[0]
        record("stage CLIs: hostile op", "clear" if clear else "wrong")
        assert clear, (argv, status, lines)


def stage_mains(path: str):
    """(main, argv) of every stage command line running the graph file at `path`."""
    from torchsmith.autograd_aot.__main__ import main as aot_main
    from torchsmith.inductor.__main__ import main as inductor_main
    from torchsmith.ir.__main__ import main as ir_main
    from torchsmith.prims.__main__ import main as prims_main

    return [
        (ir_main, ["run", path]),
        (aot_main, [path]),
        (prims_main, ["decompose", path]),
        (inductor_main, ["compile", path]),
    ]


def test_the_table_covers_what_capture_records():
    import torchsmith

    def program(x, w):
        y = torch.nn.functional.gelu(x @ w).softmax(-1)
        z = torch.cat([y, y.sin()], 1) + torch.einsum("ij,jk->ik", x, w).sum(1, keepdim=True)
        return z[:, :3].relu() * 2

    graphs = []

    def backend(graph, example_inputs):
        graphs.append(graph)
        return lambda *args: interpret(graph, *args)

    x, w = torch.randn(4, 8), torch.randn(8, 8)
    torch.testing.assert_close(torchsmith.compile(program, backend=backend)(x, w), program(x, w))
    ops = {node.op for graph in graphs for node in graph.nodes}
    assert ops and all(op in python_op_table() or lookup_op(op) for op in ops)
    assert {"torch.nn.functional.gelu", "torch.Tensor.softmax", "torch.einsum"} <= ops


def test_real_ops_spelled_as_dunders_still_resolve():
    # ATen names its shift operators with dunders; the lookup must keep them
    assert lookup_op("aten.__lshift__.Scalar").eager is torch.ops.aten.__lshift__.Scalar
    assert lookup_op("torch.Tensor.__lshift__").eager is torch.Tensor.__lshift__
