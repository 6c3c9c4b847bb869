"""examples/custom_codegen: a third-party backend generating NumPy code from the prims IR.

Nothing is installed: the example's src/ goes on sys.path and the backend is registered by hand
under the name its pyproject.toml gives the entry point.
"""

import pathlib
import sys
import tomllib

import pytest
import torch

import torchsmith
from torchsmith.ir import GraphBuilder

EXAMPLE = pathlib.Path(__file__).resolve().parents[1] / "examples" / "custom_codegen"


@pytest.fixture(scope="module")
def numpy_codegen():
    sys.path.insert(0, str(EXAMPLE / "src"))
    try:
        import numpy_codegen
    finally:
        sys.path.remove(str(EXAMPLE / "src"))
    if "numpy_codegen" not in torchsmith.list_backends():
        torchsmith.register_backend(numpy_codegen.numpy_backend, name="numpy_codegen")
    return numpy_codegen


def compiled(fn):
    # fallback="raise": a failure in the example must fail the test, not quietly run eagerly
    return torchsmith.compile(fn, backend="numpy_codegen", options={"fallback": "raise"})


def test_pyproject_declares_the_backend_entry_point(numpy_codegen):
    project = tomllib.loads((EXAMPLE / "pyproject.toml").read_text())["project"]
    target = project["entry-points"]["torchsmith.backends"]["numpy_codegen"]
    module, _, attribute = target.partition(":")
    assert getattr(sys.modules[module], attribute) is numpy_codegen.numpy_backend
    assert (EXAMPLE / "README.md").exists()


def test_generated_numpy_matches_eager(numpy_codegen):
    def f(x, w, b):
        return torch.nn.functional.gelu(x @ w.T + b).softmax(-1).sum(0) - x.mean()

    x, w, b = torch.randn(4, 8), torch.randn(6, 8), torch.randn(6)
    torch.testing.assert_close(compiled(f)(x, w, b), f(x, w, b))
    source = numpy_codegen.LAST_SOURCES[-1]
    assert "np.matmul(" in source and "np.broadcast_to(" in source and "np.sum(" in source
    assert "TORCH[" not in source  # everything went through prims


def test_small_gpt_inference_matches_eager(numpy_codegen):
    from torchsmith.demo_model import GPTConfig, make_model

    model = make_model(config=GPTConfig(vocab=64, context=16, width=32, heads=2, layers=1))
    tokens = torch.randint(0, 64, (2, 16))
    with torch.no_grad():
        torch.testing.assert_close(compiled(model)(tokens), model(tokens), rtol=1e-4, atol=1e-5)


def test_backward_graph_is_generated_too(numpy_codegen):
    def loss(x, w):
        return torch.tanh(x @ w).pow(2).sum()

    x, w = torch.randn(3, 4), torch.randn(4, 5, requires_grad=True)
    compiled(loss)(x, w).backward()
    expected_w = w.detach().clone().requires_grad_()
    loss(x, expected_w).backward()
    torch.testing.assert_close(w.grad, expected_w.grad)


def test_symbolic_sizes_are_refused_clearly(numpy_codegen):
    b = GraphBuilder("dyn")
    x = b.input("x", "f32[s0, 4] cpu")
    y = b.op("prims.reshape", x, [b.op("aten.sym_size.int", x, 0, out_type="sym(s0)"), 4],
             out_type="f32[s0, 4] cpu")
    with pytest.raises(numpy_codegen.NumpyCodegenError, match="static shapes"):
        numpy_codegen.generate_numpy(b.build(y))


def test_report_example_explains_its_graph_breaks(tmp_path, capsys):
    from torchsmith.__main__ import main

    # backend="inductor" (the default) builds C++ into the session's tmp cache (tests/conftest.py)
    script = pathlib.Path(__file__).resolve().parents[1] / "examples" / "report" / "mlp_step.py"
    assert main(["report", str(script), "--out", str(tmp_path / "pages")]) == 0
    out = capsys.readouterr().out
    assert "activation scale" in out and "wrote" in out
    page = (tmp_path / "pages" / "mlp_step.html").read_text()
    assert "2 graph breaks" in page and "Tensor.item()" in page and "print()" in page
