"""Torch functions returning several tensors, ATen overloads and capture-time functions: what the
graph records and what the compiled function returns (the backend interprets with type checks)."""

import pytest
import torch


def _same(got, want):
    if isinstance(want, torch.Tensor):
        assert isinstance(got, torch.Tensor) and not got.is_meta
        torch.testing.assert_close(got, want)
        return
    assert type(got) is type(want) and len(got) == len(want), (got, want)
    for g, w in zip(got, want, strict=True):
        _same(g, w)


def test_one_element_tuple_stays_a_tuple_of_one(compile_with, backend):
    def f(x):
        return torch.gradient(x)

    x = torch.randn(7)
    _same(compile_with(f, fullgraph=True)(x), f(x))
    (graph,) = backend.graphs
    assert len(graph.nodes[0].outputs) == 1


@pytest.mark.parametrize(
    "f",
    [
        lambda x: torch.gradient(x),
        lambda x: (x.split(10), torch.chunk(x, 1), torch.tensor_split(x, 1)),
        lambda x: torch.std_mean(x, 0),
        lambda x: (torch.sort(x, 1), torch.frexp(x), torch.aminmax(x)),
        lambda x: ((x.unbind(1), [torch.var_mean(x)]), torch.meshgrid(x[0], x[1], indexing="ij")),
    ],
)
def test_sequences_of_tensors_keep_their_structure(compile_with, f):
    x = torch.randn(5, 4)
    _same(compile_with(f, fullgraph=True)(x), f(x))


def test_aten_overloads_are_recorded(compile_with, backend):
    def f(x):
        values, indices = torch.ops.aten.sort.default(x)
        return values * 2, indices, torch.ops.aten.split.Tensor(x, 2), torch.ops.aten.detach.default(x)

    x = torch.randn(4, 3, requires_grad=True)
    got, want = compile_with(f, fullgraph=True)(x), f(x)
    _same([t.detach() if t.requires_grad else t for t in [got[0], got[1], *got[2], got[3]]],
          [t.detach() if t.requires_grad else t for t in [want[0], want[1], *want[2], want[3]]])
    assert got[3].requires_grad is False and got[0].requires_grad is True
    assert "aten.sort.default" in backend.graphs[0].ops()


def test_functions_without_tensor_arguments(compile_with, backend):
    def f(*tensors):
        return torch.arange(5.0), torch.ones(3), torch.eye(2), torch.full((2,), 3.0)

    _same(compile_with(f, fullgraph=True)(), f())
    assert backend.graphs and not backend.graphs[0].inputs


def test_default_dtype_is_read_at_capture_time(compile_with):
    def f(n):
        return torch.signal.windows.hann(n) + 1, torch.get_default_dtype()

    compiled = compile_with(f, fullgraph=True)
    _same(compiled(5)[0], f(5)[0])
    try:
        torch.set_default_dtype(torch.float64)
        got, want = compiled(5), f(5)
        assert got[1] is torch.float64 and got[0].dtype == want[0].dtype == torch.float64
    finally:
        torch.set_default_dtype(torch.float32)


def test_an_op_packet_is_recorded_as_the_overload_torch_picks(compile_with, backend):
    x = torch.randn(3)
    values, indices = compile_with(lambda x: torch.ops.aten.sort(x), fullgraph=True)(x)
    torch.testing.assert_close((values, indices), tuple(torch.sort(x)))
    assert backend.graphs[0].ops() == ["aten.sort.default"]  # aten_calls.py
