"""Golden text of capture's command line: each `golden/<case>.py` script run through
`python -m torchsmith.capture <case>.py` prints the captured graphs with their guards, constants and
generated code, and the graph breaks, exactly as in `golden/<case>.txt` (golden/README.md).

Regenerate after an intended change:
`TORCHSMITH_UPDATE_GOLDEN=1 pytest packages/capture/tests/test_golden.py`.
"""

import json
import pathlib
import re
import subprocess
import sys

import pytest
import torch

from torchsmith.capture.__main__ import describe_constant, main
from torchsmith.ir import load, verify
from torchsmith.ir.golden import check_golden

GOLDEN = pathlib.Path(__file__).parent / "golden"
CASES = sorted(p.stem for p in GOLDEN.glob("*.py"))
# A resume function is named by the bytecode offset it resumes at, which differs between Python
# versions (76 on 3.11 is 70 on 3.12 for the same line): the golden text writes it as `_at_<offset>`.
_RESUME_OFFSET = re.compile(r"(torchsmith_resume_in_\w+?_at_)\d+")


def stable(text: str) -> str:
    return _RESUME_OFFSET.sub(r"\1<offset>", text)


def run_cli(monkeypatch, capsys, *argv) -> tuple[int, str, str]:
    """Run the command line in the golden folder, so that the printed source paths are relative."""
    monkeypatch.chdir(GOLDEN)
    capsys.readouterr()
    status = main(list(argv))
    out = capsys.readouterr()
    return status, out.out, out.err


def test_every_case_has_its_golden_text():
    assert len(CASES) >= 7
    assert {p.stem for p in GOLDEN.glob("*.txt")} == set(CASES)


@pytest.mark.parametrize("case", CASES)
def test_golden(case, monkeypatch, capsys):
    status, out, err = run_cli(monkeypatch, capsys, f"{case}.py")
    assert status == 0, err
    check_golden(GOLDEN / f"{case}.txt", stable(out))


@pytest.mark.parametrize("case", CASES)
def test_printout_is_the_same_on_a_second_run(case, monkeypatch, capsys):
    first = run_cli(monkeypatch, capsys, f"{case}.py")
    second = run_cli(monkeypatch, capsys, f"{case}.py")
    assert first == second
    assert not re.search(r"0x[0-9a-f]{6,}", first[1]), "an address in the printout changes between runs"


def test_out_writes_each_graph_as_json_for_the_next_stage(tmp_path, monkeypatch, capsys):
    status, out, err = run_cli(monkeypatch, capsys, "graph_break.py", "-o", str(tmp_path))
    assert status == 0, err
    written = [pathlib.Path(line) for line in out.splitlines() if line.endswith(".json")]
    assert [p.name for p in written] == ["001-capture-fn.json",
                                         f"002-capture-{load(written[1]).name}.json"]
    first, second = (verify(load(p)) for p in written)
    assert first.ops() == ["torch.cos", "torch.Tensor.__add__"]
    assert second.ops() == ["torch.Tensor.mean", "torch.Tensor.__mul__"]
    assert json.loads(written[0].read_text())["graph"]["name"] == "fn"


def test_dynamic_flag_starts_symbolic(monkeypatch, capsys):
    status, out, _ = run_cli(monkeypatch, capsys, "pointwise.py", "--dynamic")
    assert status == 0
    assert "graph fn(%x: f32[s0, s1] cpu, %y: f32[s1] cpu)" in out


def test_fullgraph_turns_the_break_into_a_one_line_error(monkeypatch, capsys):
    status, out, err = run_cli(monkeypatch, capsys, "graph_break.py", "--fullgraph")
    assert status == 2
    assert err.count("\n") == 1 and "FullGraphError" in err and "graph_break.py:7" in err


@pytest.mark.parametrize(
    "script, args, message",
    [
        ("x = 1\n", [], "defines no `fn`"),
        ("def fn(x):\n    return x\n", [], "defines no `example_inputs`"),
        ("import torch\ndef fn(x):\n    return x\nexample_inputs = torch.ones(2)\n", [],
         "it must be a tuple (the arguments of one call) or a non-empty list of tuples"),
        ("import torch\ndef fn(x):\n    return x\nexample_inputs = [torch.ones(2)]\n", [],
         "non-empty list of tuples"),
        ("fn = 3\nexample_inputs = ()\n", [], "`fn` is a int; capture takes a function or nn.Module"),
        ("raise RuntimeError('the script failed')\n", [], "RuntimeError: the script failed"),
        ("def g(x):\n    return x\nexample_inputs = (1,)\n", ["--fn", "f"], "defines no `f`"),
    ],
)
def test_errors_are_one_line_with_exit_status_2(tmp_path, monkeypatch, capsys, script, args, message):
    path = tmp_path / "script.py"
    path.write_text(script)
    status, _, err = run_cli(monkeypatch, capsys, str(path), *args)
    assert status == 2
    assert err.count("\n") == 1 and err.startswith(f"error: {path}: ") and message in err


def test_missing_script_is_one_line(tmp_path, monkeypatch, capsys):
    status, _, err = run_cli(monkeypatch, capsys, str(tmp_path / "missing.py"))
    assert status == 2 and "no such script" in err and err.count("\n") == 1


def test_several_calls_and_a_module_named_with_flags(tmp_path, monkeypatch, capsys):
    (tmp_path / "model.py").write_text(
        "import torch\n"
        "net = torch.nn.ReLU()\n"
        "calls = [(torch.randn(2, 3),), (torch.randn(2, 3),)]\n"
    )
    script = str(tmp_path / "model.py")
    status, out, err = run_cli(monkeypatch, capsys, script, "--fn", "net", "--inputs", "calls")
    assert status == 0, err
    # the second call hits the first capture's guards: one graph
    assert out.count("# capture ") == 1 and out.endswith("# 1 graph(s), 0 graph break(s)\n")


def test_constants_are_described_without_addresses():
    assert describe_constant(torch.float16) == "torch.float16"
    spec = (torch.Tensor, torch.device("cpu"), (2,))
    assert describe_constant(spec) == "(torch.Tensor, device('cpu'), (2,))"
    assert describe_constant(torch.relu) == "function torch.relu"
    assert describe_constant(len) == "function len"
    assert describe_constant(object()) == "object object"
    assert describe_constant(describe_constant.__code__).startswith("code describe_constant (line ")
    assert describe_constant(torch.nn.Linear(2, 2)) == "module object Linear"


def test_python_dash_m_runs_in_a_fresh_process():
    command = [sys.executable, "-m", "torchsmith.capture", "pointwise.py"]
    result = subprocess.run(command, cwd=GOLDEN, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert result.stdout == (GOLDEN / "pointwise.txt").read_text()


def test_the_scripts_main_block_does_not_run(tmp_path, monkeypatch, capsys):
    (tmp_path / "script.py").write_text(
        "import torch\n"
        "def fn(x):\n    return x * 2\n"
        "example_inputs = (torch.ones(2),)\n"
        "if __name__ == '__main__':\n    raise SystemExit('the main block ran')\n"
    )
    status, out, err = run_cli(monkeypatch, capsys, str(tmp_path / "script.py"))
    assert status == 0, err
    assert "torch.Tensor.__mul__(%x, 2)" in out
