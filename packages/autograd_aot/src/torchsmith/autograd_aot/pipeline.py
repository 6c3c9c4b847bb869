"""The lowering pipeline, as one flat list of steps: trace -> functionalize -> decompose -> partition."""

import time
from collections.abc import Callable, Collection
from dataclasses import dataclass

from torchsmith.autograd_aot.functionalize import functionalize
from torchsmith.autograd_aot.partition import MemoryReport, partition
from torchsmith.autograd_aot.trace import TracedProgram, trace
from torchsmith.ir import Graph
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


def lower(graph: Graph, example_inputs, *, training: bool, decompose: Callable[[Graph], Graph] | None = None,
          device: str | None = None, saved_names: Collection[str] | None = None) -> Lowered:
    """Lower a torch-level graph to functional ATen forward (and backward) graphs for these inputs."""
    # maybe_verify checks every intermediate graph when TORCHSMITH_VERIFY=1 (a no-op otherwise).
    traced = trace(graph, list(example_inputs), training=training, device=device)
    joint, mutated = functionalize(maybe_verify(traced.graph), traced.num_outputs)
    if decompose is not None:
        start = time.perf_counter()
        joint = decompose(maybe_verify(joint)).stamped("decompose", time.perf_counter() - start)
    if not traced.is_training:
        return Lowered(traced, mutated, maybe_verify(joint))
    parts = partition(maybe_verify(joint), traced.num_inputs, traced.num_outputs + len(mutated),
                      saved_names=saved_names, mutated_inputs=mutated)
    forward, backward = maybe_verify(parts.forward), maybe_verify(parts.backward)
    return Lowered(traced, mutated, forward, backward, parts.num_saved, parts.report)
