"""Global torch state a trace depends on is guarded: a change between calls recompiles."""

import torch

from torchsmith.capture.guards import GLOBAL_STATE, autocast_state, default_device


def test_every_piece_of_global_state_has_one_guard(compile_with):
    compiled = compile_with(lambda x: x + 1)
    compiled(torch.randn(2))
    session = compiled.session if hasattr(compiled, "session") else compiled._session
    exprs = session.records[-1].guards
    for name in GLOBAL_STATE:
        assert sum(e.startswith(f"{name}()") for e in exprs) == 1, name


def test_autocast_runs_eagerly_then_captures_again(compile_with, backend):
    # capture's meta inference does not see autocast: a call under autocast runs eagerly
    def f(x, w):
        return x @ w, torch.is_autocast_enabled("cpu")

    compiled = compile_with(f)
    x, w = torch.randn(4, 4), torch.randn(4, 4)
    assert compiled(x, w)[0].dtype == torch.float32
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out, enabled = compiled(x, w)
        expected, _ = f(x, w)
    assert enabled is True and out.dtype == expected.dtype == torch.bfloat16
    torch.testing.assert_close(out, expected)
    assert len(backend.graphs) == 1
    assert compiled(x, w)[0].dtype == torch.float32
    assert len(backend.graphs) == 1  # the first entry again


def test_default_device_context_recompiles(compile_with, backend):
    def f(n):
        return torch.ones(n) * 2

    compiled = compile_with(f)
    assert compiled(3).device.type == "cpu"
    with torch.device("meta"):
        assert default_device() == torch.device("meta")
        assert compiled(3).device.type == "meta"
    assert default_device() is None
    assert compiled(3).device.type == "cpu"
    assert len(backend.graphs) == 2


def test_default_dtype_change_recompiles_factories(compile_with, backend):
    def f(x):
        return torch.ones(2), torch.arange(0.0, 2.0), torch.tensor([0.5]), x + 1

    compiled = compile_with(f)
    x = torch.randn(2)
    assert all(t.dtype == torch.float32 for t in compiled(x))
    torch.set_default_dtype(torch.float64)
    try:
        out = compiled(x)
        assert [t.dtype for t in out] == [t.dtype for t in f(x)] == [torch.float64] * 3 + [torch.float32]
    finally:
        torch.set_default_dtype(torch.float32)
    assert len(backend.graphs) == 2


def test_global_state_readers_are_cheap_when_nothing_is_set():
    assert default_device() is None
    assert autocast_state() is None
