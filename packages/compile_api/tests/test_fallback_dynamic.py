"""Compiler errors at a new size (issue 17): a SymbolicError raised while a compiled graph runs,
under a built-in backend or a custom one returning the AOT runtime, falls back to eager with one
warning naming the stage, never reaching the user (unless they asked for errors)."""

import warnings

import pytest
import torch

import torchsmith
from torchsmith.autograd_aot import aot_compile
from torchsmith.autograd_aot.runtime import python_compiler
from torchsmith.ir.errors import SymbolicError


def _forward_failing_at_other_sizes(graph, example_inputs):
    """A forward compiler whose code cannot evaluate a size other than the example's (as a wrongly
    fitted symbolic size would)."""
    shapes = [tuple(x.shape) for x in example_inputs if isinstance(x, torch.Tensor)]
    run = python_compiler(graph, example_inputs)

    def forward(*args):
        if [tuple(a.shape) for a in args if isinstance(a, torch.Tensor)] != shapes:
            raise SymbolicError("cannot evaluate s0 // 5 - 1: no value for s0")
        return run(*args)

    return forward


def _custom_aot_backend(graph, example_inputs):
    return aot_compile(graph, example_inputs, _forward_failing_at_other_sizes)


def f(x):
    return (x * 2).sum(0) + 1


def _calls():
    return [torch.randn(n, 4) for n in (3, 5, 7)]


def test_symbolic_error_at_run_time_of_a_custom_aot_backend_falls_back_with_one_warning():
    compiled = torchsmith.compile(f, backend=_custom_aot_backend, dynamic=True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for x in _calls():
            torch.testing.assert_close(compiled(x), f(x))
    messages = [str(w.message) for w in caught if issubclass(w.category, torchsmith.FallbackWarning)]
    assert len(messages) == 1, messages
    assert "SymbolicError" in messages[0] and "no value for s0" in messages[0]


def test_symbolic_error_at_run_time_raises_under_fallback_raise():
    compiled = torchsmith.compile(f, backend=_custom_aot_backend, dynamic=True, options={"fallback": "raise"})
    compiled(torch.randn(3, 4))
    with pytest.raises(torchsmith.StageError, match="SymbolicError"):
        compiled(torch.randn(5, 4))


def test_a_failed_run_leaves_mutated_inputs_as_eager_leaves_them():
    def g(x, buf):
        buf.add_(1)
        return x * buf.sum()

    compiled = torchsmith.compile(g, backend=_custom_aot_backend, dynamic=True)
    for n in (3, 5):
        x, buf = torch.randn(n, 2), torch.zeros(4)
        x_e, buf_e = x.clone(), buf.clone()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", torchsmith.FallbackWarning)
            out = compiled(x, buf)
        torch.testing.assert_close(out, g(x_e, buf_e))
        torch.testing.assert_close(buf, buf_e)  # written once, by the eager re-run


def test_a_custom_backend_returning_its_own_callable_keeps_its_errors():
    def backend(graph, example_inputs):
        compiled = _custom_aot_backend(graph, example_inputs)
        return lambda *args: compiled(*args)  # not the AOT runtime itself: it may have mutated inputs

    compiled = torchsmith.compile(f, backend=backend, dynamic=True)
    compiled(torch.randn(3, 4))
    with pytest.raises(SymbolicError):
        compiled(torch.randn(5, 4))


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_wrapping_a_registered_backend_runs_every_length(backend):
    inner = torchsmith.lookup_backend(backend)

    def wrapped(graph, example_inputs):
        return inner(graph, example_inputs)

    def h(a, b):
        return torch.cat([a, b]) * 2

    compiled = torchsmith.compile(h, backend=wrapped)
    with warnings.catch_warnings():
        warnings.simplefilter("error", torchsmith.FallbackWarning)
        for n in (2, 3, 5, 7):
            a, b = torch.randn(n), torch.randn(n + 1)
            torch.testing.assert_close(compiled(a, b), h(a, b))
