"""Pass infrastructure: a pass is a function `Graph -> Graph`; running it stamps the result.

    >>> @graph_pass("dce")
    ... def dce(graph): ...
    >>> graph = run_pipeline(graph, [dce, my_other_pass])

Every pass run through `graph_pass` or `run_pipeline` adds a `Stamp(name, seconds)` to the graph
it returns, so a user can see which passes made a graph and where compile time went.
"""

import functools
import time
from collections.abc import Callable, Sequence

from torchsmith.ir.graph import Graph

GraphPass = Callable[[Graph], Graph]


def graph_pass(name: str) -> Callable[[GraphPass], GraphPass]:
    """Decorate a `Graph -> Graph` function so each run is timed and stamped with `name`."""

    def decorate(fn: GraphPass) -> GraphPass:
        @functools.wraps(fn)
        def run(graph: Graph, *args, **kwargs) -> Graph:
            start = time.perf_counter()
            result = fn(graph, *args, **kwargs)
            return result.stamped(name, time.perf_counter() - start)

        run.pass_name = name
        return run

    return decorate


def run_pipeline(graph: Graph, passes: Sequence[GraphPass], *, verify: bool | None = None) -> Graph:
    """Run passes in order; verify between them when `verify` (default: TORCHSMITH_VERIFY=1)."""
    from torchsmith.ir.verifier import verify as verify_graph
    from torchsmith.ir.verifier import verify_enabled

    check = verify_enabled() if verify is None else verify
    for p in passes:
        graph = p(graph)
        if check:
            verify_graph(graph)
    return graph


_INPLACE_DUNDERS = frozenset(
    f"__i{op}__"
    for op in (
        "add",
        "sub",
        "mul",
        "truediv",
        "floordiv",
        "mod",
        "pow",
        "and",
        "or",
        "xor",
        "lshift",
        "rshift",
        "matmul",
    )
) | {"__setitem__"}


def _is_inplace_name(name: str) -> bool:
    if name.startswith("__") and name.endswith("__"):
        return name in _INPLACE_DUNDERS
    return name.endswith("_")


def has_side_effects(op: str) -> bool:
    """Ops that write memory and so must never be removed as dead: in-place torch methods and
    aten overloads (`add_`, `__iadd__`), `__setitem__`, `copy_` and `out=` variants."""
    parts = op.split(".")
    if parts[0] == "aten" and len(parts) == 3:
        return _is_inplace_name(parts[1]) or parts[2].startswith("out")
    return _is_inplace_name(parts[-1])


@graph_pass("dce")
def dead_code_elimination(graph: Graph) -> Graph:
    """Drop nodes none of whose outputs are used, unless the op has side effects."""
    live = {v.name for v in graph.outputs}
    kept = []
    for node in reversed(graph.nodes):
        if has_side_effects(node.op) or any(v.name in live for v in node.outputs):
            kept.append(node)
            live.update(v.name for v in node.inputs)
    return graph.replace(nodes=tuple(reversed(kept)))
