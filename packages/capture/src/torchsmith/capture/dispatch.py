"""The Python dispatcher: per code object, a cache of (guard, run) entries.

A compiled function is entered through `CaptureSession.run_code`: the first entry whose guard
holds runs; on a miss the call is captured again (a recompile) and a new entry is added; after
`recompile_limit` entries captured for the same module instances (the modules among the call's
arguments, `self` of a forward), or `ACCUMULATED_LIMIT` entries in all, the code runs eagerly from
then on, with one logged warning. Modules are guarded by class, so the blocks of a model share an
entry; an entry per block (a block that reads its own `layer_idx`) counts once per block. Resume
functions after graph breaks go through the same dispatcher, so each is captured lazily, on its
first call, under its own guards.
"""

import functools
import logging
import time
import types
from dataclasses import dataclass, field

import torch

from torchsmith.capture import native_guards
from torchsmith.capture.binding import bind_to_code
from torchsmith.capture.errors import (
    CaptureError,
    FullGraphError,
    GeneratedCodeError,
    RecompileLimitError,
    Unsupported,
)
from torchsmith.capture.guards import autocast_state
from torchsmith.capture.output import Codegen, compile_run
from torchsmith.capture.python_state import refuse_open_context_sets
from torchsmith.capture.tracer import Tracer
from torchsmith.ir.events import emit

log = logging.getLogger("torchsmith.capture")
recompile_log = logging.getLogger("torchsmith.capture.recompiles")
graph_log = logging.getLogger("torchsmith.capture.graph")
break_log = logging.getLogger("torchsmith.capture.graph_breaks")
code_log = logging.getLogger("torchsmith.capture.output_code")
guard_log = logging.getLogger("torchsmith.capture.guards")

RECOMPILE_LIMIT = 8
# entries of one code object over all module instances (the 80 layers of a large model, each
# specialized on its own index, fit)
ACCUMULATED_LIMIT = 256


class _BackendFailed(Exception):
    """Carries a backend's exception past `capture`'s internal-error handler: a backend failing is
    not a capture bug, and the caller (compile_api) reports or falls back on it itself."""

    def __init__(self, error: Exception):
        super().__init__(str(error))
        self.error = error


@dataclass
class Entry:
    guard: object
    run: object
    guard_set: object
    output: object
    instances: tuple = ()  # ids of the modules among the arguments of the call captured


@dataclass
class CodeCache:
    entries: list[Entry] = field(default_factory=list)
    eager_reason: str | None = None
    # automatic dynamic: sizes each tensor source had at earlier captures, and dims found to change
    seen_sizes: dict[str, tuple] = field(default_factory=dict)
    dynamic_dims: dict[str, set] = field(default_factory=dict)


@dataclass
class CaptureRecord:
    """One capture, for `explain`: the graph (or None), the break (or None), guards and time."""

    code_name: str
    filename: str
    graph: object
    break_reason: Unsupported | None
    guards: list[str]
    seconds: float
    source: str


class CaptureSession:
    """Everything one `compile(...)` call shares: the backend, options, caches and records."""

    def __init__(
        self,
        backend,
        *,
        fullgraph: bool = False,
        dynamic=None,
        recompile_limit: int = RECOMPILE_LIMIT,
        fail_on_recompile_limit: bool = False,
    ):
        self.backend = backend
        self.fullgraph = fullgraph
        self.dynamic = dynamic
        self.recompile_limit = recompile_limit
        self.fail_on_recompile_limit = fail_on_recompile_limit
        self.caches: dict[types.CodeType, CodeCache] = {}
        self.records: list[CaptureRecord] = []

    def reset(self) -> None:
        self.caches.clear()
        self.records.clear()

    # ----------------------------------------------------------------- entering code
    def run_code(self, code, globals_, closure, L: dict, native):
        """Run `code` with bound arguments `L`; `native()` runs it eagerly."""
        cache = self.caches.get(code)
        if cache is None:
            cache = self.caches[code] = CodeCache()
        for entry in cache.entries:
            if entry.guard(L, globals_):
                return entry.run(L, globals_)
        if cache.eager_reason is not None:
            return native()
        if len(cache.entries) >= self.recompile_limit and self._limit_reached(cache, L):
            last = cache.entries[-1].guard_set.first_failure(L, globals_)
            message = (
                f"{code.co_qualname} ({code.co_filename}:{code.co_firstlineno}) hit the recompile limit "
                f"({self.recompile_limit} for the same module instances, {ACCUMULATED_LIMIT} in all); "
                f"it runs eagerly from now on. Last failed guard: {last}"
            )
            if self.fail_on_recompile_limit:
                raise RecompileLimitError(message)
            log.warning(message)
            cache.eager_reason = message
            return native()
        if cache.entries:
            recompile_log.info("recompiling %s: guard failed: %s", code.co_qualname,
                               _order_guards_by_failure(cache.entries, L, globals_))
        entry = self.capture(code, globals_, closure, L)
        if entry is None:
            return native()
        entry.instances = _module_instances(L)
        cache.entries.append(entry)
        if entry.guard_set.wants_native() and not entry.guard_set.uses_native():
            native_guards.when_ready(functools.partial(_recompile_guard, entry))
        return entry.run(L, globals_)

    def _limit_reached(self, cache: CodeCache, L: dict) -> bool:
        """Whether another entry would pass the recompile limit: `recompile_limit` entries for the
        module instances of this call, or `ACCUMULATED_LIMIT` in all."""
        if len(cache.entries) >= max(ACCUMULATED_LIMIT, self.recompile_limit):
            return True
        instances = _module_instances(L)
        return sum(e.instances == instances for e in cache.entries) >= self.recompile_limit

    def capture(self, code, globals_, closure, L) -> Entry | None:
        """Capture one entry; None when the code must run eagerly (and remember that)."""
        if autocast_state() is not None:
            # capture infers types on meta tensors, where autocast does not apply: a graph traced
            # now would declare float32 where the call makes bfloat16. This call runs eagerly;
            # the next one without autocast captures as usual.
            log.info("%s runs eagerly: autocast is enabled", code.co_qualname)
            return None
        try:
            return self._capture(code, globals_, closure, L)
        except _BackendFailed as failed:
            raise failed.error from failed.error.__cause__
        except (CaptureError, RecursionError) as e:
            if not isinstance(e, GeneratedCodeError):
                raise
            return self._internal_error(code, e)
        except Exception as e:
            return self._internal_error(code, e)

    def _internal_error(self, code, e: Exception) -> None:
        """A bug in capture: raise it under fullgraph=True, else run the code eagerly from now on."""
        # A bug in capture must not break the user's program: run eagerly, say so loudly.
        if self.fullgraph:
            raise CaptureError(
                f"internal error while capturing {code.co_qualname} ({code.co_filename}:"
                f"{code.co_firstlineno}): {type(e).__name__}: {e}. Compile with fullgraph=False to run "
                "it eagerly (and please report the bug)"
            ) from e
        log.warning("internal error while capturing %s; it runs eagerly", code.co_qualname, exc_info=True)
        self.caches[code].eager_reason = f"internal error: {type(e).__name__}: {e}"
        return None

    def _capture(self, code, globals_, closure, L) -> Entry | None:
        start = time.perf_counter()
        name = code.co_name if code.co_name.isidentifier() else "fn"
        tracer = Tracer(code, L, globals_, closure, name=name, dynamic_dims=self.dynamic_policy(code))
        try:
            value = tracer.run()
            refuse_open_context_sets(tracer, "the return")
            output = Codegen(tracer).finish_return(value)
        except Unsupported as first:
            if self.fullgraph:
                raise FullGraphError(first) from None
            output, tracer = self._capture_with_break(code, globals_, closure, L, first, name)
            if output is None:
                self.caches[code].eager_reason = str(first)
                self.records.append(
                    CaptureRecord(
                        code.co_qualname, code.co_filename, None, first, [], time.perf_counter() - start, ""
                    )
                )
                break_log.info("%s runs eagerly: %s", code.co_qualname, first)
                emit("capture", "break", reason=str(first.reason), filename=first.filename, line=first.line)
                return None
        tracer.finish_guards()
        self.caches[code].seen_sizes.update(tracer.tensor_sizes)
        guard = tracer.guards.compile()
        compiled = None
        seconds = time.perf_counter() - start
        emit("capture", "time", step="capture", seconds=seconds)
        if output.graph is not None:
            graph_log.info("captured graph:\n%s", output.graph)
            emit("capture", "graph", graph=output.graph, code_name=code.co_qualname,
                 filename=code.co_filename, first_line=code.co_firstlineno,
                 guards=list(tracer.guards.exprs), seconds=seconds)
            try:
                compiled = self.backend(output.graph, output.example_inputs)
            except Exception as e:
                raise _BackendFailed(e) from None
        code_log.info("generated code:\n%s", output.source)
        guard_log.info("guards of %s:\n%s", code.co_qualname, tracer.guards.source_text())
        run = compile_run(output, compiled, self.call_captured)
        self.records.append(
            CaptureRecord(
                code.co_qualname,
                code.co_filename,
                output.graph,
                output.break_reason,
                list(tracer.guards.exprs),
                time.perf_counter() - start,
                output.source,
            )
        )
        return Entry(guard, run, tracer.guards, output)

    def _capture_with_break(self, code, globals_, closure, L, first: Unsupported, name):
        index = getattr(first, "root_index", None)
        if index is None:
            return None, None
        tracer = Tracer(
            code, L, globals_, closure, name=name, break_at=index, dynamic_dims=self.dynamic_policy(code)
        )
        try:
            if tracer.run() is not None:
                return None, None  # did not reach the break the second time: give up
            refuse_open_context_sets(tracer, "the graph break")
            output = Codegen(tracer).finish_break(first, self.run_resume)
        except Unsupported as e:
            first.reason = f"{first.reason}; the function runs eagerly: it cannot resume there ({e.reason})"
            return None, None
        break_log.info("graph break in %s: %s", code.co_qualname, first)
        emit("capture", "break", reason=str(first.reason), filename=first.filename, line=first.line)
        return output, tracer

    def dynamic_policy(self, code):
        """`(source, tensor) -> dims to make symbolic`: marked dims (`mark_dynamic`), every dim of
        non-parameters under `dynamic=True`, none under `dynamic=False`, and otherwise the dims whose
        size changed since an earlier capture of this code (automatic dynamic). Dims marked with
        `mark_static` are never symbolic."""
        cache = self.caches[code]

        def dims(source: str, tensor: torch.Tensor) -> set:
            static = getattr(tensor, "_torchsmith_static_dims", None)
            chosen = symbolic_dims(source, tensor)
            return chosen - static if static else chosen

        def symbolic_dims(source: str, tensor: torch.Tensor) -> set:
            if self.dynamic is False:
                return set()
            result = set(getattr(tensor, "_torchsmith_dynamic_dims", ()))
            if isinstance(tensor, torch.nn.Parameter):
                return result
            if self.dynamic is True:
                return set(range(tensor.dim()))
            result |= cache.dynamic_dims.get(source, set())
            previous = cache.seen_sizes.get(source)
            if previous is not None and len(previous) == tensor.dim():
                changed = {d for d, (a, b) in enumerate(zip(previous, tensor.shape)) if a != b}
                if changed:
                    cache.dynamic_dims.setdefault(source, set()).update(changed)
                    result |= changed
            return result

        return dims

    # ----------------------------------------------------------------- calls made by generated code
    def run_resume(self, code, globals_, closure, args: tuple):
        """Enter a resume function (all-positional) through the dispatcher."""
        L = dict(zip(code.co_varnames, args))
        if closure:
            L["__closure__"] = closure
        native = lambda: types.FunctionType(code, globals_, code.co_name, None, closure)(*args)
        return self.run_code(code, globals_, closure, L, native)

    def call_captured(self, fn, *args, **kwargs):
        """Call `fn` natively, but through capture when it is user Python code (the callee of a
        call that broke the graph gets its own captured frame)."""
        if getattr(fn, "_torchsmith_disabled", False):
            return fn(*args, **kwargs)
        if (
            isinstance(fn, types.MethodType)
            and isinstance(fn.__func__, types.FunctionType)
            and not _is_library(fn.__func__)
        ):
            return self.call_function(fn.__func__, (fn.__self__, *args), kwargs)
        if isinstance(fn, types.FunctionType) and not _is_library(fn):
            return self.call_function(fn, args, kwargs)
        if (
            isinstance(fn, torch.nn.Module)
            and type(fn).__call__ is torch.nn.Module.__call__
            and "forward" not in fn.__dict__
            and not _is_library(type(fn).forward)
        ):
            if not _has_hooks(fn):
                return self.call_function(type(fn).forward, (fn, *args), kwargs)
            if not _has_backward_or_global_hooks(fn):
                # forward hooks (FSDP2's, with keywords) run natively around the captured forward
                forward = lambda *a, **k: self.call_function(type(fn).forward, (fn, *a), k)
                return call_with_forward_hooks(fn, forward, args, kwargs)
        return fn(*args, **kwargs)

    def call_function(self, fn: types.FunctionType, args: tuple, kwargs: dict):
        code = fn.__code__
        if code.co_flags & (0x20 | 0x80 | 0x100 | 0x200):
            return fn(*args, **kwargs)
        L = bind(fn, args, kwargs)
        if fn.__closure__:
            L["__closure__"] = fn.__closure__
        return self.run_code(code, fn.__globals__, fn.__closure__, L, lambda: fn(*args, **kwargs))


def _recompile_guard(entry: Entry) -> None:
    """Compile `entry`'s guard again (with the C++ tensor checks, once they are loaded)."""
    entry.guard = entry.guard_set.compile()


def _order_guards_by_failure(entries: list, L: dict, G: dict) -> str | None:
    """Move the check each entry failed on this miss to the front of its guard, and return the last
    entry's. The checks that tell entries apart (a block's index, an input's size) then run first:
    a call that matches the tenth entry no longer runs most of nine guards before it."""
    failed = None
    for entry in entries:
        failed = entry.guard_set.first_failure(L, G)
        if failed is not None and entry.guard_set.promote(failed):
            entry.guard = entry.guard_set.compile()
    return failed


def _module_instances(L: dict) -> tuple:
    """The ids of the modules passed to a call (`self` of a forward), by parameter name."""
    return tuple((name, id(v)) for name, v in L.items() if isinstance(v, torch.nn.Module))


def _is_library(fn) -> bool:
    """Code a broken call runs natively rather than captured: torch's own Python (a custom
    autograd.Function's `apply` in grad mode, say), and logging and warnings, whose calls are one
    side effect to run, not code to capture piece by piece between their locks and I/O."""
    module = getattr(fn, "__module__", "") or ""
    return module.split(".")[0] in ("torch", "torchsmith", "typing", "functools", "logging", "warnings")


def _has_hooks(module) -> bool:
    return bool(module._forward_hooks or module._forward_pre_hooks)


def _has_backward_or_global_hooks(module) -> bool:
    """Hooks `call_with_forward_hooks` does not run as `nn.Module.__call__` would (backward hooks,
    global hooks, forward hooks that must run even when forward raises)."""
    hooks = torch.nn.modules.module
    return bool(
        module._backward_hooks or getattr(module, "_backward_pre_hooks", None)
        or getattr(module, "_forward_hooks_always_called", None)
        or hooks._global_forward_hooks or hooks._global_forward_pre_hooks or hooks._global_backward_hooks
        or getattr(hooks, "_global_backward_pre_hooks", None)
    )


def call_with_forward_hooks(module, forward, args: tuple, kwargs: dict):
    """`module(*args, **kwargs)` as `nn.Module.__call__` runs it with forward (pre-)hooks, keyword
    hooks included, calling `forward(*args, **kwargs)` in place of the module's own forward."""
    for key, hook in module._forward_pre_hooks.items():
        if key in module._forward_pre_hooks_with_kwargs:
            result = hook(module, args, kwargs)
            if result is not None:
                args, kwargs = result
        else:
            result = hook(module, args)
            if result is not None:
                args = result if isinstance(result, tuple) else (result,)
    output = forward(*args, **kwargs)
    for key, hook in module._forward_hooks.items():
        if key in module._forward_hooks_with_kwargs:
            result = hook(module, args, kwargs, output)
        else:
            result = hook(module, args, output)
        if result is not None:
            output = result
    return output


_SIMPLE_SIGNATURES: dict[types.CodeType, tuple] = {}


def _bind_simple(fn, params: tuple, args: tuple, kwargs: dict) -> dict | None:
    """The binding of a call to a function without *args, **kwargs or keyword-only parameters, or
    None when the general binder has to answer (a missing argument, an unknown or repeated keyword)."""
    trailing = params[len(args) :]
    if any(k not in trailing for k in kwargs):
        return None
    defaults = fn.__defaults__ or ()
    first_default = len(params) - len(defaults)
    bound = dict(zip(params, args))
    for i, name in enumerate(trailing, start=len(args)):
        if name in kwargs:
            bound[name] = kwargs[name]
        elif i >= first_default:
            bound[name] = defaults[i - first_default]
        else:
            return None
    return bound


def bind(fn: types.FunctionType, args: tuple, kwargs: dict) -> dict:
    """The arguments of a call by parameter name, defaults applied (what guards read as `L`),
    bound by the code object as CPython binds them (a `__signature__` is ignored)."""
    code = fn.__code__
    names = _SIMPLE_SIGNATURES.get(code)
    if names is None:
        simple = not (code.co_flags & 0x0C) and not code.co_kwonlyargcount
        names = _SIMPLE_SIGNATURES[code] = (code.co_varnames[: code.co_argcount], simple)
    params, simple = names
    if simple and not kwargs and len(args) == len(params):
        return dict(zip(params, args))
    if simple and len(args) <= len(params):
        # Trailing parameters from keywords or defaults, without the general binder: a module's
        # forward(x, mask=None) called as m(x) binds here on every call.
        bound = _bind_simple(fn, params, args, kwargs)
        if bound is not None:
            return bound
    return bind_to_code(fn, args, kwargs)
