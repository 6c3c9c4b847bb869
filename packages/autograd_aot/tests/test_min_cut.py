"""The partitioner's own minimum cut: the same source side networkx finds (the largest one among
the minimum cuts), on hand-made and random graphs."""

import random

import pytest

from torchsmith.autograd_aot.min_cut import ancestors, minimum_cut_source_side


def test_cheapest_edge_is_cut_and_infinite_edges_never_are():
    # source -> a (inf) -> b (cap 5) -> sink (inf); a -> c (cap 2) -> sink: cut {a->b, a->c} = 7,
    # but source -> a is infinite, so the cut is after a.
    edges = [("s", "a", None), ("a", "b", 5), ("b", "t", None), ("a", "c", 2), ("c", "t", None)]
    assert minimum_cut_source_side(edges, "s", "t") == {"s", "a"}
    # A cheaper edge before a: cut there.
    edges[0] = ("s", "a", 3)
    assert minimum_cut_source_side(edges, "s", "t") == {"s"}


def test_nodes_joined_to_neither_end_sit_on_the_source_side():
    edges = [("s", "a", 1), ("a", "t", None), ("x", "y", 4)]
    assert minimum_cut_source_side(edges, "s", "t") == {"s", "x", "y"}
    assert ancestors(edges, "t") == {"s", "a"}


def _random_graph(seed: int):
    rng = random.Random(seed)
    n = rng.randint(2, 30)
    edges = []
    for _ in range(rng.randint(1, 90)):
        u, v = rng.randrange(n), rng.randrange(n)
        if u != v:
            edges.append((u, v, None if rng.random() < 0.3 else rng.choice([0, 1, 2, 5, 100, 4096])))
    # A finite edge out of the source: every graph has a finite cut.
    return edges + [("s", 0, 10**6), (n - 1, "t", None)]


@pytest.mark.parametrize("seed", range(40))
def test_matches_networkx(seed):
    nx = pytest.importorskip("networkx")
    edges = _random_graph(seed)
    graph = nx.DiGraph()
    for u, v, c in edges:
        if graph.has_edge(u, v):  # parallel edges add up; an infinite one makes the sum infinite
            if c is None or "capacity" not in graph[u][v]:
                graph[u][v].pop("capacity", None)
            else:
                graph[u][v]["capacity"] += c
        elif c is None:
            graph.add_edge(u, v)
        else:
            graph.add_edge(u, v, capacity=c)
    _, (source_side, _) = nx.minimum_cut(graph, "s", "t")
    assert minimum_cut_source_side(edges, "s", "t") == set(source_side)
    assert ancestors(edges, "t") == nx.ancestors(graph, "t")
