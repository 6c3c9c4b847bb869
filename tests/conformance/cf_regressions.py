"""Programs reproducing capture gaps found by running `transformers` models (each failed before its fix).

- a graph break inside a function called as `f(*args, **kwargs)`: the callee gets its own frame;
- guards on a str-derived enum (its repr is not Python source);
- `super().get(key)` in a dict subclass held in a global, guarded on the value read;
- a dict popped from in the graph, whose popped constant is still used after a break;
- `len(t.shape)` (torch.Size has a C `__len__`, nothing to inline).
"""

import enum

import torch
from cf_harness import program

T = lambda *shape: torch.randn(*shape)
B = "breaks"
G = "guards"


@program(B, graphs=2)
def break_inside_callee_called_with_star_args():
    def inner(x, *, scale):
        y = x * scale
        print("break")
        return y + 1

    def wrapper(*args, **kwargs):
        return inner(*args, **kwargs)

    def f(x):
        return wrapper(x, scale=3)

    return f, [(T(3),)]


class Mode(str, enum.Enum):  # noqa: UP042 - as transformers writes them
    FAST = "fast"
    SLOW = "slow"


@program(G, graphs=2)
def guard_on_str_enum_argument():
    def f(x, mode):
        return x * 2 if mode == Mode.FAST else x - 1

    return f, [(T(2), Mode.FAST), (T(2), Mode.FAST), (T(2), Mode.SLOW)]


class Registry(dict):
    def get(self, key):
        return super().get(key) or 1.0


REGISTRY = Registry()


@program(G, graphs=2, breaks=0)
def dict_subclass_get_through_super_is_guarded():
    REGISTRY.clear()
    REGISTRY["scale"] = 3.0

    def f(x):
        return x * REGISTRY.get("scale")

    def change():
        REGISTRY["scale"] = 5.0

    return f, [(T(2),), (T(2),), change, (T(2),)]


@program(B, graphs=2)
def popped_kwarg_used_after_break():
    def f(x, **kwargs):
        flag = kwargs.pop("flag")
        kwargs["k"] = 2
        y = x * kwargs["k"]
        print("break")
        return y + 1 if flag else y

    def g(x):
        return f(x, flag=True)  # breaks: f gets its own frame, with `kwargs` a source

    return g, [(T(2),)]


@program(B, breaks=0)
def len_of_shape_inside_isinstance_test():
    def f(mask, x):
        if isinstance(mask, torch.Tensor) and len(mask.shape) == 4:
            return x
        return x + mask.sum()

    return f, [(T(2, 3), T(2))]
