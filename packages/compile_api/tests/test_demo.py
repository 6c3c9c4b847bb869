"""The demo (`python -m torchsmith.demo`, `nox -s demo`) on a smaller TinyGPT, and its fallbacks."""

import io

import pytest
import torch

import torchsmith
from torchsmith import report
from torchsmith.demo import Progress, run_demo
from torchsmith.demo_model import GPTConfig, make_model

SMALL = GPTConfig(vocab=64, context=16, width=32, heads=2, layers=1)


@pytest.fixture(autouse=True)
def fresh_reports():
    report.forget_all()
    yield
    report.forget_all()


def run(backend, **kwargs):
    lines = []
    # no "inductor" among the fallbacks: C++ builds stay out of this package's tests
    ok = run_demo(backend, out=lines.append, repeats=2, config=SMALL, fallbacks=("aot_eager",), **kwargs)
    return ok, "\n".join(lines)


def test_demo_compiles_and_prints_times_graphs_and_breaks(tmp_path):
    ok, text = run("aot_eager", report_dir=tmp_path)
    assert ok
    assert "TinyGPT, 1 layers, width 32" in text
    assert "graphs captured: 1, graph breaks: 0" in text
    assert "captured graph TinyGPT.forward" in text and "torch.nn.functional.embedding" in text
    assert "inputs in all, weights included" in text and "# demo_model.py:" in text
    assert "backend 'aot_eager': logits match eager" in text
    assert "eager " in text and "compiled " in text and "ms per call" in text
    assert "compile time per stage" in text and "generated kernel sources:" in text
    assert (tmp_path / "TinyGPT.html").exists()


def test_demo_reports_a_failing_backend_and_moves_on():
    def broken_demo_backend(graph, example_inputs):
        raise RuntimeError("this backend always fails")

    if "broken_demo_backend" not in torchsmith.list_backends():
        torchsmith.register_backend(broken_demo_backend)
    ok, text = run("broken_demo_backend")
    assert ok
    assert "this backend always fails" in text  # what happened is printed, not raised
    assert "trying the next backend" in text
    assert "logits match eager" in text


def test_tiny_gpt_is_a_causal_language_model():
    model = make_model(config=SMALL)
    tokens = torch.randint(0, SMALL.vocab, (2, SMALL.context))
    with torch.no_grad():
        logits = model(tokens)
        changed = tokens.clone()
        changed[:, -1] = (changed[:, -1] + 1) % SMALL.vocab
        # a later token must not change earlier positions' logits (the mask works)
        torch.testing.assert_close(model(changed)[:, :-1], logits[:, :-1])
    assert logits.shape == (2, SMALL.context, SMALL.vocab)


def test_progress_line_to_a_log_file():
    stream = io.StringIO()
    with Progress("compiling", stream=stream):
        pass
    assert "compiling done" in stream.getvalue() and "stage capture" in stream.getvalue()


def test_the_kernel_shown_skips_the_prelude():
    from torchsmith.demo import _first_kernel

    source = '#include <cmath>\nint helper();\nextern "C" void kernel0_add(float* out) {\n}\n'
    assert _first_kernel(source).startswith('extern "C" void kernel0_add(')
    assert _first_kernel("no kernels here") == "no kernels here"


def test_an_unknown_backend_is_reported_not_raised():
    ok, text = run("no_such_backend_for_the_demo")
    assert ok and "unknown backend 'no_such_backend_for_the_demo'" in text
