"""Torch functions answered at capture time from a tensor's type (`torch.is_signed`), tensor attributes
that are views (`x.H`, `x.mH`), and factories without tensor arguments (`torch.empty_permuted`)
recorded in the graph, compared with eager."""

import torch


def test_is_signed_is_answered_from_the_dtype(compile_with, backend):
    def f(x):
        return x + 1 if torch.is_signed(x) else x - 1

    compiled = compile_with(f, fullgraph=True)
    for x in (torch.arange(4), torch.arange(4, dtype=torch.uint8)):
        torch.testing.assert_close(compiled(x), f(x))
    assert len(backend.graphs) == 2  # one per dtype: the answer is guarded through the dtype


def test_empty_permuted_is_recorded_as_a_factory(compile_with, backend):
    def f(x):
        return torch.empty_permuted((2, 3, 4), (0, 2, 1)).fill_(1.0) + x

    compiled = compile_with(f, fullgraph=True)
    x = torch.randn(4)
    out = compiled(x)
    torch.testing.assert_close(out, f(x))
    assert out.stride() == f(x).stride()
    assert len(backend.graphs) == 1


def test_conjugate_transposes_of_real_and_complex_tensors(compile_with, backend):
    def f(x, m):
        return x.H * 2, m.mH + 1, x.mT

    compiled = compile_with(f, fullgraph=True)
    for dtype in (torch.float32, torch.complex64):
        x, m = torch.randn(3, 4, dtype=dtype), torch.randn(2, 3, 4, dtype=dtype)
        for got, expected in zip(compiled(x, m), f(x, m)):
            torch.testing.assert_close(got.resolve_conj(), expected.resolve_conj())


def test_broadcast_shapes_of_known_sizes_is_a_constant(compile_with, backend):
    def f(x):
        return x.expand(torch.broadcast_shapes(x.shape, (3, 1))) + 1

    x = torch.randn(1, 4)
    torch.testing.assert_close(compile_with(f, fullgraph=True)(x), f(x))
    assert len(backend.graphs) == 1
