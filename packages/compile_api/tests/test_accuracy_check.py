"""`options={"check": True}`: every stage's output compared with the previous stage's on the call's
inputs. Bugs are injected into one stage (a wrong decomposition, a wrong lowering, a wrong ATen graph,
a wrong captured graph); the check must name that stage and node, write a repro folder that replays
the mismatch, and return eager's values. Without injection it stays silent."""

import json
import logging
import os
import pathlib
import re
import runpy
import subprocess
import sys
import warnings

import pytest
import torch

import torchsmith
from torchsmith import AccuracyWarning
from torchsmith.options import resolve_options

THIS_FILE = pathlib.Path(__file__).name


@pytest.fixture
def fresh_cache(tmp_path, monkeypatch):
    """Injected bugs must not be hidden by (or leak into) the on-disk compile cache."""
    monkeypatch.setenv("TORCHSMITH_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("TORCHSMITH_COMPILE_CACHE", "0")
    return tmp_path


def check_options(tmp_path) -> dict:
    return {"check": True, "check.repro_dir": str(tmp_path / "repro")}


def only_folder(tmp_path) -> pathlib.Path:
    folders = list((tmp_path / "repro").iterdir())
    assert len(folders) == 1, folders
    return folders[0]


def replay(folder: pathlib.Path) -> dict:
    """Run the folder's repro.py in this process (so monkeypatched bugs stay in effect)."""
    return runpy.run_path(str(folder / "repro.py"), run_name="replay")["replay"]()


def mlp():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 4))


# ---- no injection: silent ----------------------------------------------------------------------


def _agreeing(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if "agree on" in r.getMessage()]


@pytest.mark.parametrize("backend", ["inductor", "aot_eager"])
def test_clean_mlp_inference_and_training_pass_silently(backend, tmp_path, caplog):
    model, x = mlp(), torch.randn(3, 8)
    compiled = torchsmith.compile(model, backend=backend, options=check_options(tmp_path))
    with warnings.catch_warnings(), caplog.at_level(logging.INFO, logger="torchsmith.accuracy"):
        warnings.simplefilter("error", AccuracyWarning)
        out = compiled(x)
        out.square().mean().backward()
    expected = model(x)
    torch.testing.assert_close(out, expected)
    agreed = _agreeing(caplog)
    assert len(agreed) == 1 and "outputs and gradients" in agreed[0], agreed
    stages = "capture, autograd_aot, prims, inductor" if backend == "inductor" else "capture, autograd_aot"
    assert stages in agreed[0]
    assert not (tmp_path / "repro").exists()


def test_clean_attention_block_passes_silently(tmp_path, caplog):
    torch.manual_seed(0)
    block = torch.nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=True)
    x = torch.randn(2, 5, 16)
    compiled = torchsmith.compile(block, options=check_options(tmp_path))
    with warnings.catch_warnings(), caplog.at_level(logging.INFO, logger="torchsmith.accuracy"):
        warnings.simplefilter("error", AccuracyWarning)
        with torch.no_grad():
            out = compiled(x)
    torch.testing.assert_close(out, block(x), rtol=1e-4, atol=1e-5)
    assert any("prims, inductor agree on outputs (inference)" in m for m in _agreeing(caplog))


def test_clean_training_step_with_mutation_and_graph_break(tmp_path, caplog):
    def step(x, w, counter):
        counter.add_(1)
        h = torch.tanh(x @ w)
        print("graph break")  # noqa: T201
        return torch.softmax(h, -1).sum() * counter[0]

    x, w = torch.randn(4, 8), torch.randn(8, 5, requires_grad=True)
    counter = torch.zeros(1)
    compiled = torchsmith.compile(step, options=check_options(tmp_path))
    with warnings.catch_warnings(), caplog.at_level(logging.INFO, logger="torchsmith.accuracy"):
        warnings.simplefilter("error", AccuracyWarning)
        loss = compiled(x, w, counter)
        loss.backward()
    assert counter.item() == 1  # the capture check's eager run updated a copy, not the argument
    reference_w = w.detach().clone().requires_grad_(True)
    step(x, reference_w, torch.zeros(1)).backward()
    torch.testing.assert_close(w.grad, reference_w.grad)
    assert len(_agreeing(caplog)) == 2  # the graph before the break and the resume function's


CALLS: list = []


def test_capture_check_never_repeats_side_effects(tmp_path, caplog):
    def f(x):
        CALLS.append(len(CALLS))  # a global list: running the program twice would append twice
        return x.cos() + 1

    CALLS.clear()
    compiled = torchsmith.compile(f, options=check_options(tmp_path))
    with warnings.catch_warnings(), caplog.at_level(logging.INFO, logger="torchsmith.accuracy"):
        warnings.simplefilter("error", AccuracyWarning)
        out = compiled(torch.randn(3))
    assert CALLS == [0]
    assert out.shape == (3,)
    assert any("capture check of" in m and "side effect" in m for m in caplog.messages), caplog.messages


def test_capture_check_compares_numpy_and_skips_objects(tmp_path):
    def f(x):
        a = x.sin().numpy() * 2
        return torch.from_numpy(a).cos(), a, (lambda: 1), "label"

    compiled = torchsmith.compile(f, options=check_options(tmp_path))
    with warnings.catch_warnings():
        warnings.simplefilter("error", AccuracyWarning)
        out, array, _, label = compiled(torch.randn(4))
    assert array.shape == (4,) and out.shape == (4,) and label == "label"
    assert not (tmp_path / "repro").exists()


def test_option_and_environment_variable(monkeypatch):
    monkeypatch.delenv("TORCHSMITH_CHECK", raising=False)
    assert resolve_options(None, None)["check"] is False
    assert resolve_options(None, {"check": True})["check"] is True
    with pytest.raises(torchsmith.InvalidOptionError, match="check"):
        resolve_options(None, {"check": "yes"})
    monkeypatch.setenv("TORCHSMITH_CHECK", "1")
    assert resolve_options(None, None)["check"] is True
    assert resolve_options(None, {"check": False})["check"] is False  # an explicit option wins
    monkeypatch.setenv("TORCHSMITH_CHECK", "0")
    assert resolve_options(None, None)["check"] is False
    # a backend without an `options` parameter still accepts the check (compile_api runs it)
    torchsmith.compile(
        lambda x: x + 1,
        backend=lambda g, inputs: torchsmith.lookup_backend("eager")(g, inputs),
        options={"check": True},
    )


# ---- prims: a wrong decomposition --------------------------------------------------------------


def _wrong_gelu(e, a, *, approximate="none"):
    """GELU with 0.51 in place of 0.5: off by 2%."""
    return e.pointwise(lambda x: e.mul(e.mul(x, 0.51), e.add(e.erf(e.mul(x, 0.7071067811865476)), 1.0)), a)


def test_wrong_decomposition_names_prims_and_the_gelu_node(fresh_cache, monkeypatch):
    from torchsmith.prims.decompose import DECOMPOSITIONS

    monkeypatch.setitem(DECOMPOSITIONS, "aten.gelu.default", _wrong_gelu)

    def f(x, w):
        h = x @ w
        return torch.nn.functional.gelu(h) + 1  # the line the check must name

    x, w = torch.randn(3, 8), torch.randn(8, 4)
    compiled = torchsmith.compile(f, options=check_options(fresh_cache))
    with pytest.warns(AccuracyWarning) as caught:
        out = compiled(x, w)
    torch.testing.assert_close(out, f(x, w))  # the ATen graph's result, not the wrong decomposition's
    message = str(caught[0].message)
    assert "stage prims disagrees with stage autograd_aot" in message
    line = f.__code__.co_firstlineno + 2
    assert f"%gelu = aten.gelu.default (from {__file__}:{line})" in message
    assert "captured there as: %gelu = torch.nn.functional.gelu" in message  # mapped back by source line
    assert re.search(r"max error: [0-9.e-]+ at %gelu \(rtol 0.0001, atol 1e-05\)", message), message
    folder = only_folder(fresh_cache)
    assert str(folder) in message
    manifest = json.loads((folder / "manifest.json").read_text())
    assert manifest["stage"] == "prims" and manifest["op"] == "aten.gelu.default"
    assert manifest["max_error"] > 1e-3
    assert (
        "stage prims" in (folder / "README.md").read_text()
        and "aten.gelu.default" in (folder / "README.md").read_text()
    )
    result = replay(folder)
    assert result["node"] is not None and result["graph"] is not None  # reproduces under the bug
    monkeypatch.undo()
    result = replay(folder)
    assert result["node"] is None and result["graph"] is None  # and agrees once the table is right
    # the next call keeps using the agreeing result without warning again
    with warnings.catch_warnings():
        warnings.simplefilter("error", AccuracyWarning)
        torch.testing.assert_close(compiled(x, w), f(x, w))


@pytest.mark.parametrize("stage", ["prims", "inductor"])
def test_repro_script_runs_as_a_program(stage, fresh_cache, monkeypatch):
    from torchsmith.inductor.lowering.lower import LOWERINGS
    from torchsmith.prims.decompose import DECOMPOSITIONS

    if stage == "prims":
        monkeypatch.setitem(DECOMPOSITIONS, "aten.gelu.default", _wrong_gelu)
        op = "aten.gelu.default"
    else:
        monkeypatch.setitem(LOWERINGS, "prims.exp", _wrong_unary("prims.exp", "prims.expm1"))
        op = "prims.exp"
    compiled = torchsmith.compile(
        lambda x: torch.nn.functional.gelu(x).exp(), options=check_options(fresh_cache)
    )
    with pytest.warns(AccuracyWarning, match=op):
        compiled(torch.randn(2, 8))
    folder = only_folder(fresh_cache)
    # A new process has the right tables: the script runs the stage and says it now agrees.
    done = subprocess.run(
        [sys.executable, "repro.py"],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "TORCHSMITH_COMPILE_CACHE": "0"},
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"stage {stage}" in done.stdout and op in done.stdout
    assert "no mismatch" in done.stdout


def test_wrong_backward_decomposition_is_found_in_the_joint_graph(fresh_cache, monkeypatch):
    from torchsmith.prims.decompose import DECOMPOSITIONS

    right = DECOMPOSITIONS["aten.gelu_backward.default"]

    def wrong_gelu_backward(e, grad, a, *, approximate="none"):
        return e.mul(right(e, grad, a, approximate=approximate), 1.05)

    monkeypatch.setitem(DECOMPOSITIONS, "aten.gelu_backward.default", wrong_gelu_backward)
    model, x = mlp(), torch.randn(3, 8)
    compiled = torchsmith.compile(model, options=check_options(fresh_cache))
    with pytest.warns(AccuracyWarning) as caught:
        out = compiled(x)
    message = str(caught[0].message)
    assert "stage prims" in message and "joint graph" in message
    assert "aten.gelu_backward.default" in message
    assert "gradient of input" in message  # the forward agreed; a gradient did not
    out.sum().backward()
    reference = mlp()
    reference(x).sum().backward()
    for p, q in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(p.grad, q.grad)
    assert replay(only_folder(fresh_cache))["node"] is not None


# ---- inductor: a wrong lowering ----------------------------------------------------------------


def _wrong_unary(name: str, instead: str):
    from torchsmith.inductor.lowering.lower import LOWERINGS

    right = LOWERINGS[name]
    return lambda ctx, node: right(ctx, node.replace(op=instead))


def test_wrong_lowering_names_inductor_and_the_exp_node(fresh_cache, monkeypatch):
    from torchsmith.inductor.lowering.lower import LOWERINGS

    monkeypatch.setitem(LOWERINGS, "prims.exp", _wrong_unary("prims.exp", "prims.expm1"))

    def f(x):
        h = torch.tanh(x) * 3
        return torch.exp(h).sum(-1)  # the line the check must name

    x = torch.randn(4, 6)
    compiled = torchsmith.compile(f, options=check_options(fresh_cache))
    with pytest.warns(AccuracyWarning) as caught:
        out = compiled(x)
    torch.testing.assert_close(out, f(x))
    message = str(caught[0].message)
    assert "stage inductor disagrees with stage prims" in message
    line = f.__code__.co_firstlineno + 2
    assert f"= prims.exp (from {__file__}:{line})" in message
    assert "max error: 1 " in message  # exp - expm1
    folder = only_folder(fresh_cache)
    manifest = json.loads((folder / "manifest.json").read_text())
    assert (manifest["stage"], manifest["role"], manifest["op"]) == ("inductor", "inference", "prims.exp")
    assert replay(folder)["node"] is not None
    monkeypatch.undo()
    assert replay(folder) == {"stage": "inductor", "node": None, "graph": None}


def test_wrong_lowering_used_only_by_the_backward(fresh_cache, monkeypatch):
    from torchsmith.inductor.lowering.lower import LOWERINGS

    # tanh's gradient is grad * (1 - y * y): the forward has no prims.sub, the backward does
    monkeypatch.setitem(LOWERINGS, "prims.sub", _wrong_unary("prims.sub", "prims.add"))

    def f(x):
        return torch.tanh(x) * 2

    x = torch.randn(5, 3, requires_grad=True)
    compiled = torchsmith.compile(f, options=check_options(fresh_cache))
    with pytest.warns(AccuracyWarning) as caught:
        out = compiled(x)
    message = str(caught[0].message)
    assert "stage inductor" in message and "backward graph" in message and "prims.sub" in message
    out.sum().backward()
    reference = x.detach().clone().requires_grad_(True)
    f(reference).sum().backward()
    torch.testing.assert_close(x.grad, reference.grad)
    manifest = json.loads((only_folder(fresh_cache) / "manifest.json").read_text())
    assert manifest["role"] == "backward"


# ---- autograd_aot and capture: wrong graphs ----------------------------------------------------


def test_wrong_aten_graph_names_autograd_aot_and_the_torch_node(fresh_cache, monkeypatch):
    import torchsmith.autograd_aot.pipeline as pipeline

    right = pipeline.functionalize

    def functionalize_with_a_bug(graph, num_outputs):
        graph, mutated = right(graph, num_outputs)
        nodes = tuple(
            n.replace(op="aten.sub.Tensor") if n.op == "aten.mul.Tensor" else n for n in graph.nodes
        )
        return graph.replace(nodes=nodes), mutated

    monkeypatch.setattr(pipeline, "functionalize", functionalize_with_a_bug)

    def f(x, y):
        a = x.sin()
        return a * y  # the line the check must name

    x, y = torch.randn(3), torch.randn(3)
    compiled = torchsmith.compile(f, backend="aot_eager", options=check_options(fresh_cache))
    with pytest.warns(AccuracyWarning) as caught:
        out = compiled(x, y)
    torch.testing.assert_close(out, f(x, y))
    message = str(caught[0].message)
    assert "stage autograd_aot disagrees with stage capture" in message
    assert f"from {__file__}:{f.__code__.co_firstlineno + 2}" in message
    folder = only_folder(fresh_cache)
    assert replay(folder)["node"] is not None
    monkeypatch.undo()
    assert replay(folder)["node"] is None


def test_wrong_captured_graph_names_capture(fresh_cache, monkeypatch):
    from torchsmith.fallback import GuardedBackend

    right = GuardedBackend.__call__

    def capture_with_a_bug(self, graph, example_inputs):
        nodes = tuple(n.replace(op="torch.cos") if n.op == "torch.sin" else n for n in graph.nodes)
        return right(self, graph.replace(nodes=nodes), example_inputs)

    monkeypatch.setattr(GuardedBackend, "__call__", capture_with_a_bug)

    def f(x):
        return torch.sin(x) + 1

    x = torch.randn(4)
    compiled = torchsmith.compile(f, options=check_options(fresh_cache))
    with pytest.warns(AccuracyWarning) as caught:
        out = compiled(x)
    torch.testing.assert_close(out, f(x))
    message = str(caught[0].message)
    assert (
        "stage capture disagrees with the eager program test_wrong_captured_graph_names_capture.<locals>.f:"
        in message
    )
    assert "runs eagerly from now on" in message
    with warnings.catch_warnings():
        warnings.simplefilter("error", AccuracyWarning)
        torch.testing.assert_close(compiled(x * 2), f(x * 2))
    folder = only_folder(fresh_cache)
    assert json.loads((folder / "manifest.json").read_text())["stage"] == "capture"
    assert replay(folder)["graph"] is not None


def test_wrong_custom_backend_is_named(tmp_path):
    eager = torchsmith.lookup_backend("eager")

    def off_by_one(graph, example_inputs):
        run = eager(graph, example_inputs)
        return lambda *args: [o + 1 for o in run(*args)]

    compiled = torchsmith.compile(lambda x: x * 2, backend=off_by_one, options=check_options(tmp_path))
    x = torch.randn(3)
    with pytest.warns(AccuracyWarning, match="stage backend 'off_by_one' disagrees with stage capture"):
        out = compiled(x)
    torch.testing.assert_close(out, x * 2)
