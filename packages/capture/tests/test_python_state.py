"""id(), ContextVar and functools.lru_cache functions inside captured code."""

import contextvars
import functools

import torch

_VAR = contextvars.ContextVar("test_var", default=None)


def test_id_of_a_guarded_module_is_a_constant(compile_with, backend):
    layer = torch.nn.Linear(3, 3)
    table = {id(layer): 2.0}

    def f(x):
        return layer(x) * table[id(layer)]

    x = torch.randn(2, 3)
    torch.testing.assert_close(compile_with(f)(x), f(x))
    assert len(backend.graphs) == 1


def test_id_of_a_tensor_is_a_graph_break(compile_with, backend):
    def f(x):
        y = x + 1
        return y * (id(y) != 0)

    x = torch.randn(3)
    compiled = compile_with(f)
    torch.testing.assert_close(compiled(x), f(x))
    reasons = [str(r.break_reason) for r in compiled.session.records if r.break_reason]
    assert any("id()" in r for r in reasons), reasons


def test_context_var_set_reset_is_shadowed_and_leaves_no_trace(compile_with, backend):
    def inner(x):
        scale = _VAR.get()
        return x * scale["k"]

    def f(x):
        token = _VAR.set({"k": 3.0})
        try:
            return inner(x)
        finally:
            _VAR.reset(token)

    x = torch.randn(3)
    compiled = compile_with(f)
    torch.testing.assert_close(compiled(x), x * 3)
    torch.testing.assert_close(compiled(x), x * 3)
    assert _VAR.get() is None
    assert len(backend.graphs) == 1


def test_context_var_read_from_outside_is_guarded(compile_with, backend):
    def f(x):
        value = _VAR.get()
        return x + (0.0 if value is None else value)

    x = torch.randn(3)
    compiled = compile_with(f)
    torch.testing.assert_close(compiled(x), x)
    token = _VAR.set(2.0)
    try:
        torch.testing.assert_close(compiled(x), x + 2.0)
    finally:
        _VAR.reset(token)
    assert len(backend.graphs) == 2


def test_lru_cache_predicate_is_folded(compile_with, backend):
    calls = []

    @functools.lru_cache
    def available(name):
        calls.append(name)
        return name == "fast"

    def f(x):
        return x * 2 if available("fast") else x

    x = torch.randn(3)
    compiled = compile_with(f)
    torch.testing.assert_close(compiled(x), x * 2)
    torch.testing.assert_close(compiled(x), x * 2)
    assert calls == ["fast"] and len(backend.graphs) == 1
