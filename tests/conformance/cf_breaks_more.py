"""Constructs that broke graphs where torch.compile makes one (seen in transformers models):
`id()` of pinned objects, ContextVar set/get/reset, `functools.lru_cache` predicates, arguments
bound by the code rather than a `__signature__`."""

import contextvars
import functools
import inspect

import torch
from cf_harness import program

B = "breaks_more"
T = lambda *shape: torch.randn(*shape)

_ACTIVE = contextvars.ContextVar("cf_active", default=None)


@functools.lru_cache
def _feature_available() -> bool:
    return True


@program(B, graphs=1, breaks=0)
def lru_cached_predicate_folds():
    def f(x):
        if not _feature_available():
            return x
        return x * 2 + 1

    return f, [(T(3),), (T(3),)]


@program(B, graphs=1, breaks=0)
def id_of_a_module_keys_a_dict():
    layer = torch.nn.Linear(4, 4)
    scales = {id(layer): 3.0}

    def f(x):
        return layer(x) * scales[id(layer)]

    return f, [(T(2, 4),)]


@program(B, graphs=1, breaks=0)
def context_var_set_and_reset_around_a_call():
    table = {"scale": 2.0}

    def inner(x):
        active = _ACTIVE.get()
        return x * active.get("scale", 1.0) if active is not None else x

    def f(x):
        current = dict(_ACTIVE.get() or {})
        current.update(table)
        token = _ACTIVE.set(current)
        try:
            return inner(x) + 1
        finally:
            _ACTIVE.reset(token)

    return f, [(T(3),), (T(3),)]


@program(B, graphs=1, breaks=0)
def wrapper_whose_signature_differs_from_its_code():
    def rotate(q, k, cos=None, sin=None):
        return q * cos + k * sin

    def wrapper(*args, **kwargs):
        return rotate(*args, **kwargs)

    wrapper.__signature__ = inspect.signature(rotate)

    def f(q, k, c, s):
        return wrapper(q, k, cos=c, sin=s).relu()

    return f, [(T(4), T(4), T(4), T(4))]


@program(B, graphs=1, breaks=2)
def context_var_left_set_runs_eagerly_after_the_break():
    # the code after the print sets the variable and never resets it: code running natively
    # afterwards must see the value, so that part runs eagerly (a second, logged break)
    def f(x):
        y = x + 1
        print("a graph break", end="\r")
        _ACTIVE.set({"scale": 5.0})  # never reset: what runs natively after must see it
        value = _ACTIVE.get()["scale"]
        _ACTIVE.set(None)
        return y * value

    return f, [(T(3),)]
