"""CUDA training attention as the fused kernel eager takes (fused_attention.py: flash or cuDNN), its
backward, their results laid out as the CUDA kernel lays them out (device_layouts.ATTENTION_MIRRORS).
Without a GPU, torch is told the kernel runs; with one, the real query decides and the compiled
step is compared with eager."""

import os

import pytest
import torch

from torchsmith.autograd_aot import fused_attention, lower, trace
from torchsmith.ir import GraphBuilder, SymIntType

FLASH = "aten._scaled_dot_product_flash_attention.default"
FLASH_BACKWARD = "aten._scaled_dot_product_flash_attention_backward.default"


def head_split_graph(device: str, causal: bool = False):
    """Attention over the heads of one (batch, position, 3 * width) projection, as
    nn.MultiheadAttention and transformers split it: q, k and v are not dense."""
    b = GraphBuilder("head_split")
    x = b.input("x", f"bf16[2, 16, 96] {device} grad")
    qkv = b.op("aten.view.default", x, [2, 16, 3, 4, 8])
    q, k, v = (b.op("aten.transpose.int", b.op("aten.select.int", qkv, 2, i), 1, 2) for i in range(3))
    return b.build(b.op("torch.nn.functional.scaled_dot_product_attention", q, k, v, is_causal=causal))


def meta_input():
    return [torch.empty(2, 16, 96, dtype=torch.bfloat16, device="meta", requires_grad=True)]


@pytest.fixture
def flash_runs(monkeypatch):
    """Torch says flash attention runs these inputs (no GPU here)."""
    monkeypatch.setattr(fused_attention, "_eager_kernel", lambda call, device: "flash")


@pytest.mark.parametrize("causal", [False, True])
def test_training_attention_traces_to_flash_and_its_backward(flash_runs, causal):
    graph = trace(head_split_graph("cuda:0", causal), meta_input(), training=True, device="cuda:0").graph
    ops = graph.ops()
    assert FLASH in ops and FLASH_BACKWARD in ops
    assert "aten.bmm.default" not in ops and "aten._softmax.default" not in ops
    (forward,) = [n for n in graph.nodes if n.op == FLASH]
    assert (len(forward.args) > 4 and forward.args[4]) is causal  # (q, k, v, dropout_p, is_causal)
    # the sequence lengths the kernel returns are sizes the graph knows
    assert [v.type for v in forward.outputs[4:6]] == [SymIntType(16), SymIntType(16)]


def test_flash_results_are_laid_out_as_the_cuda_kernel_writes_them(flash_runs):
    """q, k, v are head splits of one projection (not dense): the kernel writes its result and the
    gradients heads-last, (batch, position, head, feature) in memory, so merging heads is a view."""
    graph = trace(head_split_graph("cuda:0"), meta_input(), training=True, device="cuda:0").graph
    heads_last = (16 * 4 * 8, 8, 4 * 8, 1)
    for node in graph.nodes:
        if node.op == FLASH:
            assert node.outputs[0].type.strides == heads_last
        if node.op == FLASH_BACKWARD:
            assert [v.type.strides for v in node.outputs] == [heads_last] * 3


def test_cudnn_gradients_are_laid_out_as_the_cuda_kernel_writes_them(monkeypatch):
    """cuDNN's backward allocates each gradient dense in its argument's dim order (heads last for a
    head split), where the meta kernel says contiguous."""
    monkeypatch.setattr(fused_attention, "_eager_kernel", lambda call, device: "cudnn")
    graph = trace(head_split_graph("cuda:0"), meta_input(), training=True, device="cuda:0").graph
    heads_last = (16 * 4 * 8, 8, 4 * 8, 1)
    (forward,) = [n for n in graph.nodes if n.op == CUDNN]
    (backward,) = [n for n in graph.nodes if n.op == CUDNN_BACKWARD]
    assert forward.outputs[0].type.strides == heads_last
    assert [v.type.strides for v in backward.outputs] == [heads_last] * 3


def test_dense_inputs_keep_their_layout(flash_runs):
    b = GraphBuilder("dense")
    q, k, v = (b.input(n, "bf16[2, 4, 16, 8] cuda:0 grad") for n in "qkv")
    graph = b.build(b.op("torch.nn.functional.scaled_dot_product_attention", q, k, v))
    meta = [torch.empty(2, 4, 16, 8, dtype=torch.bfloat16, device="meta", requires_grad=True)] * 3
    traced = trace(graph, meta, training=True, device="cuda:0").graph
    (forward,) = [n for n in traced.nodes if n.op == FLASH]
    assert forward.outputs[0].type.strides == (512, 128, 8, 1)


def test_partition_saves_what_the_flash_backward_reads(flash_runs):
    lowered = lower(head_split_graph("cuda:0"), meta_input(), training=True, device="cuda:0")
    saved = {v.name for v in lowered.backward.inputs}
    backward_node = next(n for n in lowered.backward.nodes if n.op == FLASH_BACKWARD)
    read = {a.name for a in backward_node.args if hasattr(a, "name")}
    assert read - {"tangent_0"} <= saved | {v.name for n in lowered.backward.nodes for v in n.outputs}
    assert FLASH not in lowered.backward.ops()  # the forward kernel is not run again


def test_math_where_eager_takes_no_fused_kernel(monkeypatch):
    monkeypatch.setattr(fused_attention, "_eager_kernel", lambda call, device: "math")
    ops = trace(head_split_graph("cuda:0"), meta_input(), training=True, device="cuda:0").graph.ops()
    assert FLASH not in ops and "aten.bmm.default" in ops


def test_masks_dropout_and_grouped_heads_keep_the_math_path(monkeypatch):
    """Each changes the fused kernels' contract: torch is not even asked."""
    monkeypatch.setattr(torch, "_fused_sdp_choice", lambda *args, **kwargs: pytest.fail("asked torch"))
    q = torch.empty(2, 4, 16, 8, dtype=torch.bfloat16, device="meta")
    mask = torch.ones(16, 16, dtype=torch.bool)
    for extra in ({"attn_mask": mask}, {"dropout_p": 0.1}, {"enable_gqa": True}):
        call = dict(fused_attention._DEFAULTS, query=q, key=q, value=q, **extra)
        assert fused_attention._eager_kernel(call, "cuda:0") == "math"


CUDNN = "aten._scaled_dot_product_cudnn_attention.default"
CUDNN_BACKWARD = "aten._scaled_dot_product_cudnn_attention_backward.default"


def test_training_attention_traces_to_cudnn_where_eager_takes_it(monkeypatch):
    monkeypatch.setattr(fused_attention, "_eager_kernel", lambda call, device: "cudnn")
    lowered = lower(head_split_graph("cuda:0", causal=True), meta_input(), training=True, device="cuda:0")
    assert CUDNN in lowered.forward.ops() and CUDNN_BACKWARD in lowered.backward.ops()
    assert "aten.bmm.default" not in lowered.forward.ops() + lowered.backward.ops()


@pytest.mark.parametrize("kernel", ["flash", "cudnn"])
def test_backward_reads_views_of_the_saved_projection(monkeypatch, kernel):
    """The fused backward reads q, k and v: the partition saves the projection they view (which the
    forward writes anyway) and the backward takes views of it, rather than saving each head split
    as a copy of its own."""
    monkeypatch.setattr(fused_attention, "_eager_kernel", lambda call, device: kernel)
    b = GraphBuilder("projected")
    x = b.input("x", "bf16[2, 16, 32] cuda:0 grad")
    w = b.input("w", "bf16[96, 32] cuda:0 grad")
    qkv = b.op("aten.view.default", b.op("aten.linear.default", x, w), [2, 16, 3, 4, 8])
    q, k, v = (b.op("aten.transpose.int", b.op("aten.select.int", qkv, 2, i), 1, 2) for i in range(3))
    graph = b.build(b.op("torch.nn.functional.scaled_dot_product_attention", q, k, v))
    meta = [torch.empty(2, 16, 32, dtype=torch.bfloat16, device="meta", requires_grad=True),
            torch.empty(96, 32, dtype=torch.bfloat16, device="meta", requires_grad=True)]
    lowered = lower(graph, meta, training=True, device="cuda:0")
    fused = next(n for n in lowered.backward.nodes if n.op in (FLASH_BACKWARD, CUDNN_BACKWARD))
    saved = {v.name for v in lowered.backward.inputs}
    assert not any(a.name in saved for a in fused.args[1:4])  # views made in the backward


needs_cuda = pytest.mark.skipif(
    not torch.cuda.is_available() or os.environ.get("TRITON_INTERPRET") == "1", reason="needs a CUDA GPU"
)


@needs_cuda
def test_gpu_traces_the_kernel_eager_takes():
    x = torch.randn(2, 16, 96, dtype=torch.bfloat16, device="cuda", requires_grad=True)
    q, k, v = (x.detach().view(2, 16, 3, 4, 8)[:, :, i].transpose(1, 2).requires_grad_() for i in range(3))
    expected = {1: FLASH, 3: CUDNN}.get(torch._fused_sdp_choice(q, k, v, None, 0.0, False, scale=None))
    ops = trace(head_split_graph("cuda:0"), [x], training=True).graph.ops()
    assert expected is not None and expected in ops
    b = GraphBuilder("float32")
    q, k, v = (b.input(n, "f32[2, 4, 16, 8] cuda:0 grad") for n in "qkv")
    f32 = b.build(b.op("torch.nn.functional.scaled_dot_product_attention", q, k, v))
    qkv = [torch.randn(2, 4, 16, 8, device="cuda", requires_grad=True) for _ in range(3)]
    assert FLASH not in trace(f32, qkv, training=True).graph.ops()
