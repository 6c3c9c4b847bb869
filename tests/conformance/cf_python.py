"""Python semantics inside compiled functions: control flow on constants, containers, closures,
comprehensions, unpacking, f-strings, builtins, math/operator, classes and named tuples."""

import collections
import dataclasses
import functools
import math
import operator

import torch
from cf_harness import program

import torchsmith

T = lambda *shape: torch.randn(*shape)
P = "python"


def one(fn, *args):
    return fn, [args]


@program(P)
def loop_over_range():
    def f(x):
        for i in range(3):
            x = x + i
        return x

    return one(f, T(4))


@program(P)
def while_loop_on_constant():
    def f(x):
        n = 0
        while n < 4:
            x = x * 1.5
            n += 1
        return x, n

    return one(f, T(3))


@program(P)
def if_on_python_value():
    def f(x, flag):
        if flag:
            return x + 1
        return x - 1

    return f, [(T(3), True)]


@program(P)
def if_else_chain_on_int():
    def f(x, k):
        if k == 0:
            y = x
        elif k == 1:
            y = x * 2
        else:
            y = x * 3
        return y

    return f, [(T(3), 1)]


@program(P)
def list_comprehension():
    def f(x):
        return [x * i for i in range(4) if i % 2 == 0]

    return one(f, T(2))


@program(P)
def dict_comprehension():
    def f(x):
        return {f"k{i}": x + i for i in range(3)}

    return one(f, T(2))


@program(P)
def set_comprehension_of_constants():
    def f(x):
        s = {i % 3 for i in range(10)}
        return x * len(s)

    return one(f, T(2))


@program(P)
def generator_expression_sum():
    def f(xs):
        return sum(x * 2 for x in xs)

    return one(f, [T(3), T(3), T(3)])


@program(P)
def nested_comprehension():
    def f(x):
        return [[x + i + j for j in range(2)] for i in range(2)]

    return one(f, T(2))


@program(P)
def closure_reads_outer_variable():
    scale = 3.0

    def f(x):
        def inner(y):
            return y * scale

        return inner(x) + 1

    return one(f, T(3))


@program(P)
def closure_over_local_cell():
    def f(x):
        k = 2

        def inner(y):
            return y * k

        k = 4
        return inner(x)

    return one(f, T(3))


@program(P)
def nonlocal_counter_inside():
    def f(x):
        count = 0

        def bump():
            nonlocal count
            count += 1

        bump()
        bump()
        return x * count

    return one(f, T(3))


@program(P)
def lambda_inline():
    def f(x):
        g = lambda t, k=2: t * k + 1
        return g(x), g(x, k=3)

    return one(f, T(3))


@program(P)
def default_and_keyword_arguments():
    def helper(x, a=1, *, b=2):
        return x * a + b

    def f(x):
        return helper(x), helper(x, 3), helper(x, b=5), helper(x, a=2, b=1)

    return one(f, T(2))


@program(P)
def star_args_and_kwargs():
    def helper(*args, **kwargs):
        total = args[0]
        for a in args[1:]:
            total = total + a
        return total * kwargs.get("scale", 1)

    def f(x, y):
        parts = (x, y, x)
        opts = {"scale": 2}
        return helper(*parts, **opts)

    return f, [(T(3), T(3))]


@program(P)
def tuple_unpacking_and_swap():
    def f(x, y):
        a, b = x, y
        a, b = b, a
        (c, d), e = (a, b), 3
        return a - b, c + d + e

    return f, [(T(2), T(2))]


@program(P)
def star_unpacking():
    def f(xs):
        first, *middle, last = xs
        return first + last, len(middle)

    return one(f, [T(2), T(2), T(2), T(2)])


@program(P)
def fstring_and_str_methods():
    def f(x, name):
        key = f"{name}_{x.dim()}d".upper()
        table = {"W_2D": 2.0, "W_1D": 1.0}
        return x * table[key]

    return f, [(T(2, 2), "w")]


@program(P)
def builtins_on_python_values():
    def f(x, items):
        n = len(items) + max(items) + min(items) + sum(items) + abs(-3)
        ordered = sorted(items, reverse=True)
        return x * n + ordered[0], any(i > 2 for i in items), all(i > 0 for i in items)

    return f, [(T(3), [3, 1, 2])]


@program(P)
def enumerate_and_zip():
    def f(xs, ws):
        total = 0
        for i, (x, w) in enumerate(zip(xs, ws)):
            total = total + x * w * i
        return total

    return f, [([T(2), T(2), T(2)], [1.0, 2.0, 3.0])]


@program(P)
def reversed_and_map_filter():
    def f(xs):
        doubled = list(map(lambda t: t * 2, xs))
        kept = list(filter(lambda t: t is not None, [doubled[0], None, doubled[1]]))
        return [t + 1 for t in reversed(kept)]

    return one(f, [T(2), T(2)])


@program(P)
def isinstance_dispatch():
    def f(x, y):
        out = x
        if isinstance(y, (int, float)):
            out = out + y
        if isinstance(y, torch.Tensor):
            out = out * y
        return out

    return f, [(T(3), 2), (T(3), T(3))]


@program(P)
def math_and_operator_modules():
    def f(x):
        k = math.sqrt(16) + math.floor(2.7) + math.pi
        return operator.mul(x, k), operator.add(x, 1)

    return one(f, T(3))


@program(P)
def getattr_hasattr_on_objects():
    class Cfg:
        scale = 2.0
        shift = 1.0

    cfg = Cfg()

    def f(x):
        y = x * cfg.scale + getattr(cfg, "missing", 0.5)
        if hasattr(cfg, "shift"):
            y = y + cfg.shift
        return y

    return one(f, T(3))


@program(P)
def named_tuple_in_and_out():
    Pair = collections.namedtuple("Pair", ["a", "b"])

    def f(p):
        q = Pair(p.a + 1, p.b * 2)
        return q, q.a + q[1]

    return one(f, Pair(T(2), T(2)))


@program(P)
def dataclass_argument_fields():
    @dataclasses.dataclass
    class Batch:
        x: torch.Tensor
        scale: float

    def f(batch):
        return batch.x * batch.scale

    return one(f, Batch(T(3), 2.5))


@program(P)
def user_class_methods_and_properties():
    class Scaler:
        def __init__(self, k):
            self.k = k

        @property
        def double(self):
            return self.k * 2

        def apply(self, x):
            return x * self.double

        @staticmethod
        def bias():
            return 1.0

        @classmethod
        def name(cls):
            return cls.__name__

    s = Scaler(3)

    def f(x):
        return s.apply(x) + Scaler.bias() + len(s.name())

    return one(f, T(3))


@program(P)
def super_call_in_method():
    class Base:
        def run(self, x):
            return x + 1

    class Child(Base):
        def run(self, x):
            return super().run(x) * 2

    c = Child()

    def f(x):
        return c.run(x)

    return one(f, T(3))


@program(P)
def dict_methods():
    def f(x, d):
        total = x
        for k, v in d.items():
            total = total + v * len(k)
        keys = list(d.keys())
        return total, keys, d.get("zz", 7)

    return f, [(T(2), {"a": 1, "bb": 2})]


@program(P)
def list_methods_on_local_list():
    def f(x):
        items = [x]
        items.append(x + 1)
        items.extend([x + 2, x + 3])
        items.insert(0, x - 1)
        last = items.pop()
        items.reverse()
        return items, last, len(items)

    return one(f, T(2))


@program(P)
def slicing_python_lists():
    def f(xs):
        return xs[1:], xs[::-1][0] * 2, xs[:2]

    return one(f, [T(2), T(2), T(2)])


@program(P)
def chained_comparison_and_boolean_ops():
    def f(x, a, b):
        if 0 < a < 5 and (b == 3 or b is None) and not a == 2:
            return x + a
        return x - a

    return f, [(T(2), 3, 3)]


@program(P)
def ternary_and_is_none():
    def f(x, bias=None):
        y = x * 2
        y = y + bias if bias is not None else y
        return y

    return f, [(T(3),), (T(3), T(3))]


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

