"""Keep torch from importing TorchDynamo while torchsmith compiles.

Many of torch's own Python kernels (the meta kernels that shape inference runs, and the
`__torch_dispatch__` of every TorchDispatchMode subclass) are wrapped by `torch._disable_dynamo`,
whose first call imports `torch._dynamo` (1.5-2 s on a 2-core machine, more than the rest of a cold
compile) only to mark the function "not traced by dynamo". While `torch._dynamo` is not imported,
dynamo cannot be tracing anything, so that wrapper has nothing to do: `defer_dynamo_import` makes
those functions call straight through until `torch._dynamo` is imported by someone else, and from
then on installs dynamo's own wrapper exactly as torch would have.
"""

import gc
import sys
import types

_WALKED = [False]


def _inner_code():
    import torch._compile

    return torch._compile._disable_dynamo(lambda: None).__code__


def defer_dynamo_import(*functions) -> int:
    """Let torch's `_disable_dynamo` wrappers run without importing dynamo (see the module docstring).

    The first call finds every such wrapper alive (one pass over the garbage collector's objects,
    ~0.1 s); `functions` are wrappers made later (e.g. a dispatch mode's `__torch_dispatch__`).
    Returns how many functions it changed. Does nothing once `torch._dynamo` is imported.
    """
    if "torch._dynamo" in sys.modules:
        return 0
    code = _inner_code()
    candidates = list(functions)
    if not _WALKED[0]:
        _WALKED[0] = True
        candidates += [o for o in gc.get_objects() if type(o) is types.FunctionType and o.__code__ is code]
    changed = 0
    for inner in candidates:
        if getattr(inner, "__code__", None) is not code or inner.__closure__ is None:
            continue
        cells = dict(zip(code.co_freevars, inner.__closure__))
        fn, recursive = cells["fn"].cell_contents, cells["recursive"].cell_contents
        if getattr(fn, "__dynamo_disable", None) is None:
            fn.__dynamo_disable = _until_dynamo_is_imported(fn, recursive)
            changed += 1
    return changed


def _until_dynamo_is_imported(fn, recursive: bool):
    def call(*args, **kwargs):
        dynamo = sys.modules.get("torch._dynamo")
        if dynamo is not None:  # from now on exactly what torch._disable_dynamo would have done
            real = dynamo.disable(fn, recursive, wrapping=False)
            fn.__dynamo_disable = real
            return real(*args, **kwargs)
        return fn(*args, **kwargs)

    return call
