"""Where to cut a captured graph so each DDP bucket's gradients come out of their own backward piece.

A parameter's gradient is complete once the backward of every piece that uses it has run; pieces run
their backward last to first, so it is complete after the backward of the piece holding its first
use. A bucket is ready when all its parameters are: after the backward of the piece holding the
earliest first use among them. Cutting the graph at that node, for every bucket but the one read
first (the first piece completes it), gives each bucket a piece whose backward completes it while the
pieces in front of it are still to run. A cut that is not
safe (`split.safe_cuts`) moves to the nearest safe position in front of it, which still completes
the bucket no later than the piece's backward.

The cut is first planned when the graph compiles (DDP's first forward), from buckets predicted
from the forward order (`SplitPlan.ready_order`). DDP then rebuilds its buckets, once, from the
order the pieces' backwards produced gradients in. Within one piece that order would be autograd's,
and a rebuilt bucket would take parameters of the next piece and wait for its backward; so until
then the pieces hand the gradients over in the predicted order (`ddp_backend.GradientOrder`) and
DDP rebuilds the predicted buckets. On the next call the cut is planned again from the rebuilt
buckets, which are final (`buckets.fixed_buckets`), and the graph is cut anew where that moves a
cut (`ddp_backend.PiecewiseCall`): where they differ from those predicted (parameters that other
graphs or eager code also use).
"""

from dataclasses import dataclass

import torch

from torchsmith.distributed.buckets import BucketLimits, bucket_assignment, fixed_buckets, reduced_parameters
from torchsmith.distributed.split import safe_cuts
from torchsmith.ir import Graph


@dataclass(frozen=True, slots=True)
class SplitPlan:
    """The cuts for one graph, and the buckets they come from (graph input names, bucket 0 first)."""

    cuts: tuple[int, ...]
    buckets: tuple[tuple[str, ...], ...]
    wanted: tuple[int, ...]  # where each bucket's all-reduce can launch, before moving to a safe cut
    ready_order: tuple[str, ...] = ()  # the reduced parameters, in the order the buckets assume
    # their gradients become ready (`plan_split` says which)

    def describe(self, graph: Graph) -> str:
        """One line for the logs: buckets, cuts, and why a wanted cut moved or went."""
        moved = [w for w in self.wanted if w > 0 and w not in self.cuts]
        text = (f"graph {graph.name}: {len(self.buckets)} DDP bucket(s) over {len(graph.nodes)} nodes -> "
                f"{len(self.cuts) + 1} piece(s), cut before nodes {list(self.cuts)}")
        if moved:
            text += f" (bucket boundaries at {moved} are not safe cuts: moved earlier or dropped)"
        return text


def first_uses(graph: Graph) -> dict[str, int]:
    """The index of the first node reading each graph input that some node reads."""
    names = {v.name for v in graph.inputs}
    found: dict[str, int] = {}
    for i, node in enumerate(graph.nodes):
        for v in node.inputs:
            if v.name in names:
                found.setdefault(v.name, i)
    return found


def plan_split(graph: Graph, example_inputs, ddp: torch.nn.Module) -> SplitPlan:
    """Cuts that put each of `ddp`'s buckets (restricted to the parameters this graph reads) at the
    end of its own backward piece."""
    reduced = {id(p) for p in reduced_parameters(ddp)}
    uses = first_uses(graph)
    params = [
        (uses[v.name], x.numel() * x.element_size(), i, v.name)
        for i, (v, x) in enumerate(zip(graph.inputs, example_inputs)) if id(x) in reduced and v.name in uses
    ]
    # Gradients become ready last use first. Of parameters first read by one node, the smaller
    # first: a bucket that a large weight fills then ends with that node, not inside it, and a
    # layer's bias joins its weight's bucket (eager's order for linear and addmm layers); among
    # equal sizes the one read first (eager's for layer_norm's weight and bias).
    params.sort(key=lambda t: (-t[0], t[1], t[2]))
    params = [(use, i, name) for use, _, i, name in params]
    fixed = fixed_buckets(ddp)
    if fixed is not None:  # DDP's own buckets, final from the start
        position = {id(example_inputs[i]): k for k, (_, i, _) in enumerate(params)}
        buckets = [[position[id(p)] for p in bucket if id(p) in position] for bucket in fixed]
        buckets = [bucket for bucket in buckets if bucket]
    else:
        buckets = bucket_assignment([example_inputs[i] for _, i, _ in params], BucketLimits.of(ddp))
    # DDP launches the all-reduces in bucket order, so a bucket completed before an earlier one waits
    # for it: the piece that completes the earlier one launches both, and needs no cut of its own
    launches, earliest = [], len(graph.nodes)
    for bucket in buckets:
        earliest = min(earliest, min(params[k][0] for k in bucket))
        launches.append(earliest)
    wanted = sorted(set(launches))
    # the bucket read first is completed by the first piece whatever it starts with: no cut for it
    wanted = wanted[1:]
    safe = safe_cuts(graph)
    cuts: set[int] = set()
    for w in wanted:
        candidates = [p for p in safe if p <= w]
        if candidates:
            cuts.add(candidates[-1])
    named = tuple(tuple(params[k][2] for k in bucket) for bucket in buckets)
    return SplitPlan(tuple(sorted(cuts)), named, tuple(wanted), tuple(name for _, _, name in params))
