"""`torchsmith.compile`, `explain`, `reset`, `disable`: the user-facing entry points."""

import functools
import time
from dataclasses import dataclass, field

import torch

from torchsmith.backend_registry import resolve_backend
from torchsmith.capture import CaptureSession, capture, reset_all
from torchsmith.distributed import BucketSplitBackend, CompiledDDP, PiecewiseCall, is_ddp
from torchsmith.errors import InvalidOptionError
from torchsmith.fallback import GuardedBackend, RerunnableCall, accepts_options
from torchsmith.options import non_default_backend_keys, resolve_options


def compile(
    model=None,
    *,
    fullgraph: bool = False,
    dynamic=None,
    backend="inductor",
    mode=None,
    options=None,
    disable: bool = False,
):
    """Compile a function, method or `nn.Module` (also usable as `@torchsmith.compile(...)`).

    `backend` is a registered name (`"eager"`, `"aot_eager"`, `"inductor"`, see `list_backends()`) or a
    callable `backend(graph: torchsmith.ir.Graph, example_inputs: list) -> compiled`. With
    `fullgraph=True` any graph break raises `torchsmith.FullGraphError` naming the construct and its
    line. `dynamic`: None (specialize, then make sizes that change symbolic), True (symbolic from the
    start), False (never symbolic). `mode` (one of `torchsmith.options.MODES`) presets some
    `options`; `options` is a dict of the keys documented in `torchsmith.options.OPTIONS` and wins
    over the mode; backends that take an `options=` keyword receive the resolved dict. A stage failure
    falls back to eager with one warning (`options={"fallback": "raise"}` raises `StageError`).
    An unknown mode, option or backend raises at once, listing the valid ones.

        >>> f = torchsmith.compile(lambda x: x.sin() + 1, backend="eager")  # doctest: +SKIP
        >>> @torchsmith.compile(mode="max-autotune")  # doctest: +SKIP
        ... def g(x): ...
    """
    resolved = resolve_options(mode, options)
    if dynamic not in (None, True, False):
        raise InvalidOptionError(f"dynamic must be None, True or False, got {dynamic!r}")
    backend_fn = resolve_backend(backend)
    if disable:
        return model if model is not None else (lambda fn: fn)
    name = backend if isinstance(backend, str) else getattr(backend, "__name__", type(backend).__name__)
    unheard = non_default_backend_keys(resolved)
    if unheard and not accepts_options(backend_fn):
        raise InvalidOptionError(
            f"backend {name!r} takes no options, so {', '.join(unheard)} (from mode={mode!r} / options) "
            "would be ignored; use a backend that declares an `options` keyword (backend='inductor'), or "
            "drop them"
        )
    if model is None:
        return lambda fn: compile(
            fn,
            fullgraph=fullgraph,
            dynamic=dynamic,
            backend=backend,
            mode=mode,
            options=options,
            disable=disable,
        )
    guarded = GuardedBackend(backend_fn, name, resolved, _display_name(model))
    # under DDP, graphs are cut at the gradient buckets (torchsmith.distributed); elsewhere a pass-through
    splitting = BucketSplitBackend(guarded, resolved)
    if is_ddp(model):  # DDP's forward runs natively around its compiled module
        inner = capture(model.module, _behind_guards(splitting), fullgraph=fullgraph, dynamic=dynamic)
        result = CompiledDDP(model, inner, inner._session)
    else:
        result = capture(model, _behind_guards(splitting), fullgraph=fullgraph, dynamic=dynamic)
    if resolved["check"]:  # options={"check": True} or TORCHSMITH_CHECK=1: see torchsmith.accuracy
        from torchsmith.accuracy.function_check import with_capture_check

        result = with_capture_check(result, _display_name(model), resolved, guarded)
    # TORCHSMITH_REPORT=DIR: an HTML report per compiled function (a no-op when the variable is unset)
    from torchsmith.report import attach_from_environment

    return attach_from_environment(result, fn=model, backend=backend)


def _behind_guards(backend):
    """`backend` for capture, which calls each compiled graph only after its guards checked the
    inputs: a whole graph compiled by the AOT runtime may then skip its own signature lookup
    (`AotFunction.assume_example_signature`; it does so only for a program of static sizes), and so
    may the pieces of a graph cut at DDP's buckets (`PiecewiseCall.assume_example_signature`)."""
    from torchsmith.autograd_aot.runtime import AotFunction

    def compile_graph(graph, example_inputs):
        compiled = backend(graph, example_inputs)
        inner = compiled.compiled if isinstance(compiled, RerunnableCall) else compiled
        if isinstance(inner, (AotFunction, PiecewiseCall)):
            inner.assume_example_signature()
        return compiled

    return compile_graph


def _display_name(model) -> str:
    if isinstance(model, torch.nn.Module):
        return type(model).__name__
    return getattr(model, "__qualname__", None) or getattr(model, "__name__", None) or repr(model)


def reset() -> None:
    """Forget every captured graph and guard of every compiled function (they recompile on the next call)."""
    reset_all()


def disable(fn=None):
    """Run `fn` eagerly even when called from compiled code (a graph break at the call)."""
    if fn is None:
        return disable

    @functools.wraps(fn)
    def eager_only(*args, **kwargs):
        return fn(*args, **kwargs)

    eager_only._torchsmith_disabled = True
    return eager_only


@dataclass
class BreakReason:
    """Why a graph ended early, and where."""

    reason: str
    filename: str | None
    line: int | None

    def __str__(self) -> str:
        return f"{self.reason} ({self.filename}:{self.line})"


@dataclass
class ExplainOutput:
    """What `explain` found: graphs, breaks with reasons and locations, guards and capture times."""

    graphs: list = field(default_factory=list)
    graph_count: int = 0
    graph_break_count: int = 0
    break_reasons: list[BreakReason] = field(default_factory=list)
    ops_per_graph: list[list[str]] = field(default_factory=list)
    guards: list[str] = field(default_factory=list)
    compile_times: list[float] = field(default_factory=list)
    result: object = None

    def __str__(self) -> str:
        lines = [f"Graph count: {self.graph_count}", f"Graph break count: {self.graph_break_count}"]
        lines += [f"  break: {b}" for b in self.break_reasons]
        lines.append(f"Op count: {sum(len(o) for o in self.ops_per_graph)}")
        lines.append(f"Capture time: {sum(self.compile_times):.4f} s")
        return "\n".join(lines)


def explain(fn):
    """`explain(fn)(*args, **kwargs)` runs `fn` once under capture with the eager backend and
    reports its graphs, graph breaks (reason, file, line), guards and capture time."""

    def run(*args, **kwargs) -> ExplainOutput:
        from torchsmith.backend_registry import lookup_backend

        session = CaptureSession(lookup_backend("eager"))
        start = time.perf_counter()
        result = capture(fn, session.backend, session=session)(*args, **kwargs)
        del start
        out = ExplainOutput(result=result)
        for record in session.records:
            if record.graph is not None:
                out.graphs.append(record.graph)
                out.ops_per_graph.append(
                    [node.op for node in record.graph.nodes if node.op != "torch._C._set_grad_enabled"]
                )
            if record.break_reason is not None:
                brk = record.break_reason
                out.break_reasons.append(BreakReason(brk.reason, brk.filename, brk.line))
            out.guards.extend(record.guards)
            out.compile_times.append(record.seconds)
        out.graph_count = len(out.graphs)
        out.graph_break_count = len(out.break_reasons)
        return out

    return run
