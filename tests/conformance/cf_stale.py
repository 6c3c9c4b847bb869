"""Stale results: state a graph depends on changes between calls, and the next call must recompile.

Six kinds of state, each changed by a step in `calls`: class attributes (read through `type(self)`,
a class name, an instance or a base class), functions rebound in modules, globals and arguments,
global torch state (default dtype and device, deterministic algorithms), attributes added or removed
(`hasattr`, `getattr` with a default, `__dict__`), Python values run through the standard library,
and attribute names or keys holding quotes, brackets, newlines or Python code, which must reach the
generated guards as data, never as code.
"""

import math
import operator
import types

import torch
from cf_harness import program

T = lambda *shape: torch.randn(*shape)
S = "stale"

# ----------------------------------------------------------------- class attributes


@program(S, graphs=2)
def class_attribute_through_type_of_self():
    class Scaled(torch.nn.Module):
        scale = 2.0

        def forward(self, x):
            return x * type(self).scale

    def change():
        Scaled.scale = 3.0

    return Scaled(), [(T(2),), change, (T(2),), (T(2),)]


@program(S, graphs=2)
def class_attribute_through_the_class_name():
    class Cfg:
        k = 2.0

    def f(x):
        return x * Cfg.k

    def change():
        Cfg.k = -1.0

    return f, [(T(2),), change, (T(2),)]


@program(S, graphs=2)
def class_attribute_through_the_instance():
    class Scaled(torch.nn.Module):
        scale = 2.0

        def forward(self, x):
            return x * self.scale

    def change():
        Scaled.scale = 0.5

    return Scaled(), [(T(2),), change, (T(2),)]


@program(S, graphs=2)
def base_class_attribute_read_through_a_subclass():
    class Base:
        k = 1.0

    class Child(Base):
        pass

    obj = Child()

    def f(x):
        return x + type(obj).k

    def change():
        Base.k = 10.0

    return f, [(T(2),), change, (T(2),)]


@program(S, graphs=2)
def method_patched_on_the_class():
    class Net(torch.nn.Module):
        def act(self, x):
            return x.relu()

        def forward(self, x):
            return self.act(x) + 1

    def change():
        Net.act = lambda self, x: x.tanh()

    return Net(), [(T(3),), change, (T(3),)]


@program(S, graphs=2)
def staticmethod_replaced_on_the_class():
    class Cfg:
        @staticmethod
        def factor():
            return 2.0

    def f(x):
        return x * Cfg.factor()

    def change():
        Cfg.factor = staticmethod(lambda: 5.0)

    return f, [(T(2),), change, (T(2),)]


@program(S, graphs=2)
def class_attribute_shadowed_by_an_instance_attribute():
    class Scaled(torch.nn.Module):
        scale = 2.0

        def forward(self, x):
            return x * self.scale

    m = Scaled()

    def change():
        m.scale = 7.0

    return m, [(T(2),), change, (T(2),)]


@program(S, graphs=2)
def forward_patched_on_a_submodule_class():
    class Act(torch.nn.Module):
        def forward(self, x):
            return x.relu()

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.act = Act()

        def forward(self, x):
            return self.act(x) * 2

    def change():
        Act.forward = lambda self, x: x.sigmoid()

    return Net(), [(T(3),), change, (T(3),)]


@program(S, graphs=1)
def unchanged_class_attribute_reuses_the_graph():
    class Scaled(torch.nn.Module):
        scale = 2.0

        def forward(self, x):
            return x * type(self).scale

    return Scaled(), [(T(2),), (T(2),), (T(2),)]


# ----------------------------------------------------------------- functions rebound

ACT = torch.relu


def _set_act(fn):
    def step():
        global ACT
        ACT = fn

    return step


@program(S, graphs=3)
def global_function_rebound_between_calls():
    _set_act(torch.relu)()

    def f(x):
        return ACT(x) + 1

    calls = [(T(3),), _set_act(torch.sigmoid), (T(3),), _set_act(lambda t: t * 5), (T(3),)]
    return f, calls + [_set_act(torch.relu), (T(3),)]


@program(S, graphs=2)
def torch_functional_rebound_in_its_module():
    gelu = torch.nn.functional.gelu

    def f(x):
        return torch.nn.functional.gelu(x) * 2

    def patch():
        torch.nn.functional.gelu = torch.sigmoid

    def restore():
        torch.nn.functional.gelu = gelu

    restore()
    return f, [(T(3),), patch, (T(3),), restore, (T(3),)]


@program(S, graphs=2)
def torch_function_passed_as_an_argument():
    def f(x, act):
        return act(x) - 1

    return f, [(T(3), torch.relu), (T(3), torch.tanh), (T(3), torch.relu)]


@program(S, graphs=2)
def function_in_a_namespace_object_rebound():
    ops = types.SimpleNamespace(act=torch.relu)

    def f(x):
        return ops.act(x) * 3

    def change():
        ops.act = torch.tanh

    return f, [(T(3),), change, (T(3),)]


OP = torch.Tensor.add


def _set_op(fn):
    def step():
        global OP
        OP = fn

    return step


@program(S, graphs=2)
def global_tensor_method_descriptor_rebound():
    _set_op(torch.Tensor.add)()

    def f(x, y):
        return OP(x, y)

    return f, [(T(3), T(3)), _set_op(torch.Tensor.mul), (T(3), T(3)), _set_op(torch.Tensor.add)]


@program(S, graphs=2)
def default_argument_function_replaced():
    def f(x, act=torch.relu):
        return act(x)

    def change():
        f.__defaults__ = (torch.sigmoid,)

    return f, [(T(3),), change, (T(3),)]


# ----------------------------------------------------------------- global torch state


def _default_dtype(dtype):
    return lambda: torch.set_default_dtype(dtype)


@program(S, graphs=2)
def default_dtype_followed_by_ones():
    _default_dtype(torch.float32)()

    def f(x):
        return x.double() + torch.ones(2), torch.ones(2)

    calls = [(T(2),), _default_dtype(torch.float64), (T(2),), _default_dtype(torch.float32), (T(2),)]
    return f, calls


@program(S, graphs=2)
def default_dtype_followed_by_zeros_and_arange():
    _default_dtype(torch.float32)()

    def f(n):
        return torch.zeros(3) + torch.arange(0.0, 3.0) * n

    calls = [(2,), _default_dtype(torch.float64), (2,), _default_dtype(torch.float32)]
    return f, calls


@program(S, graphs=2)
def default_dtype_followed_by_tensor_of_floats():
    _default_dtype(torch.float32)()

    def f(x):
        return torch.tensor([1.5, 2.5]), x.sum()

    calls = [(T(2),), _default_dtype(torch.float64), (T(2),), _default_dtype(torch.float32)]
    return f, calls


@program(S, graphs=2)
def default_dtype_followed_by_full_and_dtype_test():
    _default_dtype(torch.float32)()

    def f(x):
        y = torch.full((2,), 0.25)
        return (y * 2 if y.dtype == torch.float64 else y - 1), x + 1

    calls = [(T(2),), _default_dtype(torch.float64), (T(2),), _default_dtype(torch.float32)]
    return f, calls


@program(S, graphs=2)
def deterministic_algorithms_flag_is_guarded():
    torch.use_deterministic_algorithms(False)

    def f(x):
        return (x * 2, torch.are_deterministic_algorithms_enabled())

    def on():
        torch.use_deterministic_algorithms(True)

    def off():
        torch.use_deterministic_algorithms(False)

    return f, [(T(2),), on, (T(2),), off, (T(2),)]


@program(S, graphs=2)
def default_device_set_between_calls():
    torch.set_default_device(None)

    def f(x):
        return x + torch.ones(2)

    def set_cpu():
        torch.set_default_device("cpu")

    def unset():
        torch.set_default_device(None)

    return f, [(T(2),), set_cpu, (T(2),), unset, (T(2),)]


@program(S, graphs=1)  # the call under autocast runs eagerly; the next one reuses the graph
def autocast_switched_on_between_calls():
    torch.set_autocast_enabled("cpu", False)

    def f(x, w):
        return (x @ w).relu(), torch.is_autocast_enabled("cpu")

    def on():
        torch.set_autocast_enabled("cpu", True)

    def off():
        torch.set_autocast_enabled("cpu", False)

    return f, [(T(4, 4), T(4, 4)), on, (T(4, 4), T(4, 4)), off, (T(4, 4), T(4, 4))]


# ----------------------------------------------------------------- attributes added or removed


class Bag:
    pass


@program(S, graphs=2)
def hasattr_sees_an_attribute_added_by_the_previous_call():
    bag = Bag()

    def f(x):
        if hasattr(bag, "k"):
            return x + bag.k
        bag.k = 5.0
        return x - 1

    f.state = bag
    return f, [(T(2),), (T(2),), (T(2),)]


@program(S, graphs=3)
def getattr_default_counter_grows_every_call():
    bag = Bag()

    def f(x):
        n = getattr(bag, "n", None)
        bag.n = 1 if n is None else n + 1
        return x * bag.n

    f.state = bag
    return f, [(T(2),), (T(2),), (T(2),)]


@program(S, graphs=2)
def attribute_deleted_between_calls():
    bag = Bag()
    bag.k = 2.0

    def f(x):
        return x * getattr(bag, "k", -1.0)

    def delete():
        del bag.k

    return f, [(T(2),), delete, (T(2),), (T(2),)]


@program(S, graphs=2)
def instance_dict_membership_after_setattr():
    bag = Bag()

    def f(x):
        if "k" in bag.__dict__:
            return x - bag.__dict__["k"]
        setattr(bag, "k", 3.0)  # noqa: B010 - the program checks capture's setattr() builtin, not STORE_ATTR
        return x * 4

    f.state = bag
    return f, [(T(2),), (T(2),), (T(2),)]


@program(S, graphs=2)
def hasattr_on_the_class_after_a_class_attribute_is_added():
    class Cfg:
        pass

    obj = Cfg()

    def f(x):
        return x * 2 if hasattr(type(obj), "double") else x + 2

    def change():
        Cfg.double = True

    return f, [(T(2),), change, (T(2),)]


@program(S, graphs=2)
def module_hasattr_cache_set_in_forward():
    class Net(torch.nn.Module):
        def forward(self, x):
            if hasattr(self, "offset"):
                return x + self.offset
            self.offset = 1.5
            return x * 3

    return Net(), [(T(2),), (T(2),), (T(2),)]


@program(S, graphs=2)
def getattr_default_on_a_class_gaining_the_attribute():
    class Cfg:
        pass

    def f(x):
        return x * getattr(Cfg, "k", 1.0)

    def change():
        Cfg.k = 4.0

    return f, [(T(2),), change, (T(2),)]


# ----------------------------------------------------------------- Python values through the stdlib

N = 4.0


def _set_n(value):
    def step():
        global N
        N = value

    return step


@program(S, graphs=2)
def math_functions_of_a_global():
    _set_n(4.0)()

    def f(x):
        return x * math.sqrt(N) + math.floor(N / 3) + math.log(N)

    return f, [(T(2),), _set_n(9.0), (T(2),)]


@program(S, graphs=2)
def operator_functions_of_arguments():
    def f(x, cfg):
        k = operator.getitem(cfg, "k")
        return x * operator.add(k, 1) + operator.neg(k)

    return f, [(T(2), {"k": 2}), (T(2), {"k": 3}), (T(2), {"k": 2})]


@program(S, graphs=2)
def len_and_sorted_of_dict_keys():
    def f(x, d):
        keys = sorted(d)
        return x * len(keys) + len("-".join(keys))

    return f, [(T(2), {"b": 1, "a": 2}), (T(2), {"b": 1, "a": 2}), (T(2), {"c": 1, "a": 2, "b": 0})]


@program(S, graphs=2)
def string_methods_of_an_argument():
    def f(x, name):
        tag = name.strip().lower().replace("-", "_")
        return x * 2 if tag.startswith("act_") and tag.endswith("up") else x * 3

    return f, [(T(2), " Act-Up "), (T(2), " Act-Up "), (T(2), "act-down")]


@program(S, graphs=2)
def isinstance_on_builtin_types_of_an_argument():
    def f(x, v):
        if isinstance(v, bool):
            return x
        if isinstance(v, (int, float)):
            return x * v
        return x - len(v)

    return f, [(T(2), 2), (T(2), 2), (T(2), "abc"), (T(2), 2)]


@program(S, graphs=2)
def str_format_and_hash_free_string_ops():
    def f(x, n):
        label = f"layer_{n:02d}".upper()
        return x + label.count("0") + int(label[-1])

    return f, [(T(2), 3), (T(2), 3), (T(2), 10)]


# ----------------------------------------------------------------- names that are not identifiers

HOSTILE = "a'] or __import__('cf_stale').INJECTED.append(1) or G['"
INJECTED: list = []


@program(S, graphs=1)
def hostile_attribute_name_is_data_not_code():
    INJECTED.clear()
    m = torch.nn.Module()
    setattr(m, HOSTILE, 2.0)

    def f(x):
        return x * getattr(m, HOSTILE)

    f.state = INJECTED
    return f, [(T(2),), (T(2),), (T(2),)]


@program(S, graphs=2)
def odd_attribute_names_are_guarded():
    names = ["w'q", "w q", "1w", "\u0175", "a\nb", "a\\", 'q"', "x]", "class"]
    m = torch.nn.Module()
    for i, name in enumerate(names):
        setattr(m, name, float(i))

    def f(x):
        return sum(x * getattr(m, name) for name in names)

    def change():
        setattr(m, "a\nb", 10.0)

    return f, [(T(2),), (T(2),), change, (T(2),)]


@program(S, graphs=2)
def hostile_dict_keys_in_an_argument():
    keys = [HOSTILE, "L['x']", "K1.x", "(___p0 := 1)", "\\'"]

    def f(x, d):
        return x + sum(d[k] for k in keys)

    def make_d(scale):
        return {k: float(i) * scale for i, k in enumerate(keys)}

    return f, [(T(2), make_d(1.0)), (T(2), make_d(1.0)), (T(2), make_d(2.0))]


@program(S, graphs=2)
def hostile_attribute_set_inside_the_compiled_function():
    INJECTED.clear()
    bag = Bag()

    def f(x):
        setattr(bag, HOSTILE, getattr(bag, HOSTILE, 0.0) + 1.0)
        setattr(bag, "w q", 1.0)
        return x * getattr(bag, HOSTILE)

    f.state = (bag, INJECTED)
    return f, [(T(2),), (T(2),)]


@program(S, graphs=1)  # a new tensor of the same kind is a new input, not a recompile
def odd_buffer_names_on_a_module():
    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("w'q", torch.ones(2))
            self.register_buffer("w q]", torch.full((2,), 2.0))

        def forward(self, x):
            return x * getattr(self, "w'q") + getattr(self, "w q]")

    m = Net()

    def change():
        setattr(m, "w'q", torch.full((2,), 3.0))

    return m, [(T(2),), change, (T(2),)]


@program(S, graphs=1)
def hostile_keyword_names_through_double_star():
    def inner(x, **kw):
        return x * kw[HOSTILE] + kw["w q"]

    def f(x, d):
        return inner(x, **d)

    return f, [(T(2), {HOSTILE: 2.0, "w q": 1.0}), (T(2), {HOSTILE: 2.0, "w q": 1.0})]
