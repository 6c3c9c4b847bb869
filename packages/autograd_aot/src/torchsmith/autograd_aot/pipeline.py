"""The lowering pipeline, as one flat list of steps: trace -> functionalize -> decompose -> partition."""

from collections.abc import Callable, Collection
from dataclasses import dataclass, replace

from torchsmith.autograd_aot.functionalize import functionalize
from torchsmith.autograd_aot.partition import MemoryReport, partition
from torchsmith.autograd_aot.trace import TracedProgram, trace
from torchsmith.ir import Graph
from torchsmith.ir.events import emit
from torchsmith.ir.passes import Pipeline, Step, undecorated


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


@dataclass(frozen=True, slots=True)
class AotState:
    """What the autograd_aot pipeline carries from step to step. `graph` is the torch-level graph,
    then the traced ATen graph, the functional graph, the decomposed graph and, once partitioned,
    the forward (`backward` beside it)."""

    graph: Graph
    example_inputs: tuple
    training: bool
    device: str | None = None
    traced: TracedProgram | None = None
    mutated: tuple[int, ...] = ()
    backward: Graph | None = None
    num_saved: int = 0
    report: MemoryReport | None = None

    def stamped(self, pass_name: str, seconds: float) -> "AotState":
        """The state with its graphs stamped (the pass runner's timing record)."""
        backward = None if self.backward is None else self.backward.stamped(pass_name, seconds)
        return replace(self, graph=self.graph.stamped(pass_name, seconds), backward=backward)


def _trace(state: AotState) -> AotState:
    traced = undecorated(trace)(state.graph, list(state.example_inputs), training=state.training,
                               device=state.device)
    return replace(state, graph=traced.graph, traced=traced)


def _functionalize(state: AotState) -> AotState:
    joint, mutated = undecorated(functionalize)(state.graph, state.traced.num_outputs)
    return replace(state, graph=joint, mutated=mutated)


def _decompose_with(decompose: Callable[[Graph], Graph]) -> Callable[[AotState], AotState]:
    return lambda state: replace(state, graph=decompose(state.graph))


def _partition_saving(saved_names: Collection[str] | None) -> Callable[[AotState], AotState]:
    def step(state: AotState) -> AotState:
        traced = state.traced
        if not traced.is_training:  # inference: the functional graph is the forward
            return state
        num_forward_outputs = traced.num_outputs + len(state.mutated)
        parts = undecorated(partition)(state.graph, traced.num_inputs, num_forward_outputs,
                                       saved_names=saved_names, mutated_inputs=state.mutated)
        return replace(state, graph=parts.forward, backward=parts.backward, num_saved=parts.num_saved,
                       report=parts.report)

    return step


def aot_pipeline(decompose: Callable[[Graph], Graph] | None = None, *,
                 saved_names: Collection[str] | None = None) -> Pipeline:
    """The steps of `lower`, in order; `decompose` (ATen -> prims, e.g. `torchsmith.prims.decompose`)
    adds a step before the partition, and `saved_names` fixes what the partition saves.

    >>> print(aot_pipeline())
    autograd_aot pipeline:
      trace          -> ATen graph (joint forward+backward when training)
      functionalize  -> functional ATen graph, mutations as outputs
      partition      -> forward and backward graphs (min-cut); inference: unchanged
    """
    steps = [Step("trace", _trace, "ATen graph (joint forward+backward when training)"),
             Step("functionalize", _functionalize, "functional ATen graph, mutations as outputs")]
    if decompose is not None:
        steps.append(Step("decompose", _decompose_with(decompose), "the same graph decomposed (prims)"))
    partitioned = "forward and backward graphs (min-cut); inference: unchanged"
    steps.append(Step("partition", _partition_saving(saved_names), partitioned))
    return Pipeline("autograd_aot", tuple(steps))


def lower(graph: Graph, example_inputs, *, training: bool, decompose: Callable[[Graph], Graph] | None = None,
          device: str | None = None, saved_names: Collection[str] | None = None,
          emit_events: bool = True) -> Lowered:
    """Lower a torch-level graph to functional ATen forward (and backward) graphs for these inputs,
    through `aot_pipeline` (verified between steps when TORCHSMITH_VERIFY=1). With `emit_events`,
    the graphs are also sent to compile-event observers (`emit_graphs`)."""
    start = AotState(graph, tuple(example_inputs), training, device)
    pipeline = aot_pipeline(decompose, saved_names=saved_names)
    after = {run.step: run.state for run in pipeline.iterate(start)}
    final = after["partition"]
    # the program as traced, its graph carrying the trace's stamp
    traced = replace(final.traced, graph=after["trace"].graph)
    functional = after["functionalize"].graph
    decomposed = after["decompose"].graph if decompose is not None else None
    lowered = Lowered(traced, final.mutated, final.graph, final.backward, final.num_saved, final.report,
                      functional=functional, decomposed=decomposed)
    if emit_events:
        emit_graphs(lowered)
    return lowered
