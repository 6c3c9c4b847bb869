"""Graph breaks (the construct runs eagerly, the rest resumes) and fullgraph=True errors."""

import torch
from cf_harness import program

import torchsmith

T = lambda *shape: torch.randn(*shape)
B = "breaks"
FG = "fullgraph"


def one(fn, *args):
    return fn, [args]


def logged():
    """A function printing nothing but appending to a log (an opaque call capture cannot trace)."""
    log = []

    @torchsmith.disable
    def note(*items):
        log.append(len(items))

    return log, note


@program(B, graphs=2, breaks=1)
def print_between_ops():
    def f(x):
        y = x * 2
        print("between")
        return y + 1

    return one(f, T(3))


@program(B, graphs=2, breaks=1)
def disabled_function_call():
    log, note = logged()

    def f(x):
        y = x.sin()
        note(y)
        return y.cos()

    f.state = log
    return one(f, T(3))


@program(B, graphs=3)
def branch_on_tensor_value():
    def f(x):
        y = x * 2
        if y.sum() > 0:
            return y + 1
        return y - 1

    return f, [(torch.ones(3),), (-torch.ones(3),)]


@program(B, graphs=2, breaks=1)
def item_call():
    def f(x):
        s = x.sum().item()
        return x * s

    return one(f, T(3))


@program(B, graphs=1, breaks=1)
def tolist_call():
    def f(x):
        values = x.tolist()
        return x + len(values)

    return one(f, T(3))


@program(B)
def break_inside_loop():
    def f(x):
        for i in range(3):
            x = x + i
            print(i)
        return x * 2

    return one(f, T(2))


@program(B)
def break_in_inlined_callee_compiles_callee():
    def helper(y):
        z = y * 3
        print("inside helper")
        return z + 1

    def f(x):
        a = x.cos()
        b = helper(a)
        return b * 2

    return one(f, T(3))


@program(B)
def break_preserves_live_locals_and_stack():
    def f(x, k):
        a = x + 1
        b = [a, k]
        r = (a * 2, print("mid"), b[1] + 3)
        return r[0] + r[2], b

    return f, [(T(2), 5)]


@program(B)
def unsupported_numpy_call_breaks():
    def f(x):
        y = x * 2
        n = y.numpy().sum()
        return y + float(n)

    return one(f, T(3))


@program(B, graphs=2)
def tensor_condition_with_else_paths_both_compiled():
    def f(x):
        if x.mean() > 0:
            x = x * 10
        else:
            x = x / 10
        return x + 1

    return f, [(torch.ones(2),)]


@program(B, graphs=0, breaks=1)
def raise_runs_eagerly():
    def f(x):
        if x.dim() == 1:
            raise ValueError("bad rank")
        return x

    return one(f, T(3))


@program(B)
def break_in_method_of_module():
    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(3, 3)

        def forward(self, x):
            y = self.fc(x)
            print("logging")
            return y.relu()

    return Net(), [(T(2, 3),)]


@program(B)
def data_dependent_nonzero():
    def f(x):
        idx = x.nonzero()
        return idx.float().sum() + x.sum()

    return one(f, torch.tensor([0.0, 1.0, 2.0]))


@program(B)
def break_then_more_breaks():
    def f(x):
        x = x + 1
        print("a")
        x = x * 2
        print("b")
        return x - 3

    return one(f, T(2))


@program(FG, fullgraph=True, compiled_raises=torchsmith.FullGraphError)
def fullgraph_print_raises():
    def f(x):
        print("no")
        return x

    return one(f, T(2))


@program(FG, fullgraph=True, compiled_raises=torchsmith.FullGraphError)
def fullgraph_tensor_branch_raises():
    def f(x):
        if x.sum() > 0:
            return x
        return -x

    return one(f, T(2))


@program(FG, fullgraph=True, compiled_raises=torchsmith.FullGraphError)
def fullgraph_item_raises():
    def f(x):
        return x * x.max().item()

    return one(f, T(2))


@program(FG, fullgraph=True, graphs=1)
def fullgraph_clean_function():
    def f(x, y):
        return (x @ y).relu().sum(dim=0)

    return f, [(T(3, 4), T(4, 2))]


@program(FG, fullgraph=True, graphs=1)
def fullgraph_module():
    return torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.ReLU()), [(T(2, 3),)]


@program(FG, fullgraph=True, graphs=1)
def fullgraph_python_control_flow():
    def f(x, n):
        for i in range(n):
            if i % 2:
                x = x + i
        return x

    return f, [(T(2), 5)]


@program(B, graphs=2, breaks=1)
def break_inside_with_no_grad_resumes_in_the_block():
    def f(x):
        with torch.no_grad():
            print("inside")
            y = x * 2
        return y
    return f, [(torch.randn(2, requires_grad=True),)]


@program(B)
def break_in_nested_helpers_two_levels():
    def inner(t):
        print("deep")
        return t + 1

    def middle(t):
        return inner(t * 2) * 3

    def f(x):
        return middle(x.sin()).cos()
    return one(f, T(3))


@program(B)
def break_with_iterator_on_stack():
    def f(xs):
        total = 0
        for x in xs:
            print("step")
            total = total + x * 2
        return total
    return f, [([T(2), T(2), T(2)],)]


@program(B)
def break_keeps_keyword_arguments():
    @torchsmith.disable
    def opaque(a, *, scale):
        return a * scale

    def f(x):
        y = x + 1
        z = opaque(y, scale=3)
        return z - 1
    return one(f, T(2))


@program(FG, fullgraph=True, compiled_raises=torchsmith.FullGraphError)
def fullgraph_break_in_inlined_callee_raises():
    def helper(t):
        return t.tolist()

    def f(x):
        return helper(x * 2)
    return one(f, T(2))


@program(B)
def break_inside_try_block_resumes():
    def f(x):
        try:
            y = x * 2
            print("in try")
            y = y + 1
        except ValueError:
            y = x
        return y
    return one(f, T(2))


@program(B)
def break_inside_nested_with_blocks():
    def f(x):
        with torch.no_grad():
            a = x * 2
            with torch.enable_grad():
                print("inner")
                b = x * 3
            c = x * 4
        return a, b, c, torch.is_grad_enabled()
    return f, [(torch.randn(2, requires_grad=True),)]


@program(B)
def break_with_closure_cells_alive():
    def f(x):
        k = 2
        scale = lambda t: t * k  # noqa: E731
        y = scale(x)
        print("break")
        k = 5
        return scale(y) + 1, k
    return one(f, T(2))


@program(B)
def break_with_nonlocal_counter():
    def f(x):
        calls = []

        def record(t):
            calls.append(1)
            return t + len(calls)

        a = record(x)
        print("break")
        b = record(a)
        return b, len(calls)
    return one(f, T(2))
