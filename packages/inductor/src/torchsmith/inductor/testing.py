"""Helpers for tests of the inductor (ours and other packages'): build aten graphs from a few lines,
and compare a compiled graph's outputs with the reference interpreter's (eager PyTorch)."""

import torch

from torchsmith.ir import GraphBuilder, TensorType, interpret


def make_graph(name: str, input_types: dict, body):
    """A graph with inputs `{name: type}` (a TensorType or `(shape, dtype)`); `body(builder,
    *inputs)` adds nodes and returns the output value (or a tuple of them)."""
    b = GraphBuilder(name)
    values = [
        b.input(n, t if isinstance(t, TensorType) else TensorType.make(*t)) for n, t in input_types.items()
    ]
    outputs = body(b, *values)
    return b.build(*(outputs if isinstance(outputs, tuple) else (outputs,)))


def assert_matches_eager(compiled, graph, *inputs, **tolerance) -> None:
    """`compiled(*inputs)` equals `interpret(graph, *inputs)` in dtype, shape and values."""
    got = compiled(*inputs)
    expected = interpret(graph, *inputs)
    assert len(got) == len(expected), (len(got), len(expected))
    for g, e in zip(got, expected):
        assert g.dtype == e.dtype and g.shape == e.shape, (g.dtype, e.dtype, g.shape, e.shape)
        torch.testing.assert_close(g, e, equal_nan=True, **tolerance)


def rotary_cat(b, x, c, s):
    """A graph body: a rotary embedding of `x` (last dim 2h) by angles `c`, `s` (last dim h), its
    two halves computed and then concatenated, as transformers' models write it."""
    half = x.type.shape[-1] // 2
    dim = x.type.rank - 1
    x1 = b.op("aten.slice.Tensor", x, dim, 0, half)
    x2 = b.op("aten.slice.Tensor", x, dim, half, 2 * half)
    first = b.op("aten.sub.Tensor", b.op("aten.mul.Tensor", x1, c), b.op("aten.mul.Tensor", x2, s))
    second = b.op("aten.add.Tensor", b.op("aten.mul.Tensor", x2, c), b.op("aten.mul.Tensor", x1, s))
    return b.op("aten.cat.default", [first, second], -1)
