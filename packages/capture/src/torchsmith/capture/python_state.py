"""`id()`, `contextvars.ContextVar` and `functools.lru_cache` functions in captured code.

`id(obj)` is a constant when the object's identity is pinned: it is read through a source and
guarded with `is`, or it is a module, class or function (objects that live as long as the code
that names them). The id of a tensor or of a value made during capture changes from call to call,
so it stays a graph break.

A `ContextVar` is shadowed during capture: `set` records the new value's tracker and returns a
token, `reset` restores the value the token remembers, and `get` reads the shadow, or the real
variable (guarded) when the captured code has not set it. Sets must be undone within the same
capture (the `set` ... `try: ... finally: reset(token)` pattern); a set still open when the graph
ends or breaks would be invisible to the code that runs natively afterwards, so that capture is
refused and the function runs eagerly (see `open_context_sets`).
"""

import contextvars
import types

import torch

from torchsmith.capture.errors import Unsupported
from torchsmith.capture.variables import ConstVar

_MISSING = object()


class ShadowToken:
    """What `ContextVar.set` returns during capture: the variable and the value it replaced."""

    __slots__ = ("var", "previous")

    def __init__(self, var: contextvars.ContextVar, previous):
        self.var = var
        self.previous = previous  # a tracker, or _MISSING when the shadow was not set before


def is_context_var_method(value) -> bool:
    """Whether `value` is `get`, `set` or `reset` bound to a ContextVar."""
    return isinstance(value, types.BuiltinMethodType) and isinstance(
        getattr(value, "__self__", None), contextvars.ContextVar
    )


class PythonStateOps:
    """Mixin of the Tracer."""

    def builtin_id(self, args, kwargs):
        (obj,) = args
        source = getattr(obj, "source", None)
        if isinstance(obj, ConstVar):
            value = obj.value
            if isinstance(value, (types.ModuleType, type, types.FunctionType, types.BuiltinFunctionType)):
                return ConstVar(id(value))
            if source is not None and not _is_immutable_constant(value):
                self.guards.identity(source, value)
                return ConstVar(id(value))
        if source is not None and not isinstance(obj, ConstVar):
            real = self.mutables_by_id_value(obj)
            if real is not None:
                self.guards.identity(source, real)
                return ConstVar(id(real))
        raise Unsupported(
            f"id() of {obj.describe()}: its identity is not fixed across calls (it runs eagerly)"
        )

    def mutables_by_id_value(self, tracker):
        """The runtime list or dict a container tracker was read from, if any."""
        for seen_tracker, value in self.mutables_by_id.values():
            if seen_tracker is tracker:
                return value
        return None

    def call_memoized(self, fn, args, kwargs):
        """A `functools.lru_cache`/`cache` function called with constants (`is_torch_available()`):
        called now, as the eager call would (filling its cache), and its answer is a constant of
        the graph; the cache promises the same answer for the same arguments. An answer that is
        not a plain constant, or a call with traced values, is a graph break."""
        tracked = [*args, *kwargs.values()]
        if not all(isinstance(a, ConstVar) and _is_immutable_constant(a.value) for a in tracked):
            raise Unsupported(f"call to {fn.__qualname__} (functools.lru_cache) with non-constant arguments")
        result = fn(*[a.value for a in args], **{k: v.value for k, v in kwargs.items()})
        if not _is_immutable_constant(result):
            raise Unsupported(f"{fn.__qualname__} (functools.lru_cache) returned a {type(result).__name__}")
        return ConstVar(result)

    def context_var_call(self, method, fn_source: str | None, args, kwargs):
        """`var.get(...)`, `var.set(value)` or `var.reset(token)` on the shadow of `var`."""
        var, name = method.__self__, method.__name__
        shadow = self.context_shadow()
        if name == "set":
            (value,) = args
            token = ShadowToken(var, shadow.get(var, _MISSING))
            shadow[var] = value
            return ConstVar(token)
        if name == "reset":
            token = self.as_python(args[0])
            if not isinstance(token, ShadowToken) or token.var is not var:
                raise Unsupported(
                    f"ContextVar {var.name!r}: reset with a token set outside the compiled code"
                )
            if token.previous is _MISSING:
                shadow.pop(var, None)
            else:
                shadow[var] = token.previous
            return ConstVar(None)
        if name == "get":
            if var in shadow:
                return shadow[var]
            defaults = [self.as_python(a) for a in args]
            try:
                current = var.get(*defaults)
            except LookupError as e:
                raise Unsupported(f"ContextVar {var.name!r} has no value (LookupError)") from e
            if fn_source is None:
                raise Unsupported(f"ContextVar {var.name!r} read through a path capture cannot guard")
            literals = ", ".join(self.ns.literal(d) for d in defaults)
            return self.wrap(current, f"{fn_source}.__self__.get({literals})")
        raise Unsupported(f"ContextVar.{name}")

    def context_shadow(self) -> dict:
        shadow = getattr(self, "_context_shadow", None)
        if shadow is None:
            shadow = self._context_shadow = {}
        return shadow

    def open_context_sets(self) -> list[str]:
        """Names of ContextVars set during capture and not reset (the capture cannot be used)."""
        return [var.name for var in self.context_shadow()]


def _is_immutable_constant(value) -> bool:
    return value is None or isinstance(value, (bool, int, float, str, bytes, complex, tuple, torch.dtype))


def refuse_open_context_sets(tracer, where: str) -> None:
    """Raise when the capture leaves a ContextVar set (code run natively would not see it)."""
    names = tracer.open_context_sets()
    if names:
        raise Unsupported(
            f"ContextVar {', '.join(map(repr, names))} is set in the compiled code and still set at "
            f"{where}; code running natively after it would not see the value"
        )
