"""Calls of operators defined with `torch.library` (`torch.ops.transformers.grouped_mm_fallback(...)`).

A custom op is opaque by design (transformers wraps a data-dependent loop in one so compilers keep
it whole), so capture records it as one graph op under its overload's name
(`transformers.grouped_mm_fallback.default`), registered in the op registry on first use with the
overload as its eager implementation. Capture needs the op's output types without running it, so
the op must have a Meta kernel (`torch.library.register_fake` installs one); later stages see the
same overload below the dispatcher and keep it as an extern call.

Ops that mutate or alias their arguments, or that have no Meta kernel, are graph breaks naming the
op and what it lacks.
"""

import torch

from torchsmith.capture.aten_calls import packet_overload
from torchsmith.capture.errors import Unsupported
from torchsmith.capture.tensors import to_graph_arg
from torchsmith.ir import lookup_op, op_name_of, register_op
from torchsmith.ir.errors import UnknownOpError

# Namespaces whose ops other parts of capture or the registry own
_BUILT_IN_NAMESPACES = frozenset({"aten", "prims", "prim", "_c10d_functional", "c10d", "profiler"})


def is_custom_op(value) -> bool:
    """Whether `value` is an operator packet or overload defined outside torch's own namespaces."""
    if isinstance(value, torch._ops.OpOverloadPacket):
        namespace = value._qualified_op_name.split("::", 1)[0]
    elif isinstance(value, torch._ops.OpOverload):
        namespace = value.namespace
    else:
        return False
    return namespace not in _BUILT_IN_NAMESPACES


def custom_op_overload(value, args: list, kwargs: dict) -> torch._ops.OpOverload:
    """The overload a call of `value` runs, checked to be one capture can record."""
    if isinstance(value, torch._ops.OpOverloadPacket) and len(value.overloads()) == 1:
        overload = getattr(value, value.overloads()[0])
    elif isinstance(value, torch._ops.OpOverloadPacket):
        packet = value._qualified_op_name.replace("::", ".")
        graph_args = tuple(to_graph_arg(a, packet) for a in args)
        graph_kwargs = {k: to_graph_arg(v, packet) for k, v in kwargs.items()}
        overload = packet_overload(value, graph_args, graph_kwargs)
    else:
        overload = value
    schema = overload._schema
    name = overload.name()
    if schema.is_mutable or any(r.alias_info is not None for r in schema.returns):
        raise Unsupported(
            f"custom op {name} mutates or aliases its arguments ({schema}); capture records functional "
            "custom ops only"
        )
    if not torch._C._dispatch_has_kernel_for_dispatch_key(name, "Meta"):
        raise Unsupported(
            f"custom op {name} has no fake (meta) implementation, so capture cannot infer its output "
            "types: register one with torch.library.register_fake"
        )
    return overload


def custom_op_name(overload: torch._ops.OpOverload) -> str:
    """The graph op standing for `overload` (`transformers.grouped_mm_fallback.default`), registered
    on first use with the overload as its eager implementation."""
    name = op_name_of(overload)
    try:
        lookup_op(name)
    except UnknownOpError:
        register_op(name, overload, doc=f"the torch.library custom op {overload.name()}")
    return name
