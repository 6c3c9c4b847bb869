"""C++ kernels called through the native caller (`native_calls`) against the ctypes calls it replaces:
the same results, the ctypes form where it is not loaded, programs written before it loads moved
onto it once it does, and clear errors for arguments it cannot pass."""

import pytest
import torch

from torchsmith.inductor import compile_graph
from torchsmith.inductor.runtime import native_calls
from torchsmith.inductor.testing import assert_matches_eager, make_graph

F32 = torch.float32


def _native_module():
    """The loaded extension, built now if needed (a few dozen seconds, once per machine)."""
    if not native_calls.EXTENSION.enabled():
        pytest.skip("TORCHSMITH_NATIVE_CALLS=0 in this environment")
    native_calls.EXTENSION.request()
    if not native_calls.EXTENSION.wait(600):
        pytest.fail("the native kernel caller did not build or load; the log of torchsmith.native says why")
    return native_calls.EXTENSION.loaded()


def _graph():
    def body(b, x, y):
        scaled = b.op("aten.mul.Tensor", x, 2.0)
        shifted = b.op("aten.relu.default", b.op("aten.add.Tensor", scaled, y))
        rows = b.op("aten.sum.dim_IntList", shifted, [1])
        # a transposed read and a second output: kernels of several buffers
        transposed = b.op("aten.permute.default", y, [1, 0])
        mixed = b.op("aten.sub.Tensor", b.op("aten.sigmoid.default", x), transposed)
        return rows, mixed

    return make_graph("native_calls", {"x": ((24, 24), F32), "y": ((24, 24), F32)}, body)


def _inputs():
    g = torch.Generator().manual_seed(0)
    return [torch.randn(24, 24, generator=g), torch.randn(24, 24, generator=g)]


def test_kernels_run_through_the_native_caller_with_eager_results():
    _native_module()
    graph = _graph()
    compiled = compile_graph(graph)
    source = compiled._straight.source
    assert "call" in source and ".data_ptr()" not in source
    assert_matches_eager(compiled, graph, *_inputs())


def test_without_the_extension_kernels_run_through_ctypes_and_move_once_it_loads(monkeypatch):
    module = _native_module()
    extension = native_calls.EXTENSION
    monkeypatch.setattr(extension, "_module", None)  # as while its build still runs
    monkeypatch.setattr(extension, "_building", True)
    monkeypatch.setattr(extension, "_callbacks", [])
    graph = _graph()
    compiled = compile_graph(graph)
    assert ".data_ptr()" in compiled._straight.source
    assert_matches_eager(compiled, graph, *_inputs())
    extension.publish(module)  # what the build thread does once the library loads
    assert "call" in compiled._straight.source and ".data_ptr()" not in compiled._straight.source
    assert_matches_eager(compiled, graph, *_inputs())


def test_arguments_the_caller_cannot_pass_are_errors():
    module = _native_module()
    # each refused before any kernel runs: the address is never called
    with pytest.raises(TypeError, match="argument 2 is a int, not a tensor"):
        module.call(1, torch.zeros(1), 3)
    with pytest.raises(TypeError, match="at most"):
        module.call(1, *[torch.zeros(1)] * (module.max_arity() + 1))
    with pytest.raises(ValueError, match="null"):
        module.call(0, torch.zeros(1))
    assert native_calls.caller(module.max_arity() + 1) is None
