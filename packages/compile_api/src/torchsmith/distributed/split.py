"""Cut a captured `torch.*` graph into consecutive pieces, each compiled on its own.

A piece is compiled as its own `autograd.Function`, so its backward runs, and hands its parameters'
gradients to autograd, before the backward of the pieces in front of it: the gradients of the
parameters first used in a late piece are ready while the rest of the backward still runs.

Not every position is a safe cut. A cut is refused where a value crossing it is written in place
after it (the next piece would mutate an input of its own, which autograd may have saved), where a
non-tensor value crosses it, and inside a stretch that switches grad mode (the pieces would run in
the caller's mode). `safe_cuts` lists the positions that are left.
"""

import time
from dataclasses import dataclass

from torchsmith.ir import Graph, TensorType, Value
from torchsmith.ir.passes import has_side_effects

# Torch-level ops whose output may share memory with their first tensor argument: writes through
# the output reach that argument. Anything written in place aliases its target as well.
VIEW_OPS = frozenset(
    f"torch.Tensor.{name}" for name in (
        "view", "view_as", "reshape", "reshape_as", "__getitem__", "transpose", "permute", "expand",
        "expand_as", "narrow", "select", "squeeze", "unsqueeze", "flatten", "unflatten", "split", "chunk",
        "unbind", "t", "T", "mT", "contiguous", "as_strided", "movedim", "swapaxes", "diagonal", "unfold",
        "detach", "to", "type_as", "float", "half", "double", "bfloat16", "real", "imag", "split_with_sizes",
        "tensor_split", "__getattribute__",
    )
) | frozenset(
    f"torch.{name}" for name in (
        "reshape", "transpose", "permute", "narrow", "select", "squeeze", "unsqueeze", "flatten",
        "unflatten", "split", "chunk", "unbind", "t", "movedim", "swapaxes", "diagonal", "detach",
        "as_strided", "tensor_split", "split_with_sizes",
    )
) | {"operator.getitem"}

GRAD_MODE_OP = "torch._C._set_grad_enabled"


@dataclass(frozen=True, slots=True)
class Piece:
    """One piece of a split graph: its own graph, and which values of the whole graph it reads
    (`reads`, in the order of its inputs) and defines for later pieces or the result (`writes`)."""

    graph: Graph
    reads: tuple[str, ...]
    writes: tuple[str, ...]


def writes_in_place(node) -> bool:
    """Whether a torch-level node writes into one of its arguments (`add_`, `x[i] = v`, inplace=True)."""
    return has_side_effects(node.op) or node.kwargs_dict.get("inplace") is True


def safe_cuts(graph: Graph) -> list[int]:
    """Positions p (1 <= p < len(nodes)) where the graph may be cut into nodes[:p] and nodes[p:]."""
    n = len(graph.nodes)
    if n < 2:
        return []
    defined_at = {v.name: -1 for v in graph.inputs}
    root = {v.name: v.name for v in graph.inputs}  # the earliest value each one may share memory with
    last_use: dict[str, int] = {}
    for i, node in enumerate(graph.nodes):
        for v in node.inputs:
            last_use[v.name] = i
        first = next(iter(node.inputs), None)
        aliasing = first is not None and (node.op in VIEW_OPS or writes_in_place(node))
        for v in node.outputs:
            defined_at[v.name] = i
            root[v.name] = root[first.name] if aliasing else v.name
    for v in graph.outputs:
        last_use[v.name] = n
    refused = [False] * (n + 1)
    # a non-tensor value defined at i and read at j crosses every cut in (i, j]
    for node in graph.nodes:
        for v in node.outputs:
            if not isinstance(v.type, TensorType):
                for p in range(defined_at[v.name] + 1, min(last_use.get(v.name, -1), n - 1) + 1):
                    refused[p] = True
    # a write at j into memory first defined by a node at d < j refuses every cut in (d, j]; memory
    # of a graph input is the caller's, and each compiled piece copies its writes back, as any graph
    for j, node in enumerate(graph.nodes):
        if writes_in_place(node) and node.inputs:
            d = defined_at[root[node.inputs[0].name]]
            if d >= 0:
                for p in range(d + 1, j + 1):
                    refused[p] = True
    grad_mode = [i for i, node in enumerate(graph.nodes) if node.op == GRAD_MODE_OP]
    if grad_mode:
        for p in range(grad_mode[0] + 1, grad_mode[-1] + 1):
            refused[p] = True
    return [p for p in range(1, n) if not refused[p]]


def split_graph(graph: Graph, cuts: list[int]) -> list[Piece]:
    """The pieces of `graph` cut before each node index in `cuts` (sorted, each a `safe_cuts` position)."""
    start_time = time.perf_counter()
    bounds = [0, *sorted(set(cuts)), len(graph.nodes)]
    used_later: list[set[str]] = []
    later: set[str] = {v.name for v in graph.outputs}
    for lo, hi in reversed(list(zip(bounds, bounds[1:]))):
        used_later.append(set(later))
        for node in graph.nodes[lo:hi]:
            later.update(v.name for v in node.inputs)
    used_later.reverse()
    pieces = []
    for k, (lo, hi) in enumerate(zip(bounds, bounds[1:])):
        nodes = graph.nodes[lo:hi]
        defined = {v.name for node in nodes for v in node.outputs}
        reads: dict[str, Value] = {}
        for node in nodes:
            for v in node.inputs:
                if v.name not in defined:
                    reads.setdefault(v.name, v)
        writes = [v for node in nodes for v in node.outputs if v.name in used_later[k]]
        piece_graph = Graph(f"{graph.name}_piece{k}", tuple(reads.values()), tuple(nodes), tuple(writes),
                            graph.stamps)
        pieces.append(Piece(piece_graph, tuple(reads), tuple(v.name for v in writes)))
    seconds = time.perf_counter() - start_time
    return [p.__class__(p.graph.stamped("split_at_buckets", seconds), p.reads, p.writes) for p in pieces]


def unbound_symbols(piece: Piece) -> set[str]:
    """Size symbols a piece uses that none of its inputs' types mentions (it could not bind them)."""
    bound: set[str] = set()
    for v in piece.graph.inputs:
        bound |= set(v.type.free_symbols)
    used: set[str] = set()
    for node in piece.graph.nodes:
        for v in node.outputs:
            used |= set(v.type.free_symbols)
    return used - bound
