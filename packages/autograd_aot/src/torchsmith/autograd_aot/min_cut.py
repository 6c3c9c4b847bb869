"""A minimum s-t cut (Dinic's max-flow) over a small directed graph, for the partitioner.

networkx did this before; importing it took a quarter to three quarters of a second of every
training program's first compile, for a cut that takes milliseconds. Graphs here are a joint
graph's values (two nodes each) and their data edges: a few thousand edges at most.

    source_side = minimum_cut_source_side(edges, "source", "sink")   # edges: (u, v, capacity|None)
    upstream = ancestors(edges, "sink")
"""

from collections import deque
from collections.abc import Hashable, Iterable


def minimum_cut_source_side(edges: Iterable[tuple], source: Hashable, sink: Hashable) -> set:
    """The nodes on the source side of a minimum cut: after a maximum flow, every node that cannot
    reach `sink` through edges with capacity left (the largest source side among the minimum
    cuts). `edges` are `(u, v, capacity)`, capacity None for infinite; repeated edges add up."""
    edges = list(edges)
    finite = sum(c for _, _, c in edges if c is not None)
    infinite = finite + 1  # more than any cut of finite edges can carry
    index: dict = {}
    for u, v, _ in edges:
        index.setdefault(u, len(index))
        index.setdefault(v, len(index))
    index.setdefault(source, len(index))
    index.setdefault(sink, len(index))
    adjacent: list[list[int]] = [[] for _ in index]
    head: list[int] = []
    capacity: list[int] = []
    for u, v, c in edges:
        # Edge 2k runs u -> v, edge 2k + 1 is its residual v -> u (e ^ 1 is an edge's partner).
        adjacent[index[u]].append(len(head))
        head.append(index[v])
        capacity.append(infinite if c is None else c)
        adjacent[index[v]].append(len(head))
        head.append(index[u])
        capacity.append(0)
    s, t = index[source], index[sink]
    while True:
        level = _levels(s, adjacent, head, capacity)
        if level[t] < 0:
            break
        _blocking_flow(s, t, level, adjacent, head, capacity)
    # The sink side: nodes that still reach the sink through edges with capacity left; the rest
    # (also nodes connected to neither) is the source side, the largest of the minimum cuts.
    sink_side, work = {t}, [t]
    while work:
        v = work.pop()
        for e in adjacent[v]:
            tail = head[e]  # edge e ^ 1 runs tail -> v
            if capacity[e ^ 1] > 0 and tail not in sink_side:
                sink_side.add(tail)
                work.append(tail)
    return {name for name, n in index.items() if n not in sink_side}


def _levels(s: int, adjacent, head, capacity) -> list[int]:
    """Breadth-first distances from `s` over edges with capacity left (-1: unreachable)."""
    level = [-1] * len(adjacent)
    level[s] = 0
    queue = deque([s])
    while queue:
        u = queue.popleft()
        for e in adjacent[u]:
            if capacity[e] > 0 and level[head[e]] < 0:
                level[head[e]] = level[u] + 1
                queue.append(head[e])
    return level


def _blocking_flow(s: int, t: int, level: list[int], adjacent, head, capacity) -> None:
    """Saturate every shortest s-t path (Dinic's phase), walking iteratively with a current-edge
    pointer per node so that each edge is given up at most once per phase."""
    current = [0] * len(adjacent)
    while True:
        stack, path = [s], []
        while stack and stack[-1] != t:
            u = stack[-1]
            edges = adjacent[u]
            while current[u] < len(edges):
                e = edges[current[u]]
                if capacity[e] > 0 and level[head[e]] == level[u] + 1:
                    break
                current[u] += 1
            if current[u] < len(edges):
                e = edges[current[u]]
                stack.append(head[e])
                path.append(e)
            else:  # a dead end this phase: nothing leads on from u
                level[u] = -1
                stack.pop()
                if path:
                    path.pop()
        if not stack:
            return
        pushed = min(capacity[e] for e in path)
        for e in path:
            capacity[e] -= pushed
            capacity[e ^ 1] += pushed


def ancestors(edges: Iterable[tuple], node: Hashable) -> set:
    """Every node with a path to `node` (whatever the capacities), `node` itself excluded."""
    parents: dict = {}
    for u, v, _ in edges:
        parents.setdefault(v, []).append(u)
    seen, work = set(), [node]
    while work:
        for u in parents.get(work.pop(), ()):
            if u not in seen:
                seen.add(u)
                work.append(u)
    seen.discard(node)
    return seen
