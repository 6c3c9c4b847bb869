"""Torch functions written in Python that take a callable (`F.triplet_margin_with_distance_loss`'s
distance function) or an options object (`F.linear_cross_entropy`'s) are traced through, the callable
inlined, since a graph cannot hold either."""

import pytest
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


@pytest.mark.skipif(
    not hasattr(F, "linear_cross_entropy"), reason="F.linear_cross_entropy is new in torch 2.13"
)
def test_a_torch_function_taking_an_options_object_is_traced_into_not_recorded(compile_with):
    # a graph argument cannot hold the options dataclass: the function's body is traced instead,
    # and where that body cannot be traced the call is a graph break naming why (never a crash
    # that sends the whole frame to eager)
    from torch.nn.modules.linear_cross_entropy_options import LinearCrossEntropyOptions

    options = LinearCrossEntropyOptions(batch_chunk_size=2)

    def f(x, weight, target):
        return F.linear_cross_entropy(x, weight, target, options=options) * 2

    x, weight, target = torch.randn(3, 3), torch.randn(4, 3), torch.tensor([0, 2, 1])
    compiled = compile_with(f)
    torch.testing.assert_close(compiled(x, weight, target), f(x, weight, target))
    reasons = [str(r.break_reason) for r in compiled.session.records if r.break_reason is not None]
    assert reasons and not any("cannot use LinearCrossEntropyOptions" in r for r in reasons), reasons
