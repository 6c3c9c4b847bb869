"""`python -m torchsmith explain|report SCRIPT.py`: a user's script, run with every compile watched."""

import os
import subprocess
import sys
import textwrap

import pytest

import torchsmith
from torchsmith import report
from torchsmith.__main__ import main

SCRIPT = textwrap.dedent(
    """
    import sys
    import torch
    import torchsmith

    @torchsmith.compile(backend="eager")
    def f(x):
        y = x.relu() * 2
        print("args:", sys.argv[1:])
        return y + 1

    out = f(torch.randn(4))
    assert out.shape == (4,)
    model = torchsmith.compile(torch.nn.Linear(3, 2), backend="aot_eager")
    model(torch.randn(2, 3)).sum().backward()
    if "--fail" in sys.argv:
        raise RuntimeError("the user's own error")
    """
)


@pytest.fixture
def script(tmp_path):
    report.forget_all()
    path = tmp_path / "user_script.py"
    path.write_text(SCRIPT)
    yield path
    report.forget_all()


def test_explain_prints_graphs_breaks_guards_and_times(script, capsys):
    assert main(["explain", str(script), "one", "two"]) == 0
    out = capsys.readouterr().out
    assert "args: ['one', 'two']" in out  # the script saw its own arguments
    assert "compiled 2 function(s)" in out
    assert "Graph break count: 1" in out
    assert f"break: {script}:9: print()" in out  # file:line and the reason
    assert "torch.Tensor.relu(%x)" in out and "torch.nn.functional.linear" in out
    assert "___tensor_spec(L['x'])" in out and "Compile time:" in out
    assert torchsmith.compile is torchsmith.compiler.compile  # the patch is undone


def test_report_writes_pages_and_keeps_the_scripts_exit_status(script, tmp_path, capsys):
    out_dir = tmp_path / "pages"
    assert main(["report", str(script), "--out", str(out_dir), "--fail"]) == 1
    captured = capsys.readouterr()
    assert "the user's own error" in captured.err
    assert sorted(p.name for p in out_dir.iterdir()) == ["Linear.html", "f.html", "index.html"]
    page = (out_dir / "f.html").read_text()
    assert '<tr class="break">' in page and "torch.Tensor.relu(%x)" in page


def test_missing_script_is_a_clear_error(tmp_path, capsys):
    assert main(["explain", str(tmp_path / "nope.py")]) == 2
    assert "no such script" in capsys.readouterr().err


def test_module_runs_as_a_program(script):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    done = subprocess.run([sys.executable, "-m", "torchsmith", "explain", str(script)],
                          capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "Graph break count: 1" in done.stdout


def test_pipeline_lists_every_stage_of_the_inductor_backend(capsys):
    from torchsmith.autograd_aot.pipeline import aot_pipeline
    from torchsmith.inductor.cpu_pipeline import CPU_PIPELINE

    assert main(["pipeline"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("capture:")
    listed = [line.split("->")[0].strip() for line in out.splitlines() if "->" in line]
    cpu = aot_pipeline().names()[:2] + ["decompose", "partition"] + CPU_PIPELINE.names()
    assert listed[: len(cpu)] == cpu  # in order: autograd_aot's steps, then the CPU pipeline's
