"""The first step of both inductor pipelines: an ATen graph decomposed to prims."""

from torchsmith.ir import Graph


def to_prims(graph: Graph) -> Graph:
    """`graph` with every aten op decomposed to prims (prims graphs pass through). Ops with no
    decomposition stay whole: the lowering runs them as extern calls (eager fallback)."""
    if all(node.op.startswith("prims.") for node in graph.nodes):
        return graph
    import torchsmith.prims

    return torchsmith.prims.decompose(graph, on_missing="keep")
