"""Modules with keyword forward hooks (as FSDP2 registers them): the hooks run natively, as
`nn.Module.__call__` runs them, around the module's captured forward."""

import torch


class Inner(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x, scale=1.0):
        return self.lin(x).sin() * scale


class Outer(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = Inner()

    def forward(self, x):
        return self.inner(x).cos() + 1


def with_keyword_hooks(module: torch.nn.Module, calls: list) -> torch.nn.Module:
    def pre(m, args, kwargs):
        calls.append("pre")
        return (args[0] * 3,), {**kwargs, "scale": 2.0}

    def post(m, args, kwargs, output):
        calls.append(("post", kwargs["scale"]))
        return output - 1

    module.register_forward_pre_hook(pre, with_kwargs=True)
    module.register_forward_hook(post, with_kwargs=True)
    return module


def test_a_submodule_with_keyword_hooks_runs_them_around_its_captured_forward(compile_with, backend):
    torch.manual_seed(0)
    model = Outer()
    calls = []
    with_keyword_hooks(model.inner, calls)
    x = torch.randn(2, 4)
    expected = model(x)
    assert calls == ["pre", ("post", 2.0)]
    calls.clear()
    got = compile_with(model)(x)
    torch.testing.assert_close(got, expected)
    assert calls == ["pre", ("post", 2.0)]
    # the submodule's own forward was captured (its graph holds the sin), not run eagerly
    ops = [node.op for graph in backend.graphs for node in graph.nodes]
    assert "torch.Tensor.sin" in ops and "torch.Tensor.cos" in ops


def test_a_compiled_module_runs_its_own_keyword_hooks(compile_with):
    torch.manual_seed(0)
    model = Inner()
    calls = []
    with_keyword_hooks(model, calls)
    x = torch.randn(2, 4)
    expected = model(x)
    calls.clear()
    torch.testing.assert_close(compile_with(model)(x), expected)
    assert calls == ["pre", ("post", 2.0)]


def test_hooks_registered_after_calls_without_hooks_run_too(compile_with):
    torch.manual_seed(0)
    model = Inner()
    compiled = compile_with(model)
    x = torch.randn(2, 4)
    torch.testing.assert_close(compiled(x), model.lin(x).sin())  # no hooks yet: forward alone
    calls = []
    with_keyword_hooks(model, calls)
    torch.testing.assert_close(compiled(x), model.lin(x * 3).sin() * 2.0 - 1)
    assert calls == ["pre", ("post", 2.0)]
