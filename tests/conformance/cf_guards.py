"""Guards and recompiles: a changed input recompiles (never a stale result), an unchanged one does not."""

import torch
from cf_harness import program

T = lambda *shape: torch.randn(*shape)
G = "guards"


@program(G, graphs=1)
def same_shapes_reuse_the_graph():
    def f(x):
        return x * 2

    return f, [(T(3),), (T(3),), (T(3),)]


@program(G, graphs=2)
def new_shape_recompiles():
    def f(x):
        return x.sum(0) * x.shape[0]

    return f, [(T(3, 2),), (T(5, 2),), (T(3, 2),)]


@program(G, graphs=2)
def new_dtype_recompiles():
    def f(x):
        return x + 1

    return f, [(T(3),), (torch.arange(3),)]


@program(G, graphs=2)
def python_int_constant_is_guarded():
    def f(x, n):
        return x * n

    return f, [(T(2), 2), (T(2), 3), (T(2), 2)]


@program(G, graphs=2)
def python_bool_flag_is_guarded():
    def f(x, flag):
        return x + 1 if flag else x - 1

    return f, [(T(2), True), (T(2), False)]


@program(G, graphs=2)
def list_length_is_guarded():
    def f(xs):
        return sum(xs)

    return f, [([T(2), T(2)],), ([T(2), T(2), T(2)],)]


@program(G, graphs=2)
def requires_grad_is_guarded():
    def f(x):
        return x * 3

    return f, [(T(2),), (torch.randn(2, requires_grad=True),)]


@program(G, graphs=2)
def object_attribute_change_recompiles():
    class Cfg:
        def __init__(self, k):
            self.k = k

    def f(x, cfg):
        return x * cfg.k

    return f, [(T(2), Cfg(2)), (T(2), Cfg(3)), (T(2), Cfg(2))]


@program(G, graphs=2)
def dict_keys_are_guarded():
    def f(d):
        return sum(v * len(k) for k, v in d.items())

    return f, [({"a": T(2)},), ({"a": T(2), "bb": T(2)},)]


@program(G, graphs=1)
def dict_values_of_same_kind_reuse():
    def f(d):
        return d["x"] + d["y"]

    return f, [({"x": T(2), "y": T(2)},), ({"x": T(2), "y": T(2)},)]


@program(G, graphs=2)
def strided_input_recompiles():
    def f(x):
        return x + 1

    base = T(4, 4)
    return f, [(base,), (base.t(),)]


@program(G, graphs=2)
def aliased_inputs_are_guarded():
    def f(a, b):
        a.add_(1)
        return a + b

    x = T(3)
    return f, [(T(3), T(3)), (x, x)]
