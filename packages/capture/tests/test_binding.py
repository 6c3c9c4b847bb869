"""Arguments bind by the code object, as CPython binds them, never by `__signature__`."""

import inspect

import pytest
import torch

from torchsmith.capture.binding import bind_to_code


def _signature(*names):
    kind = inspect.Parameter.POSITIONAL_OR_KEYWORD
    return inspect.Signature([inspect.Parameter(n, kind) for n in names])


def test_a_signature_that_differs_from_the_code_is_ignored(compile_with, backend):
    def f(*args, **kwargs):
        return torch.add(*args, **kwargs) * 2

    f.__signature__ = _signature("x", "y")
    x = torch.randn(3)
    torch.testing.assert_close(compile_with(f)(x, x), f(x, x))
    torch.testing.assert_close(compile_with(f)(x, other=x), f(x, other=x))
    assert len(backend.graphs) == 2


def test_wrapped_forward_with_star_args_keeps_its_keywords(compile_with, backend):
    def inner(q, k, cos=None, sin=None):
        return q * cos + k * sin

    def wrapper(*args, **kwargs):
        return inner(*args, **kwargs)

    wrapper.__signature__ = inspect.signature(inner)
    q, k, c, s = (torch.randn(4) for _ in range(4))
    out = compile_with(wrapper)(q, k, cos=c, sin=s)
    torch.testing.assert_close(out, inner(q, k, cos=c, sin=s))
    assert len(backend.graphs) == 1


def test_binding_follows_cpython():
    def f(a, /, b, *rest, c, d=4, **extra):
        pass

    bound = bind_to_code(f, (1, 2, 3), {"c": 5, "a": 6})
    assert list(bound.items()) == [
        ("a", 1),
        ("b", 2),
        ("rest", (3,)),
        ("c", 5),
        ("d", 4),
        ("extra", {"a": 6}),
    ]
    expected = inspect.signature(f).bind(1, 2, 3, c=5, a=6)
    expected.apply_defaults()
    assert list(bound.items()) == list(expected.arguments.items())


@pytest.mark.parametrize(
    "args, kwargs, message",
    [
        ((1, 2, 3), {}, "takes 2 positional arguments but 3 were given"),
        ((1,), {}, "missing required arguments: 'b'"),
        ((1, 2), {"b": 3}, "multiple values for argument 'b'"),
        ((1, 2), {"z": 3}, "unexpected keyword argument 'z'"),
        ((), {"a": 1, "b": 2}, "positional-only"),
    ],
)
def test_bad_calls_raise_the_type_error_cpython_raises(args, kwargs, message):
    def g(a, /, b):
        pass

    with pytest.raises(TypeError, match=message):
        bind_to_code(g, args, kwargs)
    with pytest.raises(TypeError):
        g(*args, **kwargs)


def test_compiled_call_with_bad_arguments_raises_type_error(compile_with):
    def g(x, y):
        return x + y

    g.__signature__ = _signature("x", "y", "z")
    with pytest.raises(TypeError, match="takes 2 positional arguments"):
        compile_with(g)(torch.ones(1), torch.ones(1), torch.ones(1))


def test_binding_matches_inspect_on_many_signatures_and_calls():
    def plain(a, b=2):
        pass

    def star(self, *args, **kwargs):
        pass

    def mixed(a, /, b, c=3, *rest, d, e=5, **extra):
        pass

    def keyword_only(a, *, b, c=3):
        pass

    def defaults(a=1, b=2, c=3):
        pass

    calls = [((), {}), ((1,), {}), ((1, 2), {}), ((1, 2, 3), {}), ((1, 2, 3, 4), {}), ((1,), {"b": 7}),
             ((1,), {"d": 4}), ((1, 2), {"d": 4, "z": 9}), ((), {"a": 1, "b": 2, "d": 4}), ((1,), {"c": 8}),
             ((1, 2, 3, 4, 5), {"d": 0, "e": 1, "f": 2}), ((1,), {"b": 2, "c": 3}), ((), {"c": 1})]
    for fn in (plain, star, mixed, keyword_only, defaults):
        for args, kwargs in calls:
            # The call itself says whether it binds: inspect.Signature.bind of Python 3.13.0 binds a
            # positional-only name passed by keyword into **kwargs and leaves the parameter unset.
            try:
                fn(*args, **kwargs)
            except TypeError:
                with pytest.raises(TypeError):
                    bind_to_code(fn, args, kwargs)
                continue
            expected = inspect.signature(fn).bind(*args, **kwargs)
            expected.apply_defaults()
            got = bind_to_code(fn, args, kwargs)
            assert list(got.items()) == list(expected.arguments.items()), (fn.__name__, args, kwargs)
