"""Torch functions written in Python that take a callable (`F.triplet_margin_with_distance_loss`'s
distance function) are traced through, the callable inlined, since a graph cannot hold it."""

import torch
import torch.nn.functional as F


def test_a_torch_function_taking_a_module_or_a_lambda_is_traced_through(compile_with, backend):
    distance = torch.nn.PairwiseDistance()

    def f(a, p, n):
        by_module = F.triplet_margin_with_distance_loss(a, p, n, distance_function=distance)
        by_lambda = F.triplet_margin_with_distance_loss(
            a, p, n, distance_function=lambda x, y: (x - y).abs().sum(-1), margin=0.5
        )
        return by_module, by_lambda

    a, p, n = torch.randn(4, 3), torch.randn(4, 3), torch.randn(4, 3)
    compiled = compile_with(f, fullgraph=True)
    for got, expected in zip(compiled(a, p, n), f(a, p, n)):
        torch.testing.assert_close(got, expected)
    assert len(backend.graphs) == 1
    assert "torch.nn.functional.triplet_margin_with_distance_loss" not in backend.graphs[0].ops()
