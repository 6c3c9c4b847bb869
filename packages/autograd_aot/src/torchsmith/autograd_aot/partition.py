"""Min-cut partitioning of a functional joint graph into a forward and a backward graph.

Which forward values does the backward keep? Saving everything it reads costs memory; recomputing
cheap pointwise chains in the backward from a few saved values costs a little time. We pose it as a
minimum cut: every candidate value `v` becomes an edge `v_in -> v_out` whose capacity is its size in
bytes; data edges are infinite; the source feeds values that cannot be recomputed (inputs, matmuls,
convolutions, reductions, random ops, ...) and the sink drains values the backward reads. The
cheapest cut is the set of values to save; whatever lies on the sink side is recomputed.

One kind of value is saved whatever its size: a pointwise result that a library op (matmul,
convolution, attention) reads in the forward and again in the backward, as a GELU's output is read
by the next layer's matmul and by that matmul's weight gradient. Both library calls need it in
memory, so the forward writes it anyway, and a backward recomputing it would spend a kernel pass
writing it again just to hand it to the library; eager keeps it too (the matmul saves its input).
"""

import dataclasses
from collections.abc import Collection
from dataclasses import dataclass

import torch

from torchsmith.autograd_aot.aliasing import is_view_op
from torchsmith.autograd_aot.errors import PartitionError
from torchsmith.autograd_aot.min_cut import ancestors, minimum_cut_source_side
from torchsmith.autograd_aot.rng_replay import is_random
from torchsmith.ir import Graph, Node, TensorType, Value, draws_random, evaluate, lookup_op
from torchsmith.ir.passes import graph_pass

# Cheap to recompute although not tagged pointwise: data movement and factories.
_RECOMPUTABLE = frozenset({
    "aten._to_copy", "aten.clone", "aten.copy", "aten.expand_copy", "aten.full", "aten.full_like",
    "aten.zeros", "aten.zeros_like", "aten.ones", "aten.ones_like", "aten.empty_like", "aten.empty",
    "aten.empty_strided", "aten.scalar_tensor", "aten.slice_scatter", "aten.select_scatter", "aten.fill",
    "aten.lift_fresh_copy", "aten.new_zeros", "aten.new_ones", "aten.new_empty", "aten.new_full",
})


# Kinds of prims (torchsmith.prims) that are as cheap to recompute as pointwise ATen ops.
_RECOMPUTABLE_PRIM_KINDS = ("elementwise.", "view", "shape", "conversion", "creation")


def _prim_kind(op: str) -> str | None:
    try:
        from torchsmith.prims.core import PRIMS
    except ImportError:  # graphs with prims cannot exist without the prims package
        return None
    info = PRIMS.get(op)
    return info.kind if info is not None else None


def can_recompute(op: str) -> bool:
    """Whether the partitioner may recompute `op` in the backward: pointwise ops, views and data
    movement yes; matmuls, convolutions, reductions, normalizations and random ops never."""
    if op.startswith("prims."):
        kind = _prim_kind(op)
        return kind is not None and kind.startswith(_RECOMPUTABLE_PRIM_KINDS)
    if not op.startswith("aten."):
        return False
    if draws_random(op):
        return False  # recomputing would draw new random numbers: the mask must be saved
    tags = getattr(lookup_op(op).eager, "tags", ())
    if is_view_op(op) or op.rsplit(".", 1)[0] in _RECOMPUTABLE:
        return True
    return torch.Tag.pointwise in tags


# ATen ops that read their tensor arguments from memory (library calls no code generator fuses
# into); in prims graphs those are the ops of kind "library".
_LIBRARY_ATEN = frozenset({
    "aten.mm", "aten.addmm", "aten.bmm", "aten.baddbmm", "aten.convolution", "aten.convolution_backward",
    "aten._scaled_dot_product_flash_attention_for_cpu", "aten._scaled_dot_product_efficient_attention",
    "aten._scaled_dot_product_flash_attention", "aten._scaled_dot_product_efficient_attention_backward",
    "aten._scaled_dot_product_flash_attention_backward", "aten._scaled_dot_product_cudnn_attention",
    "aten._scaled_dot_product_cudnn_attention_backward",
})
# prims that rename memory rather than compute (a library call reads through them).
_VIEW_PRIMS = frozenset({"prims.reshape", "prims.collapse", "prims.split_dim"})


def reads_from_memory(op: str) -> bool:
    """Whether `op` is a library call that reads its tensor arguments from memory (matmuls,
    convolutions, attention): a value it reads must be materialized, whatever its producer."""
    if op.startswith("prims."):
        return _prim_kind(op) == "library"
    return op.rsplit(".", 1)[0] in _LIBRARY_ATEN


def _renames_memory(op: str) -> bool:
    if op.startswith("prims."):
        return op in _VIEW_PRIMS or _prim_kind(op) == "view"
    return op.startswith("aten.") and is_view_op(op)


def _library_readers(graph: Graph) -> dict[str, list[int]]:
    """For each value, the indices of the library nodes (`reads_from_memory`) that read it directly
    or through a chain of views."""
    readers: dict[str, list[int]] = {}
    for i, node in enumerate(graph.nodes):
        for v in node.inputs:
            readers.setdefault(v.name, []).append(i)
    found: dict[str, list[int]] = {}

    def library_of(name: str) -> list[int]:
        if name not in found:
            found[name] = []  # a view chain is acyclic; this only stops a revisit
            result = []
            for i in readers.get(name, ()):
                node = graph.nodes[i]
                if reads_from_memory(node.op):
                    result.append(i)
                elif _renames_memory(node.op):
                    for out in node.outputs:
                        result.extend(library_of(out.name))
            found[name] = result
        return found[name]

    return {name: library_of(name) for name in list(readers)}


def _materialized_on_both_sides(graph: Graph, candidates: dict[str, Value], producer: dict,
                                backward_only: set[str], forward_outputs: set[str]) -> set[str]:
    """Recomputable forward values that a library op reads in the backward and that the forward
    materializes anyway (a forward library op reads them, or the forward returns them): saving them
    costs no extra pass, recomputing them costs one (see the module docstring)."""
    library = _library_readers(graph)
    chosen = set()
    for name in candidates:
        node = producer.get(name)
        if node is None or not can_recompute(node.op) or _renames_memory(node.op):
            continue
        sides = {graph.nodes[i].outputs[0].name in backward_only for i in library.get(name, ())}
        if True in sides and (False in sides or name in forward_outputs):
            chosen.add(name)
    return chosen


def nbytes(value: Value) -> int:
    """Bytes a value occupies (0 for non-tensors)."""
    t = value.type
    if not isinstance(t, TensorType):
        return 0
    numel = 1
    for d in t.shape:
        numel *= evaluate(d, {}) if not isinstance(d, int) else d
    return numel * t.dtype.itemsize


@dataclass(frozen=True, slots=True)
class MemoryReport:
    """Activation memory kept for the backward (graph inputs excluded: the caller holds them)."""

    saved_bytes: int
    save_all_bytes: int
    saved_values: tuple[str, ...]
    recomputed_nodes: int

    @property
    def saved_fraction(self) -> float:
        return self.saved_bytes / self.save_all_bytes if self.save_all_bytes else 1.0


@dataclass(frozen=True, slots=True)
class Partition:
    """`forward(inputs) -> fw outputs + saved`; `backward(saved + tangents) -> grads`."""

    forward: Graph
    backward: Graph
    num_saved: int
    report: MemoryReport

    def stamped(self, pass_name: str, seconds: float) -> "Partition":
        """Both graphs stamped (the pass runner's timing record)."""
        return dataclasses.replace(self, forward=self.forward.stamped(pass_name, seconds),
                                   backward=self.backward.stamped(pass_name, seconds))


def _storage_bytes(values, producer: dict, primal_names: set[str]) -> int:
    """Bytes kept alive by holding `values`: views count as the tensor they view, each storage
    once, and the inputs' storage not at all (the caller holds it anyway)."""
    roots: dict[str, Value] = {}
    for value in values:
        node = producer.get(value.name)
        while node is not None and is_view_op(node.op):
            value = next(v for v in node.inputs if isinstance(v.type, TensorType))
            node = producer.get(value.name)
        if value.name not in primal_names:
            roots[value.name] = value
    return sum(nbytes(v) for v in roots.values())


def _ancestors(graph: Graph, roots, stop: set[str]) -> set[int]:
    """Indices of the nodes needed to compute `roots`, not looking past the values in `stop`."""
    producers = {v.name: i for i, node in enumerate(graph.nodes) for v in node.outputs}
    needed, work = set(), [v.name for v in roots]
    while work:
        name = work.pop()
        if name in stop or name not in producers or producers[name] in needed:
            continue
        index = producers[name]
        needed.add(index)
        work.extend(v.name for v in graph.nodes[index].inputs)
    return needed


def _min_cut(candidates: dict[str, Value], producer: dict, free_names: set[str],
             needed_by_backward: dict[str, Value]) -> list[Value]:
    """The forward values to save: the cheapest cut between what cannot be recomputed and what the
    backward reads (see the module docstring)."""
    if not needed_by_backward:
        return []
    edges = []
    for name, value in candidates.items():
        node = producer.get(name)
        weight = 0 if name in free_names else nbytes(value)
        if weight and node is not None and _renames_memory(node.op):
            # At equal bytes, save the tensor a view renames: the backward takes the view again for
            # free, where a saved view the forward must write out (in its own layout) as a copy.
            weight += 1
        edges.append((f"{name}.in", f"{name}.out", weight))
        if node is None or not can_recompute(node.op):
            edges.append(("source", f"{name}.in", None))  # infinite
        else:
            edges.extend((f"{v.name}.out", f"{name}.in", None) for v in node.inputs)
    edges.extend((f"{name}.out", "sink", None) for name in needed_by_backward)
    reachable = minimum_cut_source_side(edges, "source", "sink")
    # A cut edge `v.in -> v.out` saves v; the check on the sink's ancestors skips zero-weight
    # edges (inputs) that nothing in the backward reads.
    feeds_backward = ancestors(edges, "sink")
    return [
        candidates[name] for name in candidates
        if f"{name}.in" in reachable and f"{name}.out" not in reachable and f"{name}.out" in feeds_backward
    ]


@graph_pass("partition", stage="autograd_aot", produces="forward and backward graphs (min-cut)")
def partition(joint: Graph, num_inputs: int, num_forward_outputs: int, *,
              saved_names: Collection[str] | None = None, mutated_inputs: Collection[int] = ()) -> Partition:
    """Split `joint` (inputs: `num_inputs` primals then tangents; outputs: `num_forward_outputs`
    forward outputs then gradients) by min-cut. Forward outputs keep their order, then come the saved
    values; the backward takes the saved values then the tangents. `saved_names` skips the min-cut
    and saves exactly those values (to repeat one decision on a graph of the same structure).
    `mutated_inputs` (indices) are overwritten after the forward, so they are saved as copies.
    Both graphs are stamped `partition`."""
    primals, tangents = joint.inputs[:num_inputs], joint.inputs[num_inputs:]
    fw_outputs, grads = joint.outputs[:num_forward_outputs], joint.outputs[num_forward_outputs:]
    primal_names = {v.name for v in primals}
    producer = {v.name: node for node in joint.nodes for v in node.outputs}

    # Values that depend on a tangent can only exist in the backward.
    backward_only = {v.name for v in tangents}
    for node in joint.nodes:
        if any(v.name in backward_only for v in node.inputs):
            backward_only.update(v.name for v in node.outputs)
    for v in fw_outputs:
        if v.name in backward_only:
            raise PartitionError(f"forward output %{v.name} depends on a tangent: malformed joint graph")

    # What the backward reads from the forward side.
    needed_by_backward: dict[str, Value] = {}
    for node in joint.nodes:
        if any(v.name in backward_only for v in node.outputs):
            for v in node.inputs:
                if v.name not in backward_only:
                    needed_by_backward[v.name] = v
    for v in grads:
        if v.name not in backward_only:
            needed_by_backward[v.name] = v

    candidates = {v.name: v for v in primals}
    for node in joint.nodes:
        candidates.update({v.name: v for v in node.outputs if v.name not in backward_only})
    # Inputs cost nothing to keep, except mutated ones: those must be saved as a copy.
    mutated_names = {primals[i].name for i in mutated_inputs}
    if saved_names is None:
        # Values to save whatever their size enter the cut as free values nothing can recompute.
        kept = _materialized_on_both_sides(joint, candidates, producer, backward_only,
                                           {v.name for v in fw_outputs})
        cut_producer = {name: node for name, node in producer.items() if name not in kept}
        saved = _min_cut(candidates, cut_producer, (primal_names - mutated_names) | kept, needed_by_backward)
    else:
        wanted = set(saved_names)
        saved = [v for name, v in candidates.items() if name in wanted]
        if len(saved) != len(wanted):
            raise PartitionError(f"cannot save {sorted(wanted - candidates.keys())}: not forward values")
    saved_names = {v.name for v in saved}

    # A random op runs in the forward even when nothing reads its value: its draw moves the
    # generator, and eager's later draws (and a double backward's replay) start where it left it.
    draws = [v for node in joint.nodes if is_random(node.op)
             for v in node.outputs if v.name not in backward_only]
    forward_nodes = _ancestors(joint, list(fw_outputs) + saved + draws, set())
    backward_nodes = _ancestors(joint, grads, saved_names | {v.name for v in tangents})
    for i in backward_nodes:
        for v in joint.nodes[i].inputs:
            if v.name in primal_names and v.name not in saved_names:
                raise PartitionError(f"backward reads input %{v.name} that was not saved (partitioner bug)")
    forward_node_list = [n for i, n in enumerate(joint.nodes) if i in forward_nodes]
    saved_outputs = list(saved)
    taken = {v.name for v in joint.values()}
    for k, value in enumerate(saved):
        if value.name in mutated_names:
            # The runtime overwrites a mutated input after the forward: keep its old value.
            copy = Value(next(f"{value.name}_saved{n or ''}" for n in range(len(taken) + 1)
                              if f"{value.name}_saved{n or ''}" not in taken), value.type)
            forward_node_list.append(Node("aten.clone.default", (value,), (), (copy,)))
            saved_outputs[k] = copy
    forward = joint.replace(
        name=f"{joint.name}_forward",
        inputs=tuple(primals),
        nodes=tuple(forward_node_list),
        outputs=tuple(fw_outputs) + tuple(saved_outputs),
        stamps=joint.stamps,
    )
    backward = Graph(
        f"{joint.name}_backward", tuple(saved) + tuple(tangents),
        tuple(n for i, n in enumerate(joint.nodes) if i in backward_nodes), tuple(grads), joint.stamps,
    )
    save_all = _storage_bytes(needed_by_backward.values(), producer, primal_names)
    report = MemoryReport(
        saved_bytes=_storage_bytes(saved, producer, primal_names - mutated_names),
        save_all_bytes=save_all,
        saved_values=tuple(v.name for v in saved),
        recomputed_nodes=len(forward_nodes & backward_nodes),
    )
    return Partition(forward, backward, len(saved), report)

