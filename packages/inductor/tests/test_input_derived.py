"""Values a GPU graph computes from unchanging inputs alone (parameters, buffers), kept between
calls by its straight-line form while those inputs keep their identity, memory and version."""

import os

import pytest
import torch

if not torch.cuda.is_available():  # before triton's first import: see test_triton_kernels
    os.environ["TRITON_INTERPRET"] = "1"
pytest.importorskip("triton", reason="triton is not installed (pip install triton==3.6.0)")

from torchsmith.inductor.gpu_pipeline import compile_graph_triton  # noqa: E402
from torchsmith.inductor.runtime import input_derived  # noqa: E402
from torchsmith.inductor.testing import assert_matches_eager, make_graph  # noqa: E402
from torchsmith.ir import TensorType  # noqa: E402

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def _scaled_by_column_sums():
    """x * w.sum(0): the sum reads the weight alone (its own kernel), the product reads x too."""
    types = {"x": TensorType.make((64, 32), torch.float32, device=DEVICE),
             "self__parameters_w": TensorType.make((16, 32), torch.float32, device=DEVICE)}
    return make_graph(
        "scaled", types, lambda b, x, w: b.op("aten.mul.Tensor", x, b.op("aten.sum.dim_IntList", w, [0]))
    )


def _allocations(compiled) -> list:
    """Counts the straight-line form's allocations, one list entry per call."""
    straight = compiled._straight
    namespace = straight.__globals__
    allocate = namespace["empty_strided"]
    counts = []
    namespace["empty_strided"] = lambda *a, **k: counts.append(1) or allocate(*a, **k)
    return counts


def _x():
    return torch.randn(64, 32, device=DEVICE)


def test_values_of_unchanged_weights_are_kept_and_recomputed_after_each_change():
    graph = _scaled_by_column_sums()
    compiled = compile_graph_triton(graph)
    w = torch.nn.Parameter(torch.randn(16, 32, device=DEVICE), requires_grad=False)
    for _ in range(2):  # a new activation each call, the same weight
        assert_matches_eager(compiled, graph, _x(), w, rtol=1e-5, atol=1e-5)
    assert compiled._straight and "lookup" in compiled._straight.source
    counts = _allocations(compiled)
    assert_matches_eager(compiled, graph, _x(), w, rtol=1e-5, atol=1e-5)
    assert len(counts) == 1  # the output only: the column sums were kept
    with torch.no_grad():
        w.mul_(2)  # in place: a new version
    assert_matches_eager(compiled, graph, _x(), w, rtol=1e-5, atol=1e-5)
    assert len(counts) == 3
    w.data = torch.randn(16, 32, device=DEVICE)  # the same object over new memory
    assert_matches_eager(compiled, graph, _x(), w, rtol=1e-5, atol=1e-5)
    assert len(counts) == 5
    other = torch.randn(16, 32, device=DEVICE)  # another tensor
    assert_matches_eager(compiled, graph, _x(), other, rtol=1e-5, atol=1e-5)
    assert_matches_eager(compiled, graph, _x(), other, rtol=1e-5, atol=1e-5)
    assert len(counts) == 8


def test_weights_that_change_every_call_stop_being_kept():
    graph = _scaled_by_column_sums()
    compiled = compile_graph_triton(graph)
    w = torch.randn(16, 32, device=DEVICE)
    for _ in range(2):
        assert_matches_eager(compiled, graph, _x(), w, rtol=1e-5, atol=1e-5)
    lookup = compiled._straight.__globals__
    cache = next(v.__self__ for k, v in lookup.items() if k.startswith("lookup"))
    for _ in range(input_derived.GIVE_UP + 2):  # a training loop: an optimizer step between calls
        w.add_(0.5)
        assert_matches_eager(compiled, graph, _x(), w, rtol=1e-5, atol=1e-5)
    assert cache._values is None and cache._misses == input_derived.GIVE_UP


def test_inputs_that_differ_between_the_first_calls_keep_nothing():
    graph = _scaled_by_column_sums()
    compiled = compile_graph_triton(graph)
    for _ in range(3):
        assert_matches_eager(compiled, graph, _x(), torch.randn(16, 32, device=DEVICE), rtol=1e-5, atol=1e-5)
    assert compiled._straight and "lookup" not in compiled._straight.source


def test_a_callers_own_tensor_passed_again_unchanged_is_not_kept_from():
    """Only parameters and buffers: values derived from an activation the caller passes again are
    computed every call (a benchmark passing one input would otherwise skip work users pay for)."""
    types = {"x": TensorType.make((64, 32), torch.float32, device=DEVICE),
             "w": TensorType.make((16, 32), torch.float32, device=DEVICE)}
    graph = make_graph(
        "scaled", types, lambda b, x, w: b.op("aten.mul.Tensor", x, b.op("aten.sum.dim_IntList", w, [0]))
    )
    compiled = compile_graph_triton(graph)
    x, w = _x(), torch.randn(16, 32, device=DEVICE)
    for _ in range(3):
        assert_matches_eager(compiled, graph, x, w, rtol=1e-5, atol=1e-5)
    assert compiled._straight and "lookup" not in compiled._straight.source


def test_inference_tensors_and_the_switch_keep_nothing(monkeypatch):
    graph = _scaled_by_column_sums()
    with torch.inference_mode():  # inference tensors have no version counter
        w = torch.randn(16, 32, device=DEVICE)
        compiled = compile_graph_triton(graph)
        for _ in range(3):
            assert_matches_eager(compiled, graph, _x(), w, rtol=1e-5, atol=1e-5)
    assert compiled._straight and "lookup" not in compiled._straight.source
    monkeypatch.setenv("TORCHSMITH_KEEP_INPUT_DERIVED", "0")
    compiled = compile_graph_triton(graph)
    w = torch.randn(16, 32, device=DEVICE)
    for _ in range(3):
        assert_matches_eager(compiled, graph, _x(), w, rtol=1e-5, atol=1e-5)
    assert compiled._straight and "lookup" not in compiled._straight.source


def test_a_kept_value_that_is_a_graph_output_is_computed_every_call():
    """The caller may change an output in place: it is never a kept tensor."""
    types = {"x": TensorType.make((64, 32), torch.float32, device=DEVICE),
             "self__parameters_w": TensorType.make((16, 32), torch.float32, device=DEVICE)}

    def body(b, x, w):
        sums = b.op("aten.sum.dim_IntList", w, [0])
        return b.op("aten.mul.Tensor", x, sums), sums

    graph = make_graph("scaled_and_sums", types, body)
    compiled = compile_graph_triton(graph)
    w = torch.randn(16, 32, device=DEVICE)
    for _ in range(2):
        assert_matches_eager(compiled, graph, _x(), w, rtol=1e-5, atol=1e-5)
    assert compiled._straight and "lookup" not in compiled._straight.source
    first = compiled(_x(), w)[1]
    first.zero_()
    assert_matches_eager(compiled, graph, _x(), w, rtol=1e-5, atol=1e-5)


def test_a_graph_told_to_stop_keeping_computes_every_call():
    """What a CUDA graph recording does first: its replays must compute the values from the
    parameters as they are at each replay."""
    graph = _scaled_by_column_sums()
    compiled = compile_graph_triton(graph)
    w = torch.randn(16, 32, device=DEVICE)
    for _ in range(3):
        assert_matches_eager(compiled, graph, _x(), w, rtol=1e-5, atol=1e-5)
    counts = _allocations(compiled)
    compiled.stop_keeping_input_derived()
    for _ in range(2):
        assert_matches_eager(compiled, graph, _x(), w, rtol=1e-5, atol=1e-5)
    assert len(counts) == 4  # the column sums and the output, each call


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need a GPU")
def test_cuda_graph_replays_see_weights_changed_in_place():
    from torchsmith.inductor.runtime.cuda_graphs import cudagraphify

    graph = _scaled_by_column_sums()
    compiled = compile_graph_triton(graph)
    w = torch.randn(16, 32, device=DEVICE)
    x = _x()
    for _ in range(3):  # the third call keeps the column sums
        compiled(x, w)
    runner = cudagraphify(compiled)
    for _ in range(3):
        assert_matches_eager(runner, graph, x, w, rtol=1e-5, atol=1e-5)
    assert runner.replays >= 1
    w.mul_(3)  # in place: the same address, so the replay reads it where it lies
    assert_matches_eager(runner, graph, x, w, rtol=1e-5, atol=1e-5)


def test_graphs_with_a_matmul_epilogue_keep_their_straight_line_form(monkeypatch):
    """max-autotune: a step that launches the matmul template with its consumer as epilogue reads
    the matmul's inputs and writes its result; the kept block around it stays correct."""
    from torchsmith.inductor.triton import mm_epilogue

    if not torch.cuda.is_available():  # nothing is timed in the interpreter: force the fused kernel
        monkeypatch.setattr(mm_epilogue, "ALWAYS_FUSE", True)
        monkeypatch.setattr(mm_epilogue, "CONFIGS", ((16, 16, 16, 4, 1),))
    types = {"x": TensorType.make((33, 20), torch.float32, device=DEVICE),
             "self__parameters_w": TensorType.make((20, 17), torch.float32, device=DEVICE),
             "self__buffers_bias": TensorType.make((17, 4), torch.float32, device=DEVICE)}

    def body(b, x, w, bias):
        product = b.op("aten.gelu.default", b.op("aten.mm.default", x, w))
        return b.op("aten.add.Tensor", product, b.op("aten.sum.dim_IntList", bias, [1]))

    graph = make_graph("mm_epilogue_kept", types, body)
    compiled = compile_graph_triton(graph, options={"max_autotune": True})
    w, bias = torch.randn(20, 17, device=DEVICE), torch.randn(17, 4, device=DEVICE)
    for _ in range(3):
        assert_matches_eager(compiled, graph, _rows(), w, bias, rtol=1e-4, atol=1e-4)
    assert compiled._straight
    bias.add_(1)
    assert_matches_eager(compiled, graph, _rows(), w, bias, rtol=1e-4, atol=1e-4)


def _rows():
    return torch.randn(33, 20, device=DEVICE)
