"""Python semantics inside compiled functions, part two: recursion, globals, classes, named tuples,
dataclasses, functools.partial (part one is cf_python.py)."""

import collections.abc
import dataclasses
import functools

import torch
from cf_harness import program

import torchsmith

T = lambda *shape: torch.randn(*shape)
P = "python"


def one(fn, *args):
    return fn, [args]


@program(P)
def recursion_on_python_int():
    def fact(n):
        return 1 if n <= 1 else n * fact(n - 1)

    def f(x):
        return x * fact(4)

    return one(f, T(2))


@program(P)
def global_constant_read():
    def f(x):
        return x * GLOBAL_SCALE + len(GLOBAL_NAMES)

    return one(f, T(2))


GLOBAL_SCALE = 1.25
GLOBAL_NAMES = ["a", "b"]


@program(P)
def string_formatting_percent_and_format():
    def f(x, n):
        label = "%s-%d" % ("x", n) + "{}".format(n)  # noqa: UP031, UP032
        return x * len(label)

    return f, [(T(2), 12)]


@program(P)
def tuple_methods_and_contains():
    def f(x, dims):
        k = dims.index(3) + dims.count(1)
        if 4 in dims:
            k += 10
        return x * k

    return f, [(T(2), (1, 3, 4, 1))]


@program(P)
def int_float_bool_conversions():
    def f(x, s):
        return x * int(s) + float("1.5") + bool(0), round(2.567, 2), divmod(7, 2)

    return f, [(T(2), "3")]


@program(P)
def iter_and_next():
    def f(xs):
        it = iter(xs)
        a = next(it)
        b = next(it)
        return a * b, next(it, None)

    return one(f, [T(2), T(2)])


@program(P)
def early_return_in_loop():
    def f(x):
        for i in range(10):
            if i == 3:
                return x + i
            x = x * 1.1
        return x

    return one(f, T(2))


@program(P)
def break_and_continue_in_loops():
    def f(x):
        for i in range(6):
            if i == 1:
                continue
            if i == 4:
                break
            x = x + i
        return x

    return one(f, T(2))


@program(P)
def for_else_clause():
    def f(x, items):
        for i in items:
            if i < 0:
                break
        else:
            x = x + 100
        return x

    return f, [(T(2), [1, 2])]


@program(P)
def assert_on_python_value():
    def f(x, n):
        assert n > 0, "n must be positive"
        assert x.dim() == 1
        return x * n

    return f, [(T(3), 2)]


@program(P)
def functools_partial_like_closure_factory():
    def make_adder(k):
        def add(x):
            return x + k

        return add

    add3 = make_adder(3)

    def f(x):
        return add3(x) + make_adder(1)(x)

    return one(f, T(2))


@program(P)
def del_local_and_reassign():
    def f(x):
        y = x + 1
        del y
        y = x * 2
        return y

    return one(f, T(2))


@program(P)
def with_no_grad_block():
    def f(x, w):
        with torch.no_grad():
            y = x * w
        z = x * w
        return y, z, torch.is_grad_enabled()

    return f, [(T(3), torch.randn(3, requires_grad=True))]


@program(P)
def set_grad_enabled_and_enable_grad():
    def f(x, w):
        with torch.set_grad_enabled(False):
            a = x * w
            with torch.enable_grad():
                b = x * w
        return a, b

    return f, [(T(3), torch.randn(3, requires_grad=True))]


@program(P)
def try_finally_without_exception():
    def f(x):
        try:
            y = x + 1
        finally:
            y = y * 2
        return y
    return one(f, T(2))


@program(P)
def try_except_not_taken():
    def f(x, d):
        try:
            k = d["k"]
        except KeyError:
            k = 0
        return x * k
    return f, [(T(2), {"k": 3})]


@program(P)
def no_grad_decorated_helper():
    @torch.no_grad()
    def helper(t):
        return t * 2

    def f(x):
        return helper(x) + x
    return f, [(torch.randn(3, requires_grad=True),)]


@program(P)
def with_block_inside_inlined_helper():
    def helper(t):
        with torch.no_grad():
            return t.sum()

    def f(x):
        return helper(x) * x
    return f, [(torch.randn(3, requires_grad=True),)]


@program(P)
def global_no_grad_context_object():
    def f(x):
        with NO_GRAD:
            y = x * 3
        return y
    return f, [(torch.randn(2, requires_grad=True),)]


NO_GRAD = torch.no_grad()


@program(P)
def isinstance_parameter_vs_tensor():
    w = torch.nn.Parameter(torch.randn(3))

    def f(x):
        k = 1.0
        if isinstance(w, torch.nn.Parameter):
            k += 1
        if isinstance(x, torch.nn.Parameter):
            k += 10
        return x * w * k, type(x) is torch.Tensor
    return one(f, T(3))


@program(P)
def returns_lambda_free_function():
    def f(x):
        g = lambda t: t + 1
        return g(x), g
    return one(f, T(2))


@program(P)
def keyword_only_and_defaults_on_compiled_function():
    def f(x, *, scale=2.0, shift=0.0):
        return x * scale + shift
    fn = f
    return fn, [(T(2),)]


@program(P)
def walrus_and_conditional_expression():
    def f(x, items):
        if (n := len(items)) > 2:
            x = x * n
        return x
    return f, [(T(2), [1, 2, 3])]


@program(P)
def nested_data_structures_returned():
    def f(x):
        return {"a": [x, (x + 1, {"b": x * 2})], "n": None, "s": "text"}
    return one(f, T(2))


@program(P)
def class_attribute_constants():
    class Config:
        depth = 3
        names = ("a", "b")

    def f(x):
        for _ in range(Config.depth):
            x = x + len(Config.names)
        return x
    return one(f, T(2))


@program(P)
def dict_iteration_order_and_update():
    def f(x):
        d = {"b": 2, "a": 1}
        d.update(c=3)
        d.setdefault("a", 100)
        return [x * v for v in d.values()], list(d)
    return one(f, T(2))


@program(P)
def slice_objects_and_negative_steps():
    def f(x):
        s = slice(1, None, 2)
        return x[s], x[::-1].contiguous(), x[-2:]
    return one(f, torch.arange(8.0))


@program(P)
def while_with_python_counter_and_tensor_update():
    def f(x):
        steps = 0
        while steps < 3:
            x = torch.sin(x)
            steps += 1
        return x
    return one(f, T(4))


def _scaled_tanh(t, k):
    return torch.tanh(t) * k


_scaled_tanh_kept = torchsmith.allow_in_graph(_scaled_tanh)


@program(P)
def allow_in_graph_keeps_a_call_whole():
    def f(x):
        return _scaled_tanh_kept(x + 1, 2.0) - 1
    return one(f, T(3))


@program(P)
def sorted_with_key_and_pairs():
    def f(x, d, items):
        ordered = sorted(items, key=lambda t: -t)
        pairs = sorted(d.items())
        return x * ordered[0], [k for k, _ in pairs], pairs[0][1] + 1
    return f, [(T(2), {"b": T(2), "a": T(2)}, [1, 3, 2])]


@program(P)
def string_methods_on_constants():
    def f(x, names):
        label = "-".join(names).upper().replace("A", "Z")
        return x * len(label), label.startswith("Z"), label.split("-")
    return f, [(T(2), ["a", "bc"])]


@program(P)
def varargs_and_keyword_only_compiled_function():
    def f(*xs, scale=2.0, shift=0.0):
        return sum(xs) * scale + shift
    return f, [(T(2), T(2))]


@program(P)
def closures_made_in_a_comprehension():
    def f(x):
        fns = [lambda t: t * i for i in range(3)]  # noqa: B023 - the late binding is the point
        return [g(x) for g in fns]
    return one(f, T(2))


@program(P)
def argument_captured_by_inner_function():
    def f(x, k):
        def inner(t):
            return t * k
        k = k + 1
        return inner(x)
    return f, [(T(2), 2)]


@program(P)
def imports_inside_the_function():
    def f(x):
        import math as m

        from torch.nn import functional as fn

        return fn.relu(x) * m.sqrt(4)
    return one(f, T(3))


@program(P, graphs=1, breaks=0)
def partial_created_and_called():
    def scale_add(x, a, b, *, c=0.0):
        return x * a + b + c

    def f(x):
        g = functools.partial(scale_add, x, 2.0, c=0.5)
        h = functools.partial(g, c=1.5)  # nested: flattened, call-time keywords override
        return g(1.0), g(b=3.0), h(0.25), g.args[1], g.keywords["c"], g.func is scale_add

    return one(f, T(3))


@program(P, graphs=1, breaks=0)
def partial_of_module_method_and_torch_function():
    lin = torch.nn.Linear(4, 3)

    def f(x):
        fwd = functools.partial(lin.forward)
        cat = functools.partial(torch.cat, dim=1)
        soft = functools.partial(torch.nn.functional.softmax, dim=-1)
        y = fwd(x)
        return soft(cat([y, y])), callable(cat)

    return one(f, T(2, 4))


@program(P, graphs=1, breaks=0)
def partial_passed_to_inlined_function():
    def apply_twice(fn, x):
        return fn(fn(x))

    def f(x, k):
        add_k = functools.partial(torch.add, other=k)
        return apply_twice(add_k, x), apply_twice(functools.partial(lambda a, b: a * b, 3), x)

    return f, [(T(3), 2)]



@program(P, graphs=1, breaks=0)
def inspect_signature_inside_forward():
    # transformers' apply_chunking_to_forward counts a callback's parameters in forward
    import inspect

    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(4, 4)

        def chunk(self, x):
            return self.lin(x).relu()

        def forward(self, x):
            fn = self.chunk
            n = len(inspect.signature(fn).parameters)
            names = list(inspect.signature(functools.partial(torch.nn.functional.softmax, dim=-1)).parameters)
            unwrapped = inspect.unwrap(fn)
            return fn(x) * n + len(names), unwrapped is Block.chunk

    return one(Block(), T(3, 4))


@dataclasses.dataclass
class Result:
    value: torch.Tensor
    extra: torch.Tensor | None = None
    note: str = "plain"

    @property
    def total(self):
        return self.value.sum() if self.extra is None else self.value.sum() + self.extra.sum()

    def scaled(self, k):
        return self.value * k


@program(P, graphs=1, breaks=0)
def dataclass_created_read_and_returned():
    def f(x):
        r = Result(x.relu(), extra=x * 2)
        r.note = "set"
        return Result(r.scaled(3), note=r.note), r.total, isinstance(r, Result), type(r) is Result

    return one(f, T(3))


@program(P, graphs=2, breaks=1)
def dataclass_lives_across_a_graph_break():
    def f(x):
        r = Result(x + 1)
        print("break here")
        return r.value * 2, r

    return one(f, T(3))


@program(P, graphs=1, breaks=0)
def loss_module_created_inside_the_function():
    def f(logits, target):
        loss_fn = torch.nn.CrossEntropyLoss(ignore_index=-100, reduction="mean")
        return loss_fn(logits, target) * 2

    return f, [(T(4, 5), torch.tensor([0, 2, -100, 4]))]


@dataclasses.dataclass
class WithFactory:
    items: list = dataclasses.field(default_factory=list)


@program(P)
def dataclass_with_default_factory_runs_as_eager():
    def f(x):
        w = WithFactory()
        w.items.append(1)
        return x * len(w.items)

    return one(f, T(2))


class Registry(collections.abc.Mapping):
    """A Mapping whose get() catches the KeyError of __getitem__ (transformers' attention registry)."""

    def __init__(self, table):
        self._table = dict(table)

    def __getitem__(self, key):
        return self._table[key]

    def __iter__(self):
        return iter(self._table)

    def __len__(self):
        return len(self._table)


REGISTRY = Registry({"double": lambda x: x * 2})


@program(P, graphs=1, breaks=0)
def mapping_get_with_a_missing_key():
    def f(x):
        missing = REGISTRY.get("eager")
        fn = REGISTRY.get("double")
        return fn(x) if missing is None else x, "double" in REGISTRY, "eager" in REGISTRY

    return one(f, T(3))


@program(P, graphs=1, breaks=0)
def finfo_and_tensor_type_inside_the_function():
    def f(x):
        low = torch.finfo(x.dtype).min
        big = torch.iinfo(torch.int32).max
        y = x.masked_fill(x < 0, low).type(torch.float64)
        return y, x.type(), big

    return one(f, T(4))
