"""Symbolic sizes through channels-last values: their strides are products of the dims inner to them
in the layout, and a static weight broadcast against a symbolic channel count fixes that count only."""

import torch

CL = torch.channels_last


def _run(compiled, fn, calls):
    for args in calls:
        got, expected = compiled(*args), fn(*args)
        torch.testing.assert_close(got, expected)
        assert got.stride() == expected.stride()


def test_channels_last_strides_stay_symbolic(compile_with, backend):
    def f(x):
        return torch.relu(x.to(memory_format=CL)) * 2

    compiled = compile_with(f, dynamic=True)
    _run(compiled, f, [(torch.randn(2, 3, n, n + 2),) for n in (4, 6, 9)])
    assert len(backend.graphs) == 1
    out = backend.graphs[0].outputs[0].type
    assert not any(isinstance(s, int) for s in out.strides[:1] + out.strides[2:]), out  # all symbolic
    assert out.strides[1] == 1


def test_static_weight_against_a_symbolic_channel_count_fixes_only_the_channels(compile_with, backend):
    weight = torch.randn(1, 3, 1, 1)

    def f(x):
        return x.to(memory_format=CL) * weight + 1

    compiled = compile_with(f, dynamic=True)
    _run(compiled, f, [(torch.randn(2, 3, n, n + 2),) for n in (4, 6, 9)])
    assert len(backend.graphs) == 1
    assert all(not isinstance(d, int) for d in backend.graphs[0].outputs[0].type.shape[2:])
