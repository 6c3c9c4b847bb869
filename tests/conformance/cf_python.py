"""Python semantics inside compiled functions: control flow on constants, containers, closures,
comprehensions, unpacking, f-strings, builtins, math/operator, classes and named tuples."""

import collections
import dataclasses
import math
import operator

import torch
from cf_harness import program

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
