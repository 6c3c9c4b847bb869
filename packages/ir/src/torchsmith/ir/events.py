"""Compile events: how the stages tell observers (logs, IR dumps, the HTML report) what they did.

A stage calls `emit(stage, kind, **payload)` at each step worth seeing; observers subscribe with
`observe()` (a context manager collecting events into a list) or `subscribe(fn)`. With no observer
an emit costs one truthiness test, so stages emit unconditionally.

The events the stages emit (payload keys in brackets):

- `capture/graph`      a captured graph [graph, code_name, filename, first_line, guards, seconds]
- `capture/break`      a graph break [reason, filename, line]
- `autograd_aot/graph` an ATen-level graph [name, graph]: "aten" (the functional graph: joint forward+backward
                       when training), then, when training, "forward" and "backward" (the partition)
- `prims/graph`        a graph after decomposition to prims [name: "joint" | "inference", graph]
- `inductor/loops`     a loop program [name, program]
- `inductor/fusion`    the scheduler's decisions [name, decisions]
- `inductor/code`      generated source [name, language: "c++" | "triton", source]
- `inductor/fallback`  an op run through its eager implementation (no loop lowering) [name, op, reason]
- `<stage>/time`       seconds spent in one step of a stage [step, seconds] (`capture/time`: capture alone,
                       without the backend call)
- `compile_api/fallback` a stage failed on a graph [graph, stage, op, source, reason, when,
                       action: "eager" | "raise"]
- `compile_api/ddp_split` a graph compiled under DDP cut at its gradient buckets [graph, cuts, buckets
                       (graph input names, bucket 0 first), pieces (their graphs)]
"""

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class Event:
    stage: str
    kind: str
    payload: dict = field(default_factory=dict)


_SUBSCRIBERS: list[Callable[[Event], None]] = []


def emit(stage: str, kind: str, /, **payload) -> None:
    """Tell every subscriber that `stage` did `kind` (see the module docstring for the known kinds).
    Positional-only, so a payload may have keys named `stage` or `kind` too."""
    if _SUBSCRIBERS:
        event = Event(stage, kind, payload)
        for fn in tuple(_SUBSCRIBERS):
            fn(event)


def subscribe(fn: Callable[[Event], None]) -> Callable[[], None]:
    """Call `fn(event)` for every event from now on; returns a function that unsubscribes it."""
    _SUBSCRIBERS.append(fn)
    return lambda: _SUBSCRIBERS.remove(fn) if fn in _SUBSCRIBERS else None


@contextmanager
def observe() -> Iterator[list[Event]]:
    """Collect the events emitted inside the `with` block into the list it yields."""
    events: list[Event] = []
    unsubscribe = subscribe(events.append)
    try:
        yield events
    finally:
        unsubscribe()
