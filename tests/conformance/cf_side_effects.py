"""Side effects: mutated input tensors, lists, dicts, object attributes, globals, closures and module
buffers are visible after the call exactly as in eager."""

import torch
from cf_harness import program

T = lambda *shape: torch.randn(*shape)
S = "side_effects"


def one(fn, *args):
    return fn, [args]


@program(S)
def inplace_mutation_of_input_tensor():
    def f(x):
        x.mul_(2)
        x.add_(1)
        return x.sum()

    return one(f, T(3))


@program(S)
def index_assignment_into_input():
    def f(x, v):
        x[0] = v.sum()
        x[1:] *= 2
        return x

    return f, [(T(3), T(2))]


@program(S)
def append_to_input_list():
    def f(x, out):
        out.append(x * 2)
        out.append(3)
        return len(out)

    return f, [(T(2), [])]


@program(S)
def mutate_input_list_items():
    def f(xs):
        xs[0] = xs[0] + 1
        xs.pop()
        return xs

    return f, [([T(2), T(2), T(2)],)]


@program(S)
def write_into_input_dict():
    def f(x, d):
        d["y"] = x * 3
        d["count"] = d.get("count", 0) + 1
        del d["drop"]
        return x

    return f, [(T(2), {"drop": 1})]


@program(S)
def set_attribute_on_object():
    class Stats:
        def __init__(self):
            self.calls = 0
            self.last = None

    def f(x, stats):
        stats.calls += 1
        stats.last = x.mean()
        return x * stats.calls

    s = Stats()
    return f, [(T(2), s), (T(2), s)]


@program(S)
def global_write():
    def f(x):
        global COUNTER
        COUNTER = COUNTER + 1
        return x + COUNTER

    global COUNTER
    COUNTER = 0
    f.state = _Globals()
    return f, [(T(2),), (T(2),)]


COUNTER = 0


class _Globals:
    """Exposes the module global COUNTER to the harness's state comparison."""

    @property
    def __dict__(self):
        return {"COUNTER": COUNTER}


@program(S)
def closure_cell_write():
    total = [0]
    hits = 0

    def f(x):
        nonlocal hits
        hits += 1
        total[0] = hits
        return x * hits

    f.state = total
    return f, [(T(2),), (T(2),)]


@program(S)
def module_buffer_inplace_update():
    class Counter(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("steps", torch.zeros(()))

        def forward(self, x):
            self.steps.add_(1)
            return x * self.steps

    return Counter(), [(T(2),), (T(2),)]


@program(S)
def module_attribute_assignment():
    class Memo(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.last_shape = None

        def forward(self, x):
            self.last_shape = tuple(x.shape)
            return x + 1

    return Memo(), [(T(2, 3),)]


@program(S)
def returned_input_list_is_same_object():
    def f(xs):
        xs.append(xs[0] * 2)
        return xs

    return f, [([T(2)],)]


@program(S)
def mutation_then_read_in_same_call():
    def f(x):
        y = x.clone()
        y[0] = 5.0
        return y.sum(), y

    return one(f, T(3))


@program(S)
def side_effects_around_a_graph_break():
    def f(x, log):
        log.append("before")
        y = x * 2
        print("break")
        log.append("after")
        return y + 1

    return f, [(T(2), [])]


@program(S, graphs=0)
def exception_raised_matches_eager():
    def f(x, d):
        return x * d["missing"]

    return f, [(T(2), {"present": 1})]


@program(S)
def mutate_nested_list_in_dict():
    def f(x, d):
        d["items"].append(x + 1)
        return len(d["items"])
    return f, [(T(2), {"items": []})]


@program(S)
def requires_grad_input_inplace_on_clone():
    def f(x):
        y = x.clone()
        y.mul_(2)
        return y
    return f, [(torch.randn(3, requires_grad=True),)]


@program(S)
def attribute_write_then_read_back():
    class Box:
        def __init__(self):
            self.v = 1

    def f(x, box):
        box.v = box.v + 1
        box.t = x * box.v
        return box.t + box.v
    return f, [(T(2), Box())]


@program(S)
def class_level_list_append_is_kept():
    class Registry:
        items = []

    def f(x):
        Registry.items.append(x.sum())
        return x + len(Registry.items)

    f.state = Registry.items
    return f, [(T(2),), (T(2),)]


@program(S)
def global_dict_update():
    def f(x):
        CACHE["last"] = x * 2
        CACHE["n"] = CACHE.get("n", 0) + 1
        return CACHE["n"]

    CACHE.clear()
    f.state = CACHE
    return f, [(T(2),), (T(2),)]


CACHE = {}


@program(S)
def delete_attribute_runs_eagerly_after_graph():
    class Box:
        def __init__(self):
            self.tmp = 1

    def f(x, box):
        y = x * 2
        del box.tmp
        return y + hasattr(box, "tmp")
    return f, [(T(2), Box())]


@program(S)
def list_sort_and_insert_on_input():
    def f(x, xs):
        xs.sort()
        xs.insert(0, 100)
        return x * xs[1]
    return f, [(T(2), [3, 1, 2])]
