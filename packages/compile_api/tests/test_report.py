"""The HTML compile report (torchsmith.report): content from captures and compile events."""

import html
import shutil
import subprocess
import warnings

import pytest
import torch

import torchsmith
from torchsmith import report
from torchsmith.ir import events


@pytest.fixture(autouse=True)
def fresh_reports():
    report.forget_all()
    yield
    report.forget_all()


def breaking(x, y):
    a = x.sin() + y
    print("<side effect & 'quotes'>")
    return a.cos() * 2


def staged_backend(graph, example_inputs):
    """Stands in for a backend whose stages emit events (independent of which stages emit today)."""
    events.emit("autograd_aot", "graph", name="inference", graph=graph)
    events.emit("prims", "graph", name="inference", graph=graph)
    events.emit("inductor", "loops", name=graph.name, program="loop i0 in 0..3: buf0[i0] = <sin>(x[i0])")
    events.emit("inductor", "fusion", name=graph.name, decisions=["fused sin+add: same ranges"])
    events.emit("inductor", "code", name=graph.name, language="c++",
                source="void kernel(float* a) { a[0] < 1; }")
    events.emit("inductor", "time", step="build", seconds=0.125)
    return torchsmith.lookup_backend("eager")(graph, example_inputs)


def compiled_with_report(fn, directory, backend):
    return report.attach(torchsmith.compile(fn, backend=backend), directory, fn=fn, backend=backend)


def test_page_shows_source_breaks_graphs_guards_and_stage_outputs(tmp_path):
    f = compiled_with_report(breaking, tmp_path, staged_backend)
    x, y = torch.randn(3), torch.randn(3)
    torch.testing.assert_close(f(x, y), breaking(x, y))  # observing changes nothing
    text = report.explain_text(report.report_of(f))
    assert "prims graph inference: 2 nodes" in text and "c++ source for breaking: 1 lines" in text
    page = (tmp_path / "breaking.html").read_text()
    assert page.startswith("<!DOCTYPE html>") and "<script" not in page and "http" not in page
    # the source, with the break line marked and its reason; escaped
    assert '<tr class="break">' in page
    assert html.escape("print(\"<side effect & 'quotes'>\")", quote=True) in page
    assert "<side effect" not in page
    assert "graph break: print()" in page
    # both captured graphs (before and after the break) in text form, and their guards
    assert "torch.Tensor.sin(%x)" in page and "torch.Tensor.cos(%a)" in page
    assert "___tensor_spec(L[&#x27;x&#x27;])" in page
    # every stage's output as the backend's stages reported it
    for heading in ("ATen graph: inference", "prims graph: inference", "Loop IR: breaking",
                    "Fusion decisions: breaking", "Generated c++ code: breaking"):
        assert heading in page
    assert "fused sin+add: same ranges" in page
    assert "a[0] &lt; 1;" in page and "&lt;sin&gt;" in page
    assert "inductor/build" in page and "250.0 ms" in page  # 125 ms for each of the two graphs
    assert "2 graphs" in page and "1 graph break" in page
    index = (tmp_path / "index.html").read_text()
    assert 'href="breaking.html"' in index


def test_aot_eager_page_and_lazily_compiled_backward(tmp_path):
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Tanh())
    compiled = compiled_with_report(model, tmp_path, "aot_eager")
    assert isinstance(compiled, torch.nn.Module)  # attach returns the compiled module itself
    compiled(torch.randn(2, 4)).sum().backward()
    events.emit("inductor", "code", name="backward", language="c++", source="// late kernel")
    report.flush()  # events after the call land on the function that ran last
    page = (tmp_path / "Sequential.html").read_text()
    assert "torch.nn.functional.linear" in page and "torch.tanh" in page
    assert "Compiled later" in page and "// late kernel" in page
    assert "0 graph breaks" in page


def test_one_page_per_compiled_function_and_explain_text(tmp_path):
    def g(x):
        return x * 3

    first = compiled_with_report(g, tmp_path, "eager")
    second = compiled_with_report(g, tmp_path, "eager")
    first(torch.ones(2))
    second(torch.ones(2))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["g.html", "g_2.html", "index.html"]
    assert report.report_of(first) is report.reports()[0] and report.report_of(lambda: 0) is None
    text = report.explain_text(report.reports()[0])
    assert "Graph count: 1" in text and "Graph break count: 0" in text
    assert "torch.Tensor.__mul__(%x, 3)" in text and "guards (" in text


def test_attach_from_environment_only_when_set(tmp_path, monkeypatch):
    compiled = torchsmith.compile(lambda x: x + 1, backend="eager")
    monkeypatch.delenv(report.ENV_VAR, raising=False)
    assert report.attach_from_environment(compiled) is compiled and report.reports() == []
    monkeypatch.setenv(report.ENV_VAR, str(tmp_path))
    assert report.attach_from_environment(compiled) is compiled
    compiled(torch.zeros(1))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["index.html", "lambda.html"]


def test_attach_rejects_what_compile_did_not_return():
    with pytest.raises(TypeError, match="torchsmith.compile"):
        report.attach(lambda x: x, None)


@pytest.mark.skipif(shutil.which("chromium") is None, reason="needs headless chromium")
def test_page_renders_in_headless_chromium(tmp_path):
    f = compiled_with_report(breaking, tmp_path, staged_backend)
    f(torch.randn(3), torch.randn(3))
    shot = tmp_path / "shot.png"
    subprocess.run(
        ["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--window-size=1200,900",
         f"--screenshot={shot}", (tmp_path / "breaking.html").as_uri()],
        check=True, capture_output=True, timeout=120,
    )
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 10_000


def test_a_backends_warning_is_shown_on_the_page_and_still_reaches_the_user(tmp_path):
    def warning_backend(graph, example_inputs):
        warnings.warn("stage inductor fell back to eager <here>", UserWarning, stacklevel=1)
        return torchsmith.lookup_backend("eager")(graph, example_inputs)

    f = compiled_with_report(lambda x: x.exp(), tmp_path, warning_backend)
    with pytest.warns(UserWarning, match="fell back"):
        f(torch.zeros(2))
    page = (tmp_path / "lambda.html").read_text()
    assert '<pre class="error">stage inductor fell back to eager &lt;here&gt;</pre>' in page


def test_torchsmith_report_variable_makes_compile_write_pages(tmp_path, monkeypatch):
    monkeypatch.setenv(report.ENV_VAR, str(tmp_path))

    def scaled(x):
        return x * 2 + 1

    compiled = torchsmith.compile(scaled, backend="eager")
    torch.testing.assert_close(compiled(torch.ones(3)), torch.full((3,), 3.0))
    page = (tmp_path / "scaled.html").read_text()
    assert "torch.Tensor.__mul__(%x, 2)" in page and "backend eager" in page
