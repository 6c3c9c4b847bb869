"""The conformance harness: run a program eagerly and compiled, compare everything observable.

A program is a function returning `(fn, calls)`: `fn` is a function or module and `calls` a list of
argument tuples, one per call, or of callables run between calls (to change state the program
reads). The harness builds the program twice from the same seed (one copy runs eagerly, one compiled
with a counting backend), calls both with every argument tuple, and compares return values, raised
exceptions, the arguments afterwards (mutated tensors, lists, dicts, objects, module state) and the
Python state the program exposes as `fn.state` if any. Each program also states how many graphs
(and graph breaks) it must produce, so a program silently running eagerly fails.

Adding a program: write a factory in the cf_<theme>.py file of its theme, decorated with
`@program(theme, graphs=..., breaks=..., fullgraph=..., dynamic=...)`.
"""

import dataclasses
import types
from collections.abc import Callable

import torch

import torchsmith

PROGRAMS: list["Program"] = []


@dataclasses.dataclass
class Program:
    name: str
    theme: str
    make: Callable
    graphs: int | None = None  # exact number of graphs captured over all calls (None: at least 1)
    breaks: int | None = None  # exact number of graph breaks recorded (None: not checked)
    fullgraph: bool = False
    dynamic: bool | None = None
    compiled_raises: type | None = None  # the compiled call raises this (eager may not, e.g. fullgraph)


def program(theme: str, **options):
    """Register the decorated factory as a conformance program."""

    def register(make):
        PROGRAMS.append(Program(make.__name__, theme, make, **options))
        return make

    return register


class CountingBackend:
    """The eager backend, counting the graphs it is given."""

    def __init__(self):
        self.graphs = []
        self.eager = torchsmith.lookup_backend("eager")

    def __call__(self, graph, example_inputs):
        self.graphs.append(graph)
        return self.eager(graph, example_inputs)


def snapshot(x):
    """A comparable copy of everything observable in `x`."""
    if isinstance(x, torch.Tensor):
        return ("tensor", x.detach().clone(), x.requires_grad)
    if isinstance(x, torch.nn.Module):
        x = x.__dict__.get("_orig_mod", x)
        return (
            "module",
            type(x).__name__,
            x.training,
            {k: snapshot(v) for k, v in x.state_dict().items()},
            {k: snapshot(v) for k, v in vars(x).items() if not k.startswith("_") and k != "training"},
        )
    if isinstance(x, (list, tuple)):
        return (type(x).__name__, [snapshot(v) for v in x])
    if isinstance(x, dict):
        return ("dict", {k: snapshot(v) for k, v in x.items()})
    if isinstance(x, types.FunctionType):
        return ("function", x.__qualname__)
    if isinstance(x, BaseException):
        return ("exception", type(x).__name__, str(x))
    if dataclasses.is_dataclass(x) or (
        hasattr(x, "__dict__")
        and type(x).__module__ not in ("builtins",)
        and not callable(x)
        and not isinstance(x, type)
    ):
        return ("object", type(x).__name__, {k: snapshot(v) for k, v in vars(x).items()})
    return x


def assert_same(a, b, path="result"):
    if isinstance(a, tuple) and a and a[0] == "tensor":
        assert isinstance(b, tuple) and b and b[0] == "tensor", f"{path}: tensor vs {b!r}"
        ta, tb = a[1], b[1]
        assert ta.shape == tb.shape and ta.dtype == tb.dtype, (
            f"{path}: {ta.shape}/{ta.dtype} vs {tb.shape}/{tb.dtype}"
        )
        assert torch.allclose(ta, tb, equal_nan=True, atol=1e-5, rtol=1e-4), f"{path}: values differ"
        assert a[2] == b[2], f"{path}: requires_grad {a[2]} vs {b[2]}"
        return
    if isinstance(a, (list, tuple)):
        assert isinstance(b, type(a)) and len(a) == len(b), f"{path}: {a!r} vs {b!r}"
        for i, (x, y) in enumerate(zip(a, b)):
            assert_same(x, y, f"{path}[{i}]")
        return
    if isinstance(a, dict):
        assert isinstance(b, dict) and list(a) == list(b), f"{path}: keys {list(a)} vs {list(b)}"
        for k in a:
            assert_same(a[k], b[k], f"{path}[{k!r}]")
        return
    assert a == b or (a != a and b != b), f"{path}: {a!r} vs {b!r}"


def run_calls(fn, calls):
    results = []
    for args in calls:
        if callable(args):  # a step between calls (e.g. change a global) made by the same make()
            args()
            continue
        try:
            results.append(("ok", snapshot(fn(*args))))
        except Exception as e:  # compared with the other side
            results.append(("raised", type(e).__name__))
        results.append(("args", snapshot(args)))
        if isinstance(fn, torch.nn.Module):
            results.append(("module", snapshot(fn)))
        state = getattr(fn, "state", None)
        if state is not None:
            results.append(("state", snapshot(state)))
    return results


def check(prog: Program) -> CountingBackend:
    # Each side is built and run in turn, so programs that touch module globals can reset them in make().
    torch.manual_seed(0)
    eager_fn, eager_calls = prog.make()
    torch.manual_seed(1)
    expected = run_calls(eager_fn, eager_calls)
    torch.manual_seed(0)
    fn, calls = prog.make()
    backend = CountingBackend()
    compiled = torchsmith.compile(fn, backend=backend, fullgraph=prog.fullgraph, dynamic=prog.dynamic)
    if getattr(fn, "state", None) is not None and not isinstance(fn, torch.nn.Module):
        compiled.state = fn.state
    if prog.compiled_raises is not None:
        try:
            compiled(*next(c for c in calls if not callable(c)))
        except prog.compiled_raises:
            return backend
        raise AssertionError(f"compiled call did not raise {prog.compiled_raises.__name__}")
    torch.manual_seed(1)
    actual = run_calls(compiled, calls)
    assert_same(expected, actual)
    if prog.graphs is None:
        assert backend.graphs, "no graph was captured"
    else:
        assert len(backend.graphs) == prog.graphs, (
            f"{len(backend.graphs)} graphs captured, expected {prog.graphs}"
        )
    if prog.breaks is not None:
        session = compiled.session if hasattr(compiled, "session") else compiled._session
        breaks = sum(1 for r in session.records if r.break_reason is not None)
        assert breaks == prog.breaks, f"{breaks} graph breaks, expected {prog.breaks}"
    return backend
