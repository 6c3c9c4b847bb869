"""Tensors made from Python data on the traced program's own device (`torch.tensor(data, device=x.device)`).

The tracer runs programs on meta tensors, so a torch function that builds a small tensor from
Python data on its input's device (`torch.unravel_index` does, for its coefficients) asks for a
meta tensor: its numbers are gone, and the ATen ops that read it receive a tensor no traced op
produced. While the tracer runs, such a call makes the tensor on the CPU instead, records it as a
`torch.tensor(data)` constant (the tracer's constant rule: the graph rebuilds it on its device) and
hands the program the constant's meta twin, so later ops find it by identity.

Only data without tensors (lists and numbers) and up to the tracer's constant size is taken this
way; other calls run as they are.

A torch function written in Python reaches a torch-function mode whole, and its body then runs
with the mode popped, out of its sight. So the body of such a function (`torch.unravel_index`)
runs here with the mode pushed again, through a copy of the function whose `has_torch_function*`
checks answer False (the call was already dispatched to the modes once); the tensors its body
builds from data are then seen. The tracer enters this mode before its other torch-function modes,
so they see each call whole before it arrives here.
"""

import types

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import _disable_current_modes

_FROM_DATA = (torch.tensor, torch.as_tensor, torch.asarray)
_DISPATCH_CHECKS = ("has_torch_function", "has_torch_function_unary", "has_torch_function_variadic")


def _body_of(func):
    """`func` as a function whose own `has_torch_function*` checks answer False, or None when it is
    not a module-level Python function of torch that makes them. Its globals are copied at every call, so a
    module global assigned later (a lazy import) is read as the function itself would read it."""
    if not isinstance(func, types.FunctionType) or not (func.__module__ or "").startswith("torch"):
        return None
    if "." in func.__qualname__:
        # a method (`Tensor.unflatten`): its C implementation dispatches again under its own name
        return None
    if not any(n in func.__code__.co_names for n in _DISPATCH_CHECKS):
        return None
    namespace = {**func.__globals__, **dict.fromkeys(_DISPATCH_CHECKS, _never)}
    body = types.FunctionType(func.__code__, namespace, func.__name__, func.__defaults__, func.__closure__)
    body.__kwdefaults__ = func.__kwdefaults__
    return body


def _never(*args, **kwargs) -> bool:
    return False


def _holds_tensor(data) -> bool:
    if isinstance(data, torch.Tensor):
        return True
    if isinstance(data, (list, tuple)):
        return any(_holds_tensor(d) for d in data)
    return False


def _is_meta(device) -> bool:
    return device is not None and torch.device(device).type == "meta"


class MetaDataConstants(TorchFunctionMode):
    """While the tracer runs: tensors from Python data asked for on the meta device are constants."""

    def __init__(self, recorder, max_elements: int):
        super().__init__()
        self.recorder = recorder
        self.max_elements = max_elements
        self.kept: list[torch.Tensor] = []  # the CPU tensors, alive so their ids stay theirs
        self.running: set = set()  # the Python torch functions whose bodies run now

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if (
            func in _FROM_DATA
            and args
            and _is_meta(kwargs.get("device"))
            and not kwargs.get("requires_grad", False)
            and not _holds_tensor(args[0])
        ):
            with _disable_current_modes():
                data = func(*args, **{**kwargs, "device": "cpu"})
                if data.numel() <= self.max_elements:
                    self.kept.append(data)
                    value = self.recorder.constant(data)
                    twin = self.recorder.meta_twins[id(data)]
                    self.recorder.bind(twin, value)
                    return twin
        body = _body_of(func) if func not in self.running else None
        if body is not None:
            self.running.add(func)  # a call of itself inside its body runs as it is
            try:
                with self:
                    return body(*args, **kwargs)
            finally:
                self.running.discard(func)
        return func(*args, **kwargs)
