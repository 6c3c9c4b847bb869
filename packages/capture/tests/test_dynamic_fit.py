"""Output sizes of ops on symbolic inputs beyond affine forms: strided convolutions (guarded floor
divisions), ceil-div padding and views (argument expressions), square dims (powers), slices by a
size and min/max of sizes. Graphs are interpreted with type checks, so a wrong size fails."""

import torch
import torch.nn.functional as F

from torchsmith.ir import symbol

S0 = symbol("s0")


def _run(compiled, fn, calls):
    for args in calls:
        torch.testing.assert_close(compiled(*args), fn(*args))


def test_strided_conv_output_length_is_a_guarded_floor_division(compile_with, backend):
    conv = torch.nn.Conv1d(1, 4, 10, stride=5)

    def f(x):
        return conv(x[:, None]).transpose(1, 2).relu()

    compiled = compile_with(f)
    _run(compiled, f, [(torch.randn(2, n),) for n in (400, 480, 560)])
    assert len(backend.graphs) == 2
    assert "s0 // 5 - 1" in str(backend.graphs[1].outputs[0].type)
    _run(compiled, f, [(torch.randn(2, 403),)])  # another residue mod 5: its own graph, right
    assert len(backend.graphs) == 3


def test_odd_image_sizes_fit_with_an_offset(compile_with, backend):
    conv = torch.nn.Conv1d(2, 3, 3, stride=2)

    def f(x):
        return conv(x)

    compiled = compile_with(f)
    _run(compiled, f, [(torch.randn(1, 2, n),) for n in (9, 13, 17, 21)])
    assert len(backend.graphs) == 2


def test_pad_to_a_multiple_keeps_the_ceil_division(compile_with, backend):
    def f(x):
        n = x.shape[0]
        return F.pad(x, (0, 0, 0, (n + 7) // 8 * 8 - n)) + 1

    compiled = compile_with(f)
    _run(compiled, f, [(torch.randn(n, 3),) for n in (5, 9, 13, 16, 17)])
    assert len(backend.graphs) == 2
    assert "8*((s0 + 7) // 8)" in str(backend.graphs[1].outputs[0].type)


def test_view_in_chunks_of_a_constant(compile_with, backend):
    def f(x):
        rem = x.shape[1] % 3
        return F.pad(x, (0, (3 - rem) % 3)).view(x.shape[0], -1, 3).amax(-1)

    compiled = compile_with(f)
    _run(compiled, f, [(torch.randn(2, n),) for n in (5, 7, 9, 10)])
    assert len(backend.graphs) == 2


def test_square_dims_and_their_strides(compile_with, backend):
    def f(x):
        return (x @ x.transpose(-1, -2)).unsqueeze(0).softmax(-1)

    compiled = compile_with(f)
    _run(compiled, f, [(torch.randn(n, 4),) for n in (3, 5, 7)])
    assert len(backend.graphs) == 2
    assert backend.graphs[1].outputs[0].type.strides == (S0**2, S0, 1)


def test_slice_by_a_size_stays_symbolic(compile_with, backend):
    table = torch.randn(64, 3)

    def f(x):
        return x + table[1 : x.shape[0] + 1]

    compiled = compile_with(f)
    _run(compiled, f, [(torch.randn(n, 3),) for n in (4, 6, 9, 12)])
    assert len(backend.graphs) == 2


def test_min_and_max_of_sizes_are_guarded_not_specialized(compile_with, backend):
    def f(a, b):
        n = min(a.shape[0], b.shape[0])
        return a[:n].sum(0) * b[:n].mean(0), max(a.shape[0], b.shape[0], 3) - n

    compiled = compile_with(f)
    _run(compiled, f, [(torch.randn(n, 2), torch.randn(n + 3, 2)) for n in (2, 4, 6, 9)])
    assert len(backend.graphs) == 2
    _run(compiled, f, [(torch.randn(9, 2), torch.randn(4, 2))])  # the order flips: recompiles, right
    assert len(backend.graphs) == 3


class _PositionBuffer(torch.nn.Module):
    """CLIP's text embeddings: a position buffer sliced to the sequence length, after a check."""

    def __init__(self):
        super().__init__()
        self.register_buffer("position_ids", torch.arange(16).expand(1, -1))

    def forward(self, x):
        n = x.shape[1]
        if n > self.position_ids.shape[1]:
            raise ValueError("sequence longer than the position table")
        return x + self.position_ids[:, :n]


def test_a_buffer_sliced_by_a_checked_length_stays_symbolic(compile_with, backend):
    model = _PositionBuffer()
    compiled = compile_with(model)
    for n in (3, 5, 7, 11):  # doubling 7 or 11 passes the table: those sizes are guarded out
        x = torch.randn(2, n)
        torch.testing.assert_close(compiled(x), model(x))
    assert len(backend.graphs) == 2
