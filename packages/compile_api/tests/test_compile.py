"""torchsmith.compile, the backend registry, explain and reset."""

import pytest
import torch

import torchsmith


def counting():
    eager = torchsmith.lookup_backend("eager")

    def backend(graph, example_inputs):
        backend.graphs.append(graph)
        return eager(graph, example_inputs)

    backend.graphs = []
    return backend


def test_compile_function_with_eager_backend():
    f = torchsmith.compile(lambda x, y: torch.tanh(x) * y, backend="eager")
    x, y = torch.randn(3), torch.randn(3)
    torch.testing.assert_close(f(x, y), torch.tanh(x) * y)


def test_compile_as_decorator_with_options():
    backend = counting()

    @torchsmith.compile(backend=backend, fullgraph=True)
    def f(x):
        return x.relu() + 1

    torch.testing.assert_close(f(torch.tensor([-1.0, 2.0])), torch.tensor([1.0, 3.0]))
    assert len(backend.graphs) == 1 and isinstance(backend.graphs[0], torchsmith.ir.Graph)


def test_wrapping_a_looked_up_backend_counts_graphs():
    backend = counting()
    f = torchsmith.compile(lambda x: (print("break"), x + 1)[1], backend=backend)
    f(torch.ones(1))
    assert len(backend.graphs) == 1


def test_compiled_module_keeps_state_and_modes():
    model = torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.BatchNorm1d(3))
    compiled = torchsmith.compile(model, backend="eager")
    assert list(compiled.state_dict()) == list(model.state_dict())
    assert compiled[0] is model[0] and compiled.training
    compiled.eval()
    assert not model.training
    x = torch.randn(4, 3)
    torch.testing.assert_close(compiled(x), model(x))
    compiled.load_state_dict(model.state_dict())
    assert isinstance(compiled, torch.nn.Module)


def test_aot_eager_backend_runs_backward():
    w = torch.randn(3, requires_grad=True)
    f = torchsmith.compile(lambda x: (x * w).sin().sum(), backend="aot_eager")
    f(torch.randn(3)).backward()
    assert w.grad is not None and w.grad.shape == (3,)


def test_inductor_is_the_default_backend():
    import inspect

    assert inspect.signature(torchsmith.compile).parameters["backend"].default == "inductor"


def test_registry():
    assert {"eager", "aot_eager", "inductor"} <= set(torchsmith.list_backends())

    @torchsmith.register_backend(name="test_double_registered")
    def mine(graph, example_inputs):
        return torchsmith.lookup_backend("eager")(graph, example_inputs)

    assert torchsmith.lookup_backend("test_double_registered") is mine
    with pytest.raises(torchsmith.BackendError, match="already registered"):
        torchsmith.register_backend(mine, name="test_double_registered")
    with pytest.raises(torchsmith.BackendError, match="known backends"):
        torchsmith.lookup_backend("no_such_backend")


def test_mode_and_options_together_layer_options_over_the_mode():
    f = torchsmith.compile(lambda x: x + 1, backend="eager", mode="default", options={"fallback": "raise"})
    torch.testing.assert_close(f(torch.ones(1)), torch.full((1,), 2.0))


def test_disable_returns_the_model():
    fn = lambda x: x  # noqa: E731
    assert torchsmith.compile(fn, backend="eager", disable=True) is fn


def test_explain_reports_graphs_breaks_and_guards():
    def f(x):
        y = x * 2
        print("break here")
        return y.sum()

    out = torchsmith.explain(f)(torch.ones(3))
    assert out.graph_count == 2 and out.graph_break_count == 1
    (reason,) = out.break_reasons
    assert "print" in reason.reason and reason.filename == __file__
    assert reason.line == f.__code__.co_firstlineno + 2
    assert out.guards and out.ops_per_graph == [["torch.Tensor.__mul__"], ["torch.Tensor.sum"]]
    assert "Graph count: 2" in str(out)


def test_reset_forgets_captures():
    backend = counting()
    f = torchsmith.compile(lambda x: x + 1, backend=backend)
    f(torch.ones(1))
    torchsmith.reset()
    f(torch.ones(1))
    assert len(backend.graphs) == 2


def test_fullgraph_error_is_exported():
    f = torchsmith.compile(lambda x: print(x), backend="eager", fullgraph=True)
    with pytest.raises(torchsmith.FullGraphError, match="print"):
        f(torch.ones(1))


def test_disable_decorator_breaks_the_graph():
    calls = []

    @torchsmith.disable
    def opaque(x):
        calls.append(1)
        return x

    out = torchsmith.explain(lambda x: opaque(x + 1) * 2)(torch.ones(1))
    assert out.graph_break_count == 1 and calls == [1]


def test_allow_in_graph_records_one_node():
    def inner(t):
        return t.sin() * 2

    torchsmith.allow_in_graph(inner)
    backend = counting()
    f = torchsmith.compile(lambda x: inner(x) + 1, backend=backend)
    torch.testing.assert_close(f(torch.ones(2)), torch.ones(2).sin() * 2 + 1)
    ops = backend.graphs[0].ops()
    assert ops[0].startswith("allow_in_graph.") and ops[0].endswith("inner") and len(ops) == 2


def test_logs_artifacts(capsys):
    torchsmith.set_logs(["graph", "guards", "output_code", "graph_breaks", "recompiles"])
    try:
        torchsmith.compile(lambda x: x * 2, backend="eager")(torch.ones(1))
    finally:
        import logging

        for name in ("graph", "guards", "output_code", "graph_breaks", "recompiles"):
            logger = logging.getLogger(f"torchsmith.capture.{name}")
            logger.setLevel(logging.WARNING)
            logger.handlers.clear()
    err = capsys.readouterr().err
    assert "torch.Tensor.__mul__" in err and "def guard(L, G)" in err and "def run(L, G)" in err
    with pytest.raises(ValueError, match="unknown log artifact 'nope'; known: fallback, fusion, graph"):
        torchsmith.set_logs(["nope"])


def test_compile_decorates_a_forward_method_and_a_bound_method():
    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(2, 2)

        @torchsmith.compile(backend="eager")
        def forward(self, x):
            return self.fc(x).relu()

        def score(self, x):
            return self.fc(x).sum()

    net = Net()
    x = torch.randn(3, 2)
    torch.testing.assert_close(net(x), net.fc(x).relu())
    score = torchsmith.compile(net.score, backend="eager")
    torch.testing.assert_close(score(x), net.fc(x).sum())


def test_recompile_after_eval_switch_on_compiled_module():
    backend = counting()
    model = torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.Dropout(0.5))
    compiled = torchsmith.compile(model, backend=backend)
    compiled.eval()
    x = torch.randn(2, 3)
    torch.testing.assert_close(compiled(x), model(x))
    compiled.train()
    compiled(x)
    assert len(backend.graphs) == 2


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_training_step_gradients_match_eager(backend):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.GELU(), torch.nn.Linear(8, 1))
    reference = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.GELU(), torch.nn.Linear(8, 1))
    reference.load_state_dict(model.state_dict())
    compiled = torchsmith.compile(model, backend=backend)
    x = torch.randn(5, 4)
    compiled(x).pow(2).mean().backward()
    reference(x).pow(2).mean().backward()
    for p, q in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(p.grad, q.grad)
