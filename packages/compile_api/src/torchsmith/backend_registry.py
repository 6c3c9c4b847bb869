"""The backend registry: names -> `backend(graph: torchsmith.ir.Graph, example_inputs: list) -> callable`.

The callable a backend returns is called as `compiled(*inputs)` and returns the graph's outputs as
a list or tuple. Built in: `"eager"` (the graph as generated Python, run on eager PyTorch), `"aot_eager"`
(torchsmith.autograd_aot with forward and backward graphs run as generated Python) and `"inductor"`
(the default: autograd_aot, prims and generated C++ kernels; torchsmith.inductor_backend).
Third-party packages add backends through the entry point group `torchsmith.backends`.

    >>> import torchsmith
    >>> eager = torchsmith.lookup_backend("eager")
    >>> def counting(graph, example_inputs):
    ...     counting.graphs.append(graph)
    ...     return eager(graph, example_inputs)
    >>> counting.graphs = []
"""

import functools
import importlib.metadata
from collections.abc import Callable

from torchsmith.errors import BackendError

ENTRY_POINT_GROUP = "torchsmith.backends"

_BACKENDS: dict[str, Callable] = {}
_LAZY: dict[str, Callable[[], Callable]] = {}
_ENTRY_POINTS_LOADED = [False]


def register_backend(fn: Callable | None = None, name: str | None = None):
    """Register `fn` under `name` (default: its `__name__`); usable as a decorator, with or without
    arguments: `@register_backend` or `@register_backend(name="mine")`."""
    if fn is None:
        return lambda f: register_backend(f, name=name)
    key = name or fn.__name__
    if key in _BACKENDS or key in _LAZY:
        raise BackendError(f"a backend named {key!r} is already registered")
    _BACKENDS[key] = fn
    return fn


def lookup_backend(name: str) -> Callable:
    """The backend registered as `name`, loading a third-party one from the `torchsmith.backends`
    entry point group on first use; raises BackendError listing the known names when there is none,
    or naming the distribution and the error when its entry point fails to load."""
    if name not in _BACKENDS and name not in _LAZY:
        _load_entry_points()
    if name not in _BACKENDS and name in _LAZY:
        # Removed from the lazy table only once loaded, so a failing entry point fails the same way
        # on every lookup instead of turning into "unknown backend" on the second.
        _BACKENDS[name] = _LAZY[name]()
        del _LAZY[name]
    if name not in _BACKENDS:
        raise BackendError(f"unknown backend {name!r}; known backends: {', '.join(list_backends())}")
    return _BACKENDS[name]


def list_backends() -> list[str]:
    """Names of all registered backends, sorted."""
    _load_entry_points()
    return sorted(set(_BACKENDS) | set(_LAZY))


def resolve_backend(backend) -> Callable:
    """A backend given as a name or as a callable, as `compile(backend=...)` accepts it."""
    if isinstance(backend, str):
        return lookup_backend(backend)
    if callable(backend):
        return backend
    raise BackendError(f"backend must be a name or a callable, got {type(backend).__name__}")


def _load_entry_points() -> None:
    if _ENTRY_POINTS_LOADED[0]:
        return
    _ENTRY_POINTS_LOADED[0] = True
    for entry in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        if entry.name not in _BACKENDS and entry.name not in _LAZY:
            _LAZY[entry.name] = functools.partial(_load_entry_point, entry)


def _load_entry_point(entry: importlib.metadata.EntryPoint) -> Callable:
    """Import a third-party backend; a failure names the distribution that declared it."""
    dist = entry.dist
    origin = f"the distribution {dist.name} {dist.version}" if dist is not None else "an unknown distribution"
    where = f"backend {entry.name!r} ({entry.value}, entry point group {ENTRY_POINT_GROUP!r} of {origin})"
    try:
        backend = entry.load()
    except Exception as error:
        raise BackendError(
            f"{where} failed to load: {type(error).__name__}: {error}. Fix or reinstall that package, "
            f"or uninstall it to use the other backends"
        ) from error
    if not callable(backend):
        raise BackendError(f"{where} is a {type(backend).__name__}, not a callable "
                           f"backend(graph, example_inputs)")
    return backend


def eager(graph, example_inputs):
    """Run captured graphs on eager PyTorch, as straight-line Python generated from the graph
    (`torchsmith.ir.compile_to_python`: same results as the reference interpreter, without its
    per-node lookups)."""
    from torchsmith.ir import compile_to_python

    return compile_to_python(graph)


def _aot_eager():
    from torchsmith.autograd_aot import aot_eager_backend

    return aot_eager_backend


def _inductor():
    # torchsmith.inductor_backend: capture's graph through autograd_aot (forward and backward
    # decomposed to prims) to generated kernels; it raises UnsupportedGraphError (stage "inductor",
    # op, source line) for graphs it cannot compile, and compile() decides whether to fall back.
    from torchsmith.inductor_backend import inductor_backend

    return inductor_backend


_BACKENDS["eager"] = eager
_LAZY["aot_eager"] = _aot_eager
_LAZY["inductor"] = _inductor
