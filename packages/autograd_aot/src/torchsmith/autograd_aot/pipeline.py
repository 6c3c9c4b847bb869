"""The lowering pipeline, as one flat list of steps: trace -> functionalize -> decompose -> partition."""

import time
from collections.abc import Callable, Collection
from dataclasses import dataclass

from torchsmith.autograd_aot.functionalize import functionalize
from torchsmith.autograd_aot.partition import MemoryReport, partition
from torchsmith.autograd_aot.trace import TracedProgram, trace
from torchsmith.ir import Graph
from torchsmith.ir.events import emit
from torchsmith.ir.verifier import maybe_verify


@dataclass(frozen=True, slots=True)
class Lowered:
    """The ATen graphs of one program and what the runtime needs to call them.

    `forward` returns the user-visible bases, then the new values of `mutated_inputs`, then the
    `num_saved` values kept for `backward` (None for inference), which takes those saved values
    followed by one tangent per differentiable output.
    """

    traced: TracedProgram
    mutated_inputs: tuple[int, ...]
    forward: Graph
    backward: Graph | None = None
    num_saved: int = 0
    report: MemoryReport | None = None
    # the functional ATen graph (joint forward+backward when training) and, when a `decompose` ran,
    # that graph decomposed: kept for the compile events (IR dumps, reports)
    functional: Graph | None = None
    decomposed: Graph | None = None
    # (expr, d) pairs: a symbolic lowering holds only for sizes where expr % d == 0 (see symbolic.py)
    size_conditions: tuple = ()


def emit_graphs(lowered: Lowered) -> None:
    """Tell observers (torchsmith.ir.events) about the graphs of one lowering: `autograd_aot/graph`
    "aten" (the functional ATen graph), `prims/graph` "joint"/"inference" (it, decomposed, when a
    `decompose` ran), then `autograd_aot/graph` "forward" and "backward" when training."""
    if lowered.functional is not None:
        emit("autograd_aot", "graph", name="aten", graph=lowered.functional)
    if lowered.decomposed is not None:
        name = "joint" if lowered.backward is not None else "inference"
        emit("prims", "graph", name=name, graph=lowered.decomposed)
    if lowered.backward is not None:
        emit("autograd_aot", "graph", name="forward", graph=lowered.forward)
        emit("autograd_aot", "graph", name="backward", graph=lowered.backward)


def _emit_times(graph: Graph, steps: tuple[str, ...]) -> None:
    for stamp in graph.stamps:
        if stamp.pass_name in steps:
            emit("autograd_aot", "time", step=stamp.pass_name, seconds=stamp.seconds)


def lower(graph: Graph, example_inputs, *, training: bool, decompose: Callable[[Graph], Graph] | None = None,
          device: str | None = None, saved_names: Collection[str] | None = None,
          emit_events: bool = True) -> Lowered:
    """Lower a torch-level graph to functional ATen forward (and backward) graphs for these inputs.
    With `emit_events`, the graphs are also sent to compile-event observers (`emit_graphs`)."""
    # maybe_verify checks every intermediate graph when TORCHSMITH_VERIFY=1 (a no-op otherwise).
    traced = trace(graph, list(example_inputs), training=training, device=device)
    joint, mutated = functionalize(maybe_verify(traced.graph), traced.num_outputs)
    _emit_times(joint, ("trace", "functionalize"))
    functional, decomposed = joint, None
    if decompose is not None:
        start = time.perf_counter()
        joint = decomposed = decompose(maybe_verify(joint)).stamped("decompose", time.perf_counter() - start)
    if not traced.is_training:
        lowered = Lowered(traced, mutated, maybe_verify(joint), functional=functional, decomposed=decomposed)
    else:
        parts = partition(maybe_verify(joint), traced.num_inputs, traced.num_outputs + len(mutated),
                          saved_names=saved_names, mutated_inputs=mutated)
        _emit_times(parts.forward, ("partition",))
        forward, backward = maybe_verify(parts.forward), maybe_verify(parts.backward)
        lowered = Lowered(traced, mutated, forward, backward, parts.num_saved, parts.report,
                          functional=functional, decomposed=decomposed)
    if emit_events:
        emit_graphs(lowered)
    return lowered
