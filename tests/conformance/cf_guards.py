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


@program(G, graphs=2)
def global_value_change_recompiles():
    def f(x):
        return x * FACTOR

    def change():
        global FACTOR
        FACTOR = 5.0

    global FACTOR
    FACTOR = 2.0
    return f, [(T(2),), change, (T(2),)]


FACTOR = 2.0


@program(G, graphs=2)
def module_train_eval_switch_recompiles():
    class Net(torch.nn.Module):
        def forward(self, x):
            return x * 2 if self.training else x - 1

    m = Net()
    return m, [(T(2),), m.eval, (T(2),), m.eval, (T(2),)]


@program(G, graphs=2)
def module_list_append_recompiles():
    class Stack(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = torch.nn.ModuleList([torch.nn.Linear(2, 2)])

        def forward(self, x):
            for layer in self.layers:
                x = layer(x)
            return x

    m = Stack()
    return m, [(T(2),), lambda: m.layers.append(torch.nn.Linear(2, 2)), (T(2),)]


@program(G, graphs=2)
def object_attribute_mutated_between_calls():
    class Cfg:
        scale = 1.0

    cfg = Cfg()

    def f(x):
        return x * cfg.scale

    def change():
        cfg.scale = 3.0
    return f, [(T(2),), change, (T(2),)]


@program(G, graphs=2)
def closure_variable_rebound_between_calls():
    k = 1.0

    def f(x):
        return x * k

    def change():
        nonlocal k
        k = 4.0
    return f, [(T(2),), change, (T(2),)]


@program(G, graphs=2)
def set_contents_are_guarded():
    allowed = {"a"}

    def f(x, name):
        return x * 2 if name in allowed else x * 3

    return f, [(T(2), "b"), lambda: allowed.add("b"), (T(2), "b")]


@program(G, graphs=2)
def hook_added_between_calls_recompiles():
    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(2, 2)

        def forward(self, x):
            return self.fc(x)

    m = Net()
    return m, [(T(2),), lambda: m.fc.register_forward_hook(lambda mod, a, out: out * 10), (T(2),)]


@program(G, graphs=3)
def input_dtype_and_device_flip():
    def f(x):
        return x * 2
    return f, [(T(2),), (T(2).double(),), (torch.arange(2),), (T(2),)]


@program(G, graphs=2)  # the third lambda has other code: it recompiles
def fresh_lambda_each_call_reuses_the_graph():
    def f(x, fn):
        return fn(x) * 2

    def make_fn(k):
        return lambda t: t + k

    return f, [(T(2), make_fn(1)), (T(2), make_fn(1)), (T(2), (lambda t: t + 1))]


@program(G, graphs=2)
def closure_value_change_recompiles_even_with_same_code():
    def f(x, fn):
        return fn(x)

    def make_fn(k):
        return lambda t: t * k

    return f, [(T(2), make_fn(2)), (T(2), make_fn(3)), (T(2), make_fn(2))]


@program(G, graphs=1)
def string_argument_methods_do_not_recompile():
    def f(x, name):
        return x * len(name.upper().strip())
    return f, [(T(2), " ab "), (T(2), " ab "), (T(2), " ab ")]


@program(G, graphs=2)
def string_argument_change_recompiles():
    def f(x, name):
        return x * 2 if name.startswith("a") else x * 3
    return f, [(T(2), "ab"), (T(2), "ba"), (T(2), "ab")]
