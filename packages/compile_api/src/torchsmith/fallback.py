"""Stage failures: name the stage, the op and the user's source line, then fall back or raise.

`GuardedBackend` is what capture calls in place of the user's backend. It passes the resolved
options to backends that take them, turns any exception of a stage into a `StageError`, and, under
`options={"fallback": "eager"}` (the default), runs that graph eagerly instead, warning ONCE per
compiled function (later fallbacks go to the `torchsmith.fallback` logger). Eagerly means the captured
`torch.*` graph run op by op, which is what the user's program does without compiling: never a wrong answer.

Failures at call time (a built-in backend compiling a new input signature lazily, its generated
code refusing inputs, a size expression that cannot be evaluated at a new size) fall back the same
way, but only for the built-in AOT runtime (a custom backend that returns it unchanged included):
it writes mutated inputs back after the forward and the output views have run, so a call that
failed has changed nothing and can be re-run eagerly. Any other custom backend's compiled code may
have mutated its inputs before failing, so its run-time errors propagate unchanged.
"""

import inspect
import logging
import re
import sys
import warnings

from torchsmith.errors import FallbackWarning, StageError
from torchsmith.ir.errors import SymbolicError
from torchsmith.ir.events import emit
from torchsmith.ir.gc_pause import paused_gc

log = logging.getLogger("torchsmith.fallback")

STAGES = ("capture", "autograd_aot", "prims", "inductor", "ir")
COMPILER_STAGES = ("capture", "autograd_aot", "prims", "inductor")  # not ir: its errors are ops failing
# Backends whose compiled callables may be re-run eagerly after a failed call (see the docstring).
RERUNNABLE = frozenset({"aot_eager", "inductor"})
# Exceptions that mean "a bug in our code" when raised from a stage package's own frame.
_INTERNAL = (KeyError, AttributeError, TypeError, AssertionError, IndexError, NotImplementedError, ValueError)

_OP = re.compile(r"\b((?:aten|prims|torch|operator|allow_in_graph)\.[A-Za-z_][\w.]*[\w])")
_SOURCE = re.compile(r"([^\s'\"()<>:,]+\.py):(\d+)")


def accepts_options(backend) -> bool:
    """Whether `backend` declares a keyword parameter `options` (or `**kwargs`)."""
    try:
        parameters = inspect.signature(backend).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(p.name == "options" or p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters)


def stage_of(exc: BaseException, default: str | None) -> str | None:
    """The torchsmith stage an exception comes from: its `stage` attribute, its class's package,
    else the innermost traceback frame in a stage package (internal errors); else `default`."""
    named = getattr(exc, "stage", None)
    if isinstance(named, str):
        return named
    module = type(exc).__module__ or ""
    for stage in STAGES:
        if module.startswith(f"torchsmith.{stage}"):
            return stage
    tb, innermost = exc.__traceback__, None
    while tb is not None:
        name = tb.tb_frame.f_globals.get("__name__", "")
        if name.startswith("torchsmith."):
            part = name.split(".")[1]
            innermost = part if part in STAGES else innermost
        tb = tb.tb_next
    return innermost or default


def _messages(exc: BaseException) -> str:
    parts, seen = [], set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        parts.append(str(exc))
        parts.extend(getattr(exc, "__notes__", ()))
        exc = exc.__cause__ or exc.__context__
    return "\n".join(parts)


def locate(exc: BaseException, graph) -> tuple[str | None, str | None]:
    """(op, source) of a failure: the exception's `op`/`source` attributes when it has them, else
    the first op name and `file.py:line` its message (or its causes') mention, else the source of
    the graph node running that op."""
    op, source = getattr(exc, "op", None), getattr(exc, "source", None)
    text = _messages(exc)
    if not isinstance(op, str):
        match = _OP.search(text)
        op = match.group(1) if match else None
    if not isinstance(source, str):
        match = _SOURCE.search(text)
        source = f"{match.group(1)}:{match.group(2)}" if match else None
    if source is None and op is not None and graph is not None:
        source = next((n.source for n in graph.nodes if n.op == op and n.source), None)
    return op, source


def graph_span(graph) -> str | None:
    """`file.py:first-last` of the user lines a graph was captured from."""
    lines: dict[str, list[int]] = {}
    for node in graph.nodes:
        if node.source and ":" in node.source:
            filename, _, line = node.source.rpartition(":")
            if line.isdigit():
                lines.setdefault(filename, []).append(int(line))
    if not lines:
        return None
    filename, numbers = next(iter(lines.items()))
    first, last = min(numbers), max(numbers)
    return f"{filename}:{first}" if first == last else f"{filename}:{first}-{last}"


def make_stage_error(exc: BaseException, graph, backend_name: str, *, when: str) -> StageError:
    """Wrap a stage's exception with its stage, op, source line (or the graph's lines) and a hint."""
    default = f"backend {backend_name!r}"
    stage = stage_of(exc, default)
    if stage in ("ir", None):
        stage = default
    op, source = locate(exc, graph)
    reason = f"{type(exc).__name__}: {exc}".strip()
    if source is None and graph is not None:
        span = graph_span(graph)
        source = f"graph captured from {span}" if span else None
    name = graph.name if graph is not None else None
    return StageError(stage, reason, op=op, source=source, graph_name=name, when=when)


class GuardedBackend:
    """The backend capture calls for one compiled function (see the module docstring)."""

    def __init__(self, backend, name: str, options: dict, function_name: str):
        self.backend, self.name, self.options = backend, name, options
        self.function_name = function_name
        self.takes_options = accepts_options(backend)
        self.warned = False
        # (graph, inputs copy) of each graph compiled while the capture check records (its first call)
        self.checked_graphs: list | None = None

    def __call__(self, graph, example_inputs):
        try:
            # Compiling makes many short-lived objects: collector passes over a large heap (another
            # compiler's, in the same process) would cost more than the garbage they find.
            with paused_gc():
                if self.takes_options:
                    compiled = self.backend(graph, example_inputs, options=self.options)
                else:
                    compiled = self.backend(graph, example_inputs)
        except Exception as exc:
            if self.name == "eager":
                raise  # nothing simpler to fall back to
            error = make_stage_error(exc, graph, self.name, when="compiling")
            return self.fall_back(graph, error, exc, example_inputs)
        if self.options.get("check"):
            from torchsmith.accuracy.compare import clone_inputs
            from torchsmith.accuracy.graph_check import check_graph

            if self.checked_graphs is not None:
                self.checked_graphs.append((graph, clone_inputs(example_inputs)))
            compiled = check_graph(graph, example_inputs, compiled, self.name, self.backend, self.options,
                                   self.function_name)
        if self.name in RERUNNABLE or _is_aot_program(compiled):
            return RerunnableCall(self, graph, compiled)
        return compiled

    def fall_back(self, graph, error: StageError, exc: BaseException, example_inputs=None):
        """The eager runner for `graph`, after one warning; or raise `error` under fallback="raise".
        Either way observers get a `compile_api/fallback` event (the HTML report shows it)."""
        emit("compile_api", "fallback", graph=graph, stage=error.stage, op=error.op, source=error.source,
             reason=error.describe(), when=error.when,
             action="raise" if self.options.get("fallback", "eager") == "raise" else "eager")
        if self.options.get("fallback", "eager") == "raise":
            error.hint = self.raise_hint(graph, error, example_inputs)
            error.args = (error.describe(),)
            raise error from exc
        message = (
            f"torchsmith: {error.describe()}\n  {self.function_name} runs this graph eagerly instead "
            "(options={'fallback': 'eager'}, the default); pass options={'fallback': 'raise'} to get the "
            "error instead. Later fallbacks of this function are logged to torchsmith.fallback."
        )
        if self.warned:
            log.info("%s", message)
        else:
            self.warned = True
            warnings.warn(message, FallbackWarning, stacklevel=_user_stacklevel())
        from torchsmith.ir import compile_to_python

        return compile_to_python(graph)

    def raise_hint(self, graph, error: StageError, example_inputs) -> str:
        """What would run this graph: checked for aot_eager when a later stage failed."""
        hints = ["options={'fallback': 'eager'} runs this graph eagerly; backend='eager' always runs it."]
        if error.stage in ("prims", "inductor") and example_inputs is not None and self.name != "aot_eager":
            hints.append(_probe_aot_eager(graph, example_inputs, error.stage))
        hints.append("fullgraph=False would not help: the graph was captured, a later stage refused it.")
        return " ".join(h for h in hints if h)


def _probe_aot_eager(graph, example_inputs, stage: str) -> str:
    from torchsmith.autograd_aot import aot_eager_backend

    try:
        aot_eager_backend(graph, list(example_inputs))
    except Exception as exc:  # the probe only informs the hint
        return f"backend='aot_eager' fails too ({type(exc).__name__})."
    return f"backend='aot_eager' compiles it (checked): only the {stage} stage fails."


class RerunnableCall:
    """A built-in AOT backend's compiled callable that falls back to eager on a stage failure."""

    def __init__(self, owner: GuardedBackend, graph, compiled):
        self.owner, self.graph, self.compiled = owner, graph, compiled
        self.eager = None

    def __call__(self, *args):
        if self.eager is not None:
            return self.eager(*args)
        try:
            return self.compiled(*args)
        except Exception as exc:
            return self._failed(exc, args)

    def run_via(self, call, args):
        """`call(*args)` (the compiled callable, or a way of calling it the caller knows to be
        equivalent for these inputs), falling back to eager as `__call__` does."""
        if self.eager is not None:
            return self.eager(*args)
        try:
            return call(*args)
        except Exception as exc:
            return self._failed(exc, args)

    def _failed(self, exc: Exception, args):
        """After the compiled call raised `exc`: re-raise the program's own error, else run eagerly
        from now on (or raise a `StageError` under fallback="raise")."""
        ours = type(exc).__module__.split(".")[:2] in [["torchsmith", s] for s in COMPILER_STAGES] or (
            isinstance(exc, SymbolicError)  # a size expression a stage derived: never the program's
        )
        internal = isinstance(exc, _INTERNAL) and _raised_in_stage(exc)
        if not (ours or internal):
            raise exc  # the program's own error (an op refusing its inputs): eager raises it too
        eager = None
        if not ours:
            # An IndexError (say) from our code may be the program's own error, reported by a
            # generated check: run it eagerly; if eager raises, that is the user's answer.
            if self.owner.options.get("fallback", "eager") == "raise":
                raise exc
            from torchsmith.ir import compile_to_python

            eager = compile_to_python(self.graph)
            try:
                result = eager(*args)
            except Exception as own:
                raise own from None  # the program's error, as eager reports it
        error = make_stage_error(exc, self.graph, self.owner.name, when="running")
        self.eager = self.owner.fall_back(self.graph, error, exc, args)
        return result if eager is not None else self.eager(*args)

    def __getattr__(self, name):
        # callers (tests, the report) look at the backend's own object: AotFunction.programs, ...
        return getattr(self.compiled, name)


def _is_aot_program(compiled) -> bool:
    """Whether a (custom) backend handed back the built-in AOT runtime itself (a backend wrapping
    `lookup_backend("inductor")`): it writes mutated inputs back only after its forward ran, so a
    failed call can be re-run eagerly as for the built-in backends."""
    from torchsmith.autograd_aot.runtime import AotFunction

    return isinstance(compiled, AotFunction)


def _user_stacklevel() -> int:
    """The `stacklevel` that points a warning at the first frame outside torchsmith and torch (the
    user's call of the compiled function), not at our dispatcher."""
    frame, level = sys._getframe(2), 2  # 1 would be fall_back itself, the caller of this function
    while frame is not None:
        module = frame.f_globals.get("__name__", "") or ""
        if not (module.startswith("torchsmith.") or module.split(".")[0] == "torch"):
            return level
        frame, level = frame.f_back, level + 1
    return 2


def _raised_in_stage(exc: BaseException) -> bool:
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    name = tb.tb_frame.f_globals.get("__name__", "") if tb is not None else ""
    return name.startswith("torchsmith.") and name.split(".")[1] in COMPILER_STAGES

