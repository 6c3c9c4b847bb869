"""`torchsmith.compile`, `explain`, `reset`, `disable`: the user-facing entry points."""

import functools
import time
from dataclasses import dataclass, field

import torch

from torchsmith.backends import resolve_backend
from torchsmith.capture import CaptureSession, capture, reset_all
from torchsmith.errors import BackendError, TorchsmithError

MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")


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
    """Compile a function or `nn.Module` (also usable as `@torchsmith.compile(...)`).

    `backend` is a registered name (`"eager"`, `"aot_eager"`, `"inductor"`) or a callable
    `backend(graph: torchsmith.ir.Graph, example_inputs: list) -> compiled`. With `fullgraph=True`
    any graph break raises `torchsmith.FullGraphError` naming the construct and its line.
    """
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
    if mode is not None and options is not None:
        raise TorchsmithError("pass either mode= or options=, not both")
    if mode is not None and mode not in MODES:
        raise TorchsmithError(f"unknown mode {mode!r}; expected one of {', '.join(MODES)}")
    if disable:
        return model
    backend_fn = resolve_backend(backend)
    if getattr(backend_fn, "not_built", False):
        raise BackendError(
            f"backend={backend!r} is not built yet; use backend='eager' or backend='aot_eager'"
        )
    return capture(model, backend_fn, fullgraph=fullgraph, dynamic=dynamic)


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
        from torchsmith.backends import lookup_backend

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


def _is_tensor(x) -> bool:
    return isinstance(x, torch.Tensor)
