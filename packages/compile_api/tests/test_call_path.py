"""The per-call path of torchsmith.compile: a graph of static sizes, behind capture's guards, runs its
one compiled program without the AOT runtime's signature lookup or the inductor's input checks, and
inputs of another layout, grad mode or size still recompile (or go symbolic) and give eager's results."""

import torch

import torchsmith


def _aot_functions(compiled):
    """The AOT runtime objects behind a compiled function's graphs."""
    out = []
    for cache in compiled._session.caches.values():
        for entry in cache.entries:
            graph_fn = entry.run.__globals__.get("__graph")
            inner = getattr(graph_fn, "compiled", graph_fn)
            if inner is not None and hasattr(inner, "assume_example_signature"):
                out.append(inner)
    return out


def f(x, w):
    return torch.relu(x @ w + 1.0).sum(-1)


def test_a_static_graph_runs_its_checked_program():
    compiled = torchsmith.compile(f)
    x, w = torch.randn(4, 8), torch.randn(8, 3)
    torch.testing.assert_close(compiled(x, w), f(x, w))
    (aot,) = _aot_functions(compiled)
    assert aot._checked is aot.last_program
    assert aot._checked.forward_fn.compiled._inputs_checked


def test_other_layouts_grad_modes_and_sizes_still_recompile_correctly():
    compiled = torchsmith.compile(f)
    x, w = torch.randn(4, 8), torch.randn(8, 3)
    torch.testing.assert_close(compiled(x, w), f(x, w))
    xt = torch.randn(8, 4).t()  # the same sizes, other strides: a guard fails, capture recompiles
    torch.testing.assert_close(compiled(xt, w), f(xt, w))
    wg = w.clone().requires_grad_()
    out = compiled(x, wg)  # requires_grad: a training program, not the checked inference one
    out.sum().backward()
    expected = w.clone().requires_grad_()
    f(x, expected).sum().backward()
    torch.testing.assert_close(wg.grad, expected.grad)
    x5 = torch.randn(5, 8)  # another size: symbolic from now on, checked per call
    torch.testing.assert_close(compiled(x5, w), f(x5, w))
    torch.testing.assert_close(compiled(x, w), f(x, w))


def _training_grads(fn, x, w):
    x, w = x.clone().requires_grad_(), w.clone().requires_grad_()
    out = fn(x, w)
    out.sum().backward()
    return out.detach(), x.grad, w.grad


def test_a_static_training_graph_skips_the_per_input_checks_of_its_forward_and_backward(monkeypatch):
    from torchsmith.inductor.runtime.wrapper import CompiledGraph

    compiled = torchsmith.compile(f)
    x, w = torch.randn(4, 8), torch.randn(8, 3)
    for a, b in zip(_training_grads(compiled, x, w), _training_grads(f, x, w)):
        torch.testing.assert_close(a, b)
    (aot,) = _aot_functions(compiled)
    assert aot._checked is aot.last_program and aot._checked.is_training
    binds = []
    real = CompiledGraph._bind
    monkeypatch.setattr(CompiledGraph, "_bind", lambda self, inputs: binds.append(self) or real(self, inputs))
    for a, b in zip(_training_grads(compiled, x, w), _training_grads(f, x, w)):
        torch.testing.assert_close(a, b)
    assert binds == []  # capture's guards checked the inputs; the backward gets what the forward saved
    # what the guards check still leads elsewhere: another layout, requires_grad, grad mode or dtype
    xt = torch.randn(8, 4).t()
    for a, b in zip(_training_grads(compiled, xt, w), _training_grads(f, xt, w)):
        torch.testing.assert_close(a, b)
    torch.testing.assert_close(compiled(x, w), f(x, w))  # no input requires grad: inference
    wg = w.clone().requires_grad_()
    with torch.no_grad():
        out = compiled(x, wg)
    assert not out.requires_grad
    torch.testing.assert_close(out, f(x, w))
    xd, wd = x.double(), w.double().requires_grad_()
    out = compiled(xd, wd)
    assert out.dtype == torch.float64
    out.sum().backward()
    expected = w.double().requires_grad_()
    f(xd, expected).sum().backward()
    torch.testing.assert_close(wd.grad, expected.grad)
