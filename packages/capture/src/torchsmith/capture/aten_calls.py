"""Calls of ATen operator packets (`torch.ops.aten._softmax_backward_data(...)`).

An overload (`torch.ops.aten.sort.default`) is an op of the graph under its own name. A packet
picks its overload from the arguments when called, so capture picks the same way: the overloads
whose schema binds the arguments (count, keyword names, tensors where tensors go; `out=` variants
never), and among several, the one a run of the packet on meta copies of the arguments reaches
first (a composite overload reaches another inside it, so the run alone cannot tell). A call that
binds no overload, or several that the run does not tell apart, is a graph break naming the packet.
"""

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from torchsmith.capture.errors import Unsupported
from torchsmith.capture.tensors import _to_meta


class _FirstOverload(TorchDispatchMode):
    """Notes the first ATen overload that reaches the dispatcher, then runs it."""

    def __init__(self):
        super().__init__()
        self.overload = None

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if self.overload is None:
            self.overload = func
        return func(*args, **(kwargs or {}))


def is_aten_packet(value) -> bool:
    return isinstance(value, torch._ops.OpOverloadPacket) and value._qualified_op_name.startswith("aten::")


def _binds(schema, args: tuple, kwargs: dict) -> bool:
    """Whether `schema` accepts these arguments by count, keyword names and tensor positions."""
    if any(a.is_out for a in schema.arguments):
        return False
    positional = [a for a in schema.arguments if not a.kwarg_only]
    if len(args) > len(positional):
        return False
    names = {a.name for a in schema.arguments}
    if not set(kwargs) <= names or any(a.name in kwargs for a in positional[: len(args)]):
        return False
    given = dict(zip((a.name for a in positional), args)) | kwargs
    for argument in schema.arguments:
        value = given.get(argument.name)
        if value is None and argument.name not in given:
            if not argument.has_default_value():
                return False
            continue
        optional = isinstance(argument.type, torch._C.OptionalType)
        if value is None:
            if not optional:
                return False
            continue
        element = argument.type.getElementType() if optional else argument.type
        if isinstance(element, torch._C.TensorType) != isinstance(value, torch.Tensor):
            return False
    return True


def packet_overload(packet, graph_args: tuple, graph_kwargs: dict):
    """The overload of `packet` that torch picks for these arguments (graph values and constants)."""
    name = packet._qualified_op_name.replace("::", ".")
    meta_args = [_to_meta(a) for a in graph_args]
    meta_kwargs = {k: _to_meta(v) for k, v in graph_kwargs.items()}
    overloads = [packet.__getattr__(o) for o in packet.overloads()]
    fitting = [o for o in overloads if _binds(o._schema, tuple(meta_args), meta_kwargs)]
    if len(fitting) == 1:
        return fitting[0]
    probe = _FirstOverload()
    try:
        with torch.no_grad(), probe:
            packet(*meta_args, **meta_kwargs)
    except Exception as e:
        raise Unsupported(f"{name} failed on meta tensors: {type(e).__name__}: {e}") from e
    if probe.overload in fitting:
        return probe.overload
    found = ", ".join(o._overloadname for o in fitting) or "none"
    raise Unsupported(f"{name}: cannot tell which overload the call picks (its arguments fit: {found})")
