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

Every program runs under three backends: "eager" (captured graphs run as generated Python),
"aot_eager" (captured graphs lowered by torchsmith.autograd_aot) and "inductor" (autograd_aot, prims
and generated C++ kernels). The counting backend wraps the one asked for and records the graphs it
failed to compile: every graph must compile (compile_api's fallback to eager would hide a failure);
under "inductor" the compiled code must also really run generated kernels (torchsmith.inductor's
BACKEND_STATS), with no backward graph falling back to eager ops.

Training programs (`train=True`) additionally, after each call, reduce the float tensors of the
result to a scalar (the sum of their sums), call `.backward()` on it on both sides, and compare the
gradients of the argument tensors that require grad and of every module parameter (then zero them,
so each call's gradients are compared on their own). Mutated state (e.g. BatchNorm running stats)
is compared by the ordinary snapshot of arguments and modules.

Second-order programs (`double_backward=True`) instead take the gradient penalty of each call's
result: `g = grad(loss, leaves, create_graph=True)`, then `sum((g**2).sum()).backward()`, and compare
the first-order gradients `g` and the leaves' second-order gradients.

Programs known to fail under one backend are listed in EXPECTED_FAILURES (test_conformance.py)
with the reason; they run as strict xfails, so a fix shows up as an unexpected pass.
"""

import dataclasses
import os
import types
from collections.abc import Callable

import numpy as np
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
    train: bool = False  # backward() through the outputs; gradients compared too
    strides: bool = False  # tensors' strides compared too (layout programs)
    double_backward: bool = False  # gradient penalty through the outputs; both orders compared


def program(theme: str, **options):
    """Register the decorated factory as a conformance program."""

    def register(make):
        PROGRAMS.append(Program(make.__name__, theme, make, **options))
        return make

    return register


ALL_BACKENDS = ("eager", "aot_eager", "inductor")
# TORCHSMITH_CONFORMANCE_BACKENDS=eager,... narrows a run (nox's tests_pythons on Python 3.13: the
# bytecode-dependent stage is capture, which every backend shares)
BACKENDS = tuple(
    name for name in os.environ.get("TORCHSMITH_CONFORMANCE_BACKENDS", ",".join(ALL_BACKENDS)).split(",")
    if name in ALL_BACKENDS
) or ALL_BACKENDS


class CountingBackend:
    """A registered backend (default "eager"), counting the graphs it is given and the errors it
    raised on them (compile_api may fall back to eager after one, which the harness must not miss)."""

    def __init__(self, name: str = "eager"):
        self.name = name
        self.graphs = []
        self.failures = []
        self.inner = torchsmith.lookup_backend(name)

    def __call__(self, graph, example_inputs):
        self.graphs.append(graph)
        try:
            return self.inner(graph, example_inputs)
        except Exception as e:
            self.failures.append(f"{type(e).__name__}: {e}")
            raise


def assert_no_failures(backend: CountingBackend) -> None:
    """compile_api runs a graph eagerly when its backend raises: here that is a failure."""
    assert not backend.failures, f"{backend.name} failed to compile a graph: {backend.failures[0][:2000]}"


def _inductor_stats():
    if "inductor" not in BACKENDS:
        return None
    from torchsmith.inductor import BACKEND_STATS

    return dataclasses.replace(BACKEND_STATS)


def check_inductor_ran(backend: CountingBackend, before) -> None:
    """Under backend="inductor": every graph compiled, compiled code ran (generated kernels, when the
    graphs have any: some hold only views and library calls), no backward fell back to eager ops."""
    after = _inductor_stats()
    if any(graph.nodes for graph in backend.graphs):  # capture may not call a graph with nothing to do
        assert after.calls > before.calls, "no inductor-compiled graph was called"
    if after.graphs_with_kernels > before.graphs_with_kernels:
        assert after.kernel_calls > before.kernel_calls, "no generated kernel ran"
    assert after.backward_fallbacks == before.backward_fallbacks, "a backward graph fell back to eager ops"


def snapshot(x):
    """A comparable copy of everything observable in `x`."""
    if isinstance(x, torch.Tensor):
        return ("tensor", x.detach().clone(), x.requires_grad, x.stride())
    if isinstance(x, (np.ndarray, np.generic)):  # a copy: the array may share memory with a tensor
        return ("ndarray", type(x).__name__, np.array(x, copy=True))
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


# (atol, rtol) per dtype; float32 (and integer dtypes, compared exactly in practice) use the default.
TOLERANCE = {torch.float16: (1e-3, 1e-3), torch.bfloat16: (1e-2, 1e-2), torch.float64: (1e-10, 1e-8)}


def _significant(strides, shape):
    """The strides that address memory: a dim of size 1 is never stepped along, so its stride is
    arbitrary (eager's CPU kernels and its meta functions pick different ones for the same op)."""
    return tuple(stride if size != 1 else None for stride, size in zip(strides, shape))


def assert_same(a, b, path="result", strides=False):
    if isinstance(a, tuple) and a and a[0] == "ndarray":
        assert isinstance(b, tuple) and b and b[0] == "ndarray", f"{path}: NumPy {a[1]} vs {b!r}"
        assert a[1] == b[1] and a[2].dtype == b[2].dtype and a[2].shape == b[2].shape, (
            f"{path}: {a[1]} {a[2].dtype}{a[2].shape} vs {b[1]} {b[2].dtype}{b[2].shape}"
        )
        assert np.allclose(a[2], b[2], equal_nan=True, atol=1e-5, rtol=1e-4), f"{path}: values differ"
        return
    if isinstance(a, tuple) and a and a[0] == "tensor":
        assert isinstance(b, tuple) and b and b[0] == "tensor", f"{path}: tensor vs {b!r}"
        ta, tb = a[1], b[1]
        assert ta.shape == tb.shape and ta.dtype == tb.dtype, (
            f"{path}: {ta.shape}/{ta.dtype} vs {tb.shape}/{tb.dtype}"
        )
        atol, rtol = TOLERANCE.get(ta.dtype, (1e-5, 1e-4))
        assert torch.allclose(ta, tb, equal_nan=True, atol=atol, rtol=rtol), f"{path}: values differ"
        assert a[2] == b[2], f"{path}: requires_grad {a[2]} vs {b[2]}"
        assert not strides or _significant(a[3], ta.shape) == _significant(b[3], tb.shape), (
            f"{path}: strides {a[3]} vs {b[3]}"
        )
        return
    if isinstance(a, (list, tuple)):
        assert isinstance(b, type(a)) and len(a) == len(b), f"{path}: {a!r} vs {b!r}"
        for i, (x, y) in enumerate(zip(a, b)):
            assert_same(x, y, f"{path}[{i}]", strides)
        return
    if isinstance(a, dict):
        assert isinstance(b, dict) and list(a) == list(b), f"{path}: keys {list(a)} vs {list(b)}"
        for k in a:
            assert_same(a[k], b[k], f"{path}[{k!r}]", strides)
        return
    assert a == b or (a != a and b != b), f"{path}: {a!r} vs {b!r}"


def _float_tensors(x):
    if isinstance(x, torch.Tensor):
        return [x] if x.is_floating_point() and x.requires_grad else []
    if isinstance(x, (list, tuple)):
        return [t for v in x for t in _float_tensors(v)]
    if isinstance(x, dict):
        return [t for v in x.values() for t in _float_tensors(v)]
    return []


def _arg_tensors(x):
    if isinstance(x, torch.Tensor):
        return [x]
    if isinstance(x, (list, tuple)):
        return [t for v in x for t in _arg_tensors(v)]
    if isinstance(x, dict):
        return [t for v in x.values() for t in _arg_tensors(v)]
    return []


def backward_and_grads(fn, args, out):
    """Backpropagate the sum of the float outputs; the gradients of args and parameters, then zeroed."""
    outs = _float_tensors(out)
    assert outs, "a training program must return at least one float tensor that requires grad"
    sum(o.sum() for o in outs).backward()
    grads = []
    module = fn.__dict__.get("_orig_mod", fn) if isinstance(fn, torch.nn.Module) else None
    leaves = [t for t in _arg_tensors(args) if t.requires_grad and t.is_leaf]
    if module is not None:
        leaves += [p for _, p in module.named_parameters()]
    for t in leaves:
        grads.append(None if t.grad is None else t.grad.detach().clone())
        t.grad = None
    return ("grads", [("tensor", g, False, g.stride()) if g is not None else None for g in grads])


def _leaves(fn, args):
    module = fn.__dict__.get("_orig_mod", fn) if isinstance(fn, torch.nn.Module) else None
    leaves = [t for t in _arg_tensors(args) if t.requires_grad and t.is_leaf]
    if module is not None:
        leaves += [p for _, p in module.named_parameters()]
    return leaves


def _grad_record(grads):
    return [("tensor", g.detach().clone(), False, g.stride()) if g is not None else None for g in grads]


def gradient_penalty_grads(fn, args, out):
    """The gradient penalty pattern: first-order gradients of the float outputs' sum with
    `create_graph=True`, then the backward of the sum of their squares; both orders, then zeroed."""
    outs = _float_tensors(out)
    assert outs, "a double-backward program must return at least one float tensor that requires grad"
    leaves = _leaves(fn, args)
    first = torch.autograd.grad(sum(o.sum() for o in outs), leaves, create_graph=True, allow_unused=True)
    penalty = [(g ** 2).sum() for g in first if g is not None and g.requires_grad]
    assert penalty, "no first-order gradient of a double-backward program is differentiable"
    sum(penalty).backward()
    second = [t.grad for t in leaves]
    for t in leaves:
        t.grad = None
    return ("grads of grads", _grad_record(first), _grad_record(second))


def run_calls(fn, calls, train: bool = False, double_backward: bool = False):
    results = []
    for args in calls:
        if callable(args):  # a step between calls (e.g. change a global) made by the same make()
            args()
            continue
        try:
            out = fn(*args)
            results.append(("ok", snapshot(out)))
            if train:
                results.append(backward_and_grads(fn, args, out))
            if double_backward:
                results.append(gradient_penalty_grads(fn, args, out))
        except Exception as e:  # compared with the other side
            results.append(("raised", type(e).__name__))
        results.append(("args", snapshot(args)))
        if isinstance(fn, torch.nn.Module):
            results.append(("module", snapshot(fn)))
        state = getattr(fn, "state", None)
        if state is not None:
            results.append(("state", snapshot(state)))
    return results


def check(prog: Program, backend_name: str = "eager") -> CountingBackend:
    # Each side is built and run in turn, so programs that touch module globals can reset them in make().
    torch.manual_seed(0)
    eager_fn, eager_calls = prog.make()
    torch.manual_seed(1)
    expected = run_calls(eager_fn, eager_calls, prog.train, prog.double_backward)
    torch.manual_seed(0)
    fn, calls = prog.make()
    backend = CountingBackend(backend_name)
    stats_before = _inductor_stats() if backend_name == "inductor" else None
    compiled = torchsmith.compile(fn, backend=backend, fullgraph=prog.fullgraph, dynamic=prog.dynamic)
    if getattr(fn, "state", None) is not None and not isinstance(fn, torch.nn.Module):
        compiled.state = fn.state
    if prog.compiled_raises is not None:
        try:
            compiled(*next(c for c in calls if not callable(c)))
        except prog.compiled_raises:
            assert_no_failures(backend)
            return backend
        raise AssertionError(f"compiled call did not raise {prog.compiled_raises.__name__}")
    torch.manual_seed(1)
    actual = run_calls(compiled, calls, prog.train, prog.double_backward)
    assert_same(expected, actual, strides=prog.strides)
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
    assert_no_failures(backend)
    if stats_before is not None:
        check_inductor_ran(backend, stats_before)
    return backend
