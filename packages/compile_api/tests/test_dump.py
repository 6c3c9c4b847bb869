"""IR dumps: every stage's input graph, numbered in order, each file loads and verifies."""

import json
import os
import re
import subprocess
import sys

import torch

import torchsmith
from torchsmith.inductor.loop_ir.serialize import load_program
from torchsmith.ir import Graph, load, verify


class MLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = torch.nn.Linear(4, 8), torch.nn.Linear(8, 2)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))


def names(directory) -> list[str]:
    return sorted(p.name for p in directory.iterdir())


def test_training_step_under_inductor_dumps_every_stage_in_order(tmp_path):
    model = MLP()
    compiled = torchsmith.compile(model)
    with torchsmith.dump_ir(tmp_path) as dumper:
        compiled(torch.randn(3, 4)).sum().backward()
    files = names(tmp_path)
    assert [p.name for p in dumper.written] == files
    numbers = sorted({int(f[:3]) for f in files})
    assert numbers == list(range(1, len(numbers) + 1))
    kinds = [re.sub(r"^\d{3}-", "", f) for f in files]
    assert kinds[:5] == ["capture-MLP.forward.json", "aten-functional.json", "prims-joint.json",
                         "prims-forward.json", "prims-backward.json"]
    # then the inductor compiles the forward now and the backward in .backward(): loop IR, then C++
    later = kinds[5:]
    assert later and all(k.startswith(("loops-", "code-")) for k in later)
    assert any(k.endswith(".txt") for k in later) and any(k.endswith(".cpp") for k in later)
    loops = [f for f in files if "-loops-" in f]
    # the loop IR twice under one number: JSON to edit and feed to `inductor codegen`, text to read
    assert len(loops) == 4 and {f[:3] for f in loops if f.endswith(".json")} == {f[:3] for f in loops}
    for f in loops:
        if f.endswith(".json"):
            program = load_program(tmp_path / f)
            assert str(program) + "\n" == (tmp_path / f.replace(".json", ".txt")).read_text()
    for f in files:
        if f.endswith(".json") and f not in loops:
            graph = load(tmp_path / f)
            assert isinstance(graph, Graph)
            verify(graph)
    capture_graph = load(tmp_path / files[0])
    assert all(node.op.startswith(("torch.", "operator.")) for node in capture_graph.nodes)
    assert any(node.op.startswith("prims.") for node in load(tmp_path / files[3]).nodes)
    code = next(f for f in files if f.endswith(".cpp"))
    assert "extern \"C\"" in (tmp_path / code).read_text()


def test_dump_numbering_continues_in_a_used_directory(tmp_path):
    f = torchsmith.compile(lambda x: x + 1, backend="eager")
    with torchsmith.dump_ir(tmp_path):
        f(torch.ones(2))
    g = torchsmith.compile(lambda x: x * 2, backend="eager")
    with torchsmith.dump_ir(tmp_path):
        g(torch.ones(2))
    name = "test_dump_numbering_continues_in_a_used_directory.lambda"
    assert names(tmp_path) == [f"001-capture-{name}.json", f"002-capture-{name}.json"]
    assert load(tmp_path / f"002-capture-{name}.json").ops() == ["torch.Tensor.__mul__"]


def test_environment_variable_dumps_in_a_new_process(tmp_path):
    env = dict(os.environ, TORCHSMITH_DUMP_IR=str(tmp_path))
    code = (
        "import torch, torchsmith\n"
        "def step(x):\n    return (x.sin() * 2).sum()\n"
        "torchsmith.compile(step, backend='aot_eager')(torch.randn(3))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stderr
    assert names(tmp_path) == ["001-capture-step.json", "002-aten-functional.json"]
    doc = json.loads((tmp_path / "002-aten-functional.json").read_text())
    from torchsmith.ir.serialize import version_text

    assert doc["schema_version"] == version_text()
    assert all(op.startswith("aten.") for op in load(tmp_path / "002-aten-functional.json").ops())
