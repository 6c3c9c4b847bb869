"""The kinds of IR a pass runner can check and dump, keyed by Python type.

`Graph` is registered here; a stage with an IR of its own plugs in its verifier and text form::

    register_ir_kind(LoopProgram, IRKind("loop IR", verify=verify_loops, format=format_program))

The runner (`torchsmith.ir.passes`) then verifies and dumps any value of that type a step produces,
whether the step's state is the IR itself or a dataclass (or named tuple) holding it in a field.
"""

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from torchsmith.ir.graph import Graph


@dataclass(frozen=True, slots=True)
class IRKind:
    """How the runner treats one kind of IR: `verify(ir)` raises on invalid IR (its return value is
    ignored); `format(ir)` is the text written to a dump file ending in `suffix`."""

    name: str
    verify: Callable[[Any], object]
    format: Callable[[Any], str]
    suffix: str = "txt"


_KINDS: dict[type, IRKind] = {}


def register_ir_kind(cls: type, kind: IRKind) -> None:
    """Verify and dump values of type `cls` (and its subclasses) with `kind` between pipeline steps.
    Registering a type again replaces its entry (a stage reloaded in tests)."""
    _KINDS[cls] = kind


def ir_kind_of(value) -> IRKind | None:
    """The registered kind of `value`'s type (or of its nearest registered base), else None."""
    for cls in type(value).__mro__:
        kind = _KINDS.get(cls)
        if kind is not None:
            return kind
    return None


def ir_parts(state) -> list[tuple[str, Any]]:
    """The IR values of a pipeline state as (field, value): the state itself (field "") when it is
    IR, else its dataclass or named-tuple fields that hold IR."""
    if ir_kind_of(state) is not None:
        return [("", state)]
    if dataclasses.is_dataclass(state) and not isinstance(state, type):
        pairs = [(f.name, getattr(state, f.name)) for f in dataclasses.fields(state)]
    elif isinstance(state, tuple) and hasattr(state, "_fields"):
        pairs = list(zip(state._fields, state))
    else:
        return []
    return [(name, value) for name, value in pairs if ir_kind_of(value) is not None]


def _verify_graph(graph: Graph) -> Graph:
    from torchsmith.ir.verifier import verify

    return verify(graph)


def _format_graph(graph: Graph) -> str:
    from torchsmith.ir.text import format_graph

    return format_graph(graph)


register_ir_kind(Graph, IRKind("graph", verify=_verify_graph, format=_format_graph))
