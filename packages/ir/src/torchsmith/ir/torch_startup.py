"""Keep torch from importing TorchDynamo while torchsmith compiles.

Many of torch's own Python kernels (the meta kernels that shape inference runs, and the
`__torch_dispatch__` of every TorchDispatchMode subclass) are wrapped by `torch._disable_dynamo`,
whose first call imports `torch._dynamo` (1.5-2 s on a 2-core machine, more than the rest of a cold
compile) only to mark the function "not traced by dynamo". While `torch._dynamo` is not imported,
dynamo cannot be tracing anything, so that wrapper has nothing to do: `defer_dynamo_import` makes
those functions call straight through until `torch._dynamo` is imported by someone else, and from
then on installs dynamo's own wrapper exactly as torch would have.

The patch relies on the shape of torch's wrapper: a closure over `fn` and `recursive` that looks up
`fn.__dynamo_disable` before importing dynamo. On a torch whose wrapper looks different (other free
variables, no such lookup, or no `torch._compile._disable_dynamo` at all), it changes nothing and
torch behaves as it always does.
"""

import gc
import sys
import types

_WALKED = [False]


_EXPECTED_FREE_VARIABLES = ("fn", "recursive")
_CACHE_ATTRIBUTE = "__dynamo_disable"


def _inner_code():
    """The code object of torch's `_disable_dynamo` wrapper, or None when it is not the wrapper
    this module knows how to patch."""
    try:
        import torch._compile

        code = torch._compile._disable_dynamo(lambda: None).__code__
    except Exception:  # a torch without the wrapper, or with one that works differently
        return None
    if not isinstance(code, types.CodeType) or tuple(sorted(code.co_freevars)) != _EXPECTED_FREE_VARIABLES:
        return None
    if _CACHE_ATTRIBUTE not in code.co_names and _CACHE_ATTRIBUTE not in code.co_consts:
        return None
    return code


def _wrapped_function(inner, code):
    """(fn, recursive) from a wrapper's closure, or None when the closure is not what it should be."""
    closure = getattr(inner, "__closure__", None)
    if getattr(inner, "__code__", None) is not code or closure is None:
        return None
    if len(closure) != len(code.co_freevars):
        return None
    try:
        cells = {name: cell.cell_contents for name, cell in zip(code.co_freevars, closure, strict=True)}
    except ValueError:  # an empty cell
        return None
    fn, recursive = cells["fn"], cells["recursive"]
    if not callable(fn) or not isinstance(recursive, bool):
        return None
    return fn, recursive


def defer_dynamo_import(*functions) -> int:
    """Let torch's `_disable_dynamo` wrappers run without importing dynamo (see the module docstring).

    The first call finds every such wrapper alive (one pass over the garbage collector's objects,
    ~0.1 s); `functions` are wrappers made later (e.g. a dispatch mode's `__torch_dispatch__`).
    Returns how many functions it changed. Does nothing once `torch._dynamo` is imported.
    """
    if "torch._dynamo" in sys.modules:
        return 0
    code = _inner_code()
    if code is None:
        return 0
    candidates = list(functions)
    if not _WALKED[0]:
        _WALKED[0] = True
        candidates += [o for o in gc.get_objects() if type(o) is types.FunctionType and o.__code__ is code]
    changed = 0
    for inner in candidates:
        found = _wrapped_function(inner, code)
        if found is None:
            continue
        fn, recursive = found
        if getattr(fn, _CACHE_ATTRIBUTE, None) is None:
            try:
                setattr(fn, _CACHE_ATTRIBUTE, _until_dynamo_is_imported(fn, recursive))
            except (AttributeError, TypeError):  # a builtin or slotted callable takes no attributes
                continue
            changed += 1
    return changed


def _until_dynamo_is_imported(fn, recursive: bool):
    def call(*args, **kwargs):
        dynamo = sys.modules.get("torch._dynamo")
        if dynamo is not None:  # from now on exactly what torch._disable_dynamo would have done
            real = dynamo.disable(fn, recursive, wrapping=False)
            setattr(fn, _CACHE_ATTRIBUTE, real)
            return real(*args, **kwargs)
        return fn(*args, **kwargs)

    return call
