"""The demo (`python -m torchsmith.ir.demo`) runs and reports that the interpreter matches eager PyTorch."""

import torch

from torchsmith.ir import demo, interpret, symbol


def test_demo_main_reports_a_match(capsys):
    assert demo.main() == 0
    printed = capsys.readouterr().out
    assert "graph mlp(%x: f32[s0, 64] cpu" in printed
    assert "FAIL" not in printed
    assert printed.count("  ok   ") == 6
    assert "all checks passed: the interpreter matches eager PyTorch" in printed


def test_demo_reports_a_mismatch(monkeypatch):
    # The check must be able to fail: a wrong eager reference makes the demo say so.
    wrong = lambda x, *weights: (torch.zeros(x.shape[0], demo.OUT), x.shape[0])
    monkeypatch.setattr(demo, "eager_mlp", wrong)
    lines = []
    assert demo.run_demo(out=lines.append) is False
    assert lines[-1].endswith("some checks FAILED")


def test_demo_graph_is_symbolic_in_the_batch():
    graph = demo.build_mlp()
    assert graph.outputs[0].type.shape == (symbol("s0"), demo.OUT)
    inputs = [torch.randn(3, demo.IN), torch.randn(demo.HIDDEN, demo.IN), torch.randn(demo.HIDDEN),
              torch.randn(demo.OUT, demo.HIDDEN), torch.randn(demo.OUT)]
    probabilities, rows = interpret(graph, *inputs, check_types=True)
    assert rows == 3
    torch.testing.assert_close(probabilities.sum(dim=1), torch.ones(3))
