"""The stage command lines on dumped IR: capture dump -> `python -m torchsmith.autograd_aot` ->
`python -m torchsmith.prims decompose` -> `python -m torchsmith.inductor compile`, and the final code
gives eager's results."""

import json
import os
import subprocess
import sys

import pytest
import torch

import torchsmith
from torchsmith.autograd_aot.__main__ import main as aot_main
from torchsmith.inductor import compile_graph
from torchsmith.inductor.__main__ import main as inductor_main
from torchsmith.ir import interpret, load, verify
from torchsmith.prims.__main__ import main as prims_main


def program(x, w):
    return torch.relu(x @ w).sum(1) * 2 + x.mean()


@pytest.fixture
def captured(tmp_path):
    """The capture dump of `program` (inputs x, w; w requires grad) and the inputs it ran on."""
    x, w = torch.randn(3, 4), torch.randn(4, 5, requires_grad=True)
    with torchsmith.dump_ir(tmp_path / "dump") as dumper:
        torchsmith.compile(program, backend="eager")(x, w)
    (path,) = dumper.written
    assert [v.name for v in load(path).inputs] == ["x", "w"]
    return path, x, w


def test_inference_round_trip_through_every_stage_cli(tmp_path, captured, capsys):
    path, x, w = captured
    assert aot_main([str(path), "--out", str(tmp_path / "aot")]) == 0
    aten = tmp_path / "aot" / "inference.json"
    assert all(op.startswith("aten.") for op in verify(load(aten)).ops())
    assert prims_main(["decompose", str(aten), "--out", str(tmp_path / "prims.json")]) == 0
    prims_graph = verify(load(tmp_path / "prims.json"))
    assert any(op.startswith("prims.") for op in prims_graph.ops())
    capsys.readouterr()
    compiled = tmp_path / "ind"
    assert inductor_main(["compile", str(tmp_path / "prims.json"), "--out", str(compiled), "--check"]) == 0
    assert "check: program matches eager on random inputs" in capsys.readouterr().err
    assert (tmp_path / "ind" / "loops.txt").read_text().startswith("loops ")
    assert "extern \"C\"" in (tmp_path / "ind" / "kernels.cpp").read_text()
    # the final code, run on the user's inputs, gives eager's answer
    (out,) = compile_graph(prims_graph, [x, w.detach()])(x, w.detach())
    torch.testing.assert_close(out, program(x, w).detach())


def test_training_cli_writes_forward_backward_and_calling_convention(tmp_path, captured):
    path, x, w = captured
    assert aot_main([str(path), "--training", "--out", str(tmp_path)]) == 0
    forward, backward = verify(load(tmp_path / "forward.json")), verify(load(tmp_path / "backward.json"))
    calling = json.loads((tmp_path / "calling.json").read_text())
    assert calling["num_outputs"] == 1 and calling["grad_inputs"] == [1] and calling["mutated_inputs"] == []
    results = interpret(forward, x, w.detach())
    (out,), saved = results[:1], results[len(results) - calling["num_saved"]:]
    expected = program(x, w)
    torch.testing.assert_close(out, expected.detach())
    tangent = torch.randn_like(out)
    (grad_w,) = interpret(backward, *saved, tangent)
    expected.backward(tangent)
    torch.testing.assert_close(grad_w, w.grad)


def test_cli_errors_say_what_to_do(tmp_path, captured, capsys):
    path, _, _ = captured
    assert aot_main([str(tmp_path / "missing.json")]) == 2
    assert "missing.json" in capsys.readouterr().err
    assert aot_main([str(path), "--size", "s0"]) == 2
    assert "--size takes NAME=INT" in capsys.readouterr().err


def test_training_without_grad_inputs_is_refused(tmp_path, captured, capsys):
    path, _, _ = captured
    aot_main([str(path), "--out", str(tmp_path / "inference")])
    capsys.readouterr()
    assert aot_main([str(tmp_path / "inference" / "inference.json"), "--training"]) == 2
    err = capsys.readouterr().err
    assert "no input of graph" in err and "requires grad" in err and "`grad`" in err


def test_prims_decompose_refuses_missing_decompositions_unless_asked(tmp_path, capsys):
    from torchsmith.ir import GraphBuilder, TensorType, save

    builder = GraphBuilder("g")
    x = builder.input("x", TensorType.make((4,), torch.float32))
    graph = builder.build(builder.op("aten.special_bessel_j0.default", x))
    save(graph, tmp_path / "g.json")
    assert prims_main(["decompose", str(tmp_path / "g.json")]) == 2
    assert "aten.special_bessel_j0" in capsys.readouterr().err
    assert prims_main(["decompose", str(tmp_path / "g.json"), "--keep-missing"]) == 0
    assert "aten.special_bessel_j0.default(%x)" in capsys.readouterr().out


def test_python_dash_m_entry_points_run(tmp_path, captured):
    path, _, _ = captured
    env = dict(os.environ)
    result = subprocess.run([sys.executable, "-m", "torchsmith.autograd_aot", str(path)], env=env,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("# inference\n") and "\ngraph program(" in result.stdout
    assert "aten.mm.default" in result.stdout
    assert "# calling convention: " in result.stdout


def test_inductor_cli_in_a_fresh_process_reads_a_prims_graph(tmp_path, captured):
    # a fresh process has not imported torchsmith.prims, which registers the prims ops the file uses
    path, _, _ = captured
    assert aot_main([str(path), "--out", str(tmp_path / "aot")]) == 0
    assert prims_main(["decompose", str(tmp_path / "aot" / "inference.json"), "--out",
                       str(tmp_path / "prims.json")]) == 0
    prims_path = str(tmp_path / "prims.json")
    command = [sys.executable, "-m", "torchsmith.inductor", "compile", prims_path, "--check"]
    result = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert "matches eager on random inputs" in result.stderr


def test_symbolic_sizes_survive_every_stage_cli(tmp_path, capsys):
    def f(x):
        return (x.sin() * 2).sum(0)

    with torchsmith.dump_ir(tmp_path / "dump") as dumper:
        torchsmith.compile(f, backend="eager", dynamic=True)(torch.randn(3, 4))
    (path,) = dumper.written
    assert aot_main([str(path), "--out", str(tmp_path / "aot"), "--size", "s0=6"]) == 0
    aten = load(tmp_path / "aot" / "inference.json")
    assert str(aten.inputs[0].type).startswith("f32[s0, s1]")
    prims_file = str(tmp_path / "p.json")
    assert prims_main(["decompose", str(tmp_path / "aot" / "inference.json"), "--out", prims_file]) == 0
    capsys.readouterr()
    assert inductor_main(["compile", prims_file, "--check", "--size", "s0=7", "--size", "s1=5"]) == 0
    out = capsys.readouterr()
    assert "sizes(s0, s1)" in out.out and "matches eager" in out.err
    x = torch.randn(5, 9)
    (got,) = compile_graph(load(tmp_path / "p.json"), [x])(x)
    torch.testing.assert_close(got, f(x))
