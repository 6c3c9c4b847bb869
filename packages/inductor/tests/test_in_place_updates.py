"""Functional updates of an input that the caller copies back (`write_back_into_inputs`) run in
place in the compiled Triton graph when nothing else reads the input (`loop_ir.in_place`); on this
machine the kernels run in Triton's interpreter."""

import os

import pytest
import torch

if not torch.cuda.is_available():  # before triton's first import: see test_triton_kernels
    os.environ["TRITON_INTERPRET"] = "1"
pytest.importorskip("triton", reason="triton is not installed (pip install triton==3.6.0)")

from torchsmith.inductor.gpu_pipeline import compile_graph_triton  # noqa: E402
from torchsmith.inductor.loop_ir.in_place import in_place_updates  # noqa: E402
from torchsmith.inductor.testing import make_graph  # noqa: E402
from torchsmith.ir import TensorType  # noqa: E402

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def t(*shape, dtype=torch.float32):
    return TensorType.make(shape, dtype, device=DEVICE)


def cache_update(extra_read: bool, computed: bool = True):
    """cache.index_copy(0, pos, row * 2), or of `row * 1` given as an input where not `computed`."""

    def body(b, cache, row, pos):
        source = b.op("aten.mul.Tensor", row, 2.0) if computed else row
        new = b.op("aten.index_copy.default", cache, 0, pos, source)
        outputs = [b.op("aten.sum.default", new), new]
        if extra_read:
            outputs.insert(1, b.op("aten.sum.default", cache))  # reads the old cache too
        return tuple(outputs)

    inputs = {"cache": t(6, 8), "row": t(1, 8), "pos": t(1, dtype=torch.int64)}
    return make_graph("cache_update", inputs, body)


def run_steps(compiled, cache, steps: int = 3, scale: float = 2.0) -> list:
    """Call like the AOT runtime: copy the last output into the cache unless it is the cache."""
    results = []
    for i in range(steps):
        row, pos = torch.randn(1, 8, device=DEVICE), torch.tensor([i], device=DEVICE)
        expected = cache.index_copy(0, pos, row * scale)
        outputs = compiled(cache, row, pos)
        results.append(outputs[-1] is cache)
        if outputs[-1] is not cache:
            cache.copy_(outputs[-1])
        torch.testing.assert_close(cache, expected)
        torch.testing.assert_close(outputs[0], expected.sum())
    return results


def test_cache_update_runs_in_place_after_the_first_call():
    graph = cache_update(extra_read=False, computed=False)
    compiled = compile_graph_triton(graph)
    assert in_place_updates(compiled.program, {1: 0}) == {compiled.program.outputs[1].buffer: "index_copy_"}
    compiled.write_back_into_inputs({1: 0})
    assert compiled.folded_copies == []  # the source is an input: no kernel computes it
    cache = torch.zeros(6, 8, device=DEVICE)
    # The first call runs the general path (a new tensor); later ones write into the cache itself.
    assert run_steps(compiled, cache, scale=1.0) == [False, True, True]


def test_cache_update_of_a_computed_source_is_done_by_its_kernel():
    graph = cache_update(extra_read=False)
    compiled = compile_graph_triton(graph)
    compiled.write_back_into_inputs({1: 0})
    assert compiled.folded_copies == [compiled.program.outputs[1].buffer]
    cache = torch.zeros(6, 8, device=DEVICE)
    # The kernel computing `row * 2` stores it into the cache (triton.folded_copy): every call,
    # the first included, writes into the cache itself.
    assert run_steps(compiled, cache) == [True, True, True]


def test_update_of_an_input_read_elsewhere_stays_functional():
    graph = cache_update(extra_read=True)
    compiled = compile_graph_triton(graph)
    assert in_place_updates(compiled.program, {2: 0}) == {}
    compiled.write_back_into_inputs({2: 0})
    cache = torch.zeros(6, 8, device=DEVICE)
    before = cache.clone()
    outputs = compiled(cache, torch.ones(1, 8, device=DEVICE), torch.tensor([1], device=DEVICE))
    torch.testing.assert_close(cache, before)  # the compiled call left the input alone
    torch.testing.assert_close(outputs[1], before.sum())


def test_an_output_not_written_back_stays_functional():
    graph = cache_update(extra_read=False)
    compiled = compile_graph_triton(graph)
    assert in_place_updates(compiled.program, {}) == {}
    assert in_place_updates(compiled.program, {0: 0}) == {}  # output 0 is a sum, not the update


def test_index_put_runs_in_place_and_accumulate_stays_functional():
    def body(accumulate):
        def put(b, cache, row, pos):
            return (b.op("aten.index_put.default", cache, [pos], row, accumulate),)

        return put

    cache = torch.zeros(6, 8, device=DEVICE)
    row, pos = torch.randn(1, 8, device=DEVICE), torch.tensor([2], device=DEVICE)
    for accumulate, in_place in ((False, True), (True, False)):
        graph = make_graph("put", {"cache": t(6, 8), "row": t(1, 8), "pos": t(1, dtype=torch.int64)},
                           body(accumulate))
        compiled = compile_graph_triton(graph)
        compiled.write_back_into_inputs({0: 0})
        compiled(cache.clone(), row, pos)  # the first call: the general path
        target = cache.clone()
        (out,) = compiled(target, row, pos)
        assert (out is target) == in_place
        torch.testing.assert_close(out, cache.index_put([pos], row, accumulate))
