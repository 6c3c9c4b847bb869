"""Tracing torch-level graphs to ATen, and the text of the graphs the pipeline produces."""

import pytest
import torch

from torchsmith.autograd_aot import TraceError, aot_compile, aot_eager, interpreter_compiler, trace
from torchsmith.ir import GraphBuilder, Node, interpret

FORWARD = """\
graph block_forward(%x: f32[4, 3] cpu, %w: f32[5, 3] cpu grad, %b: f32[5] cpu grad):
  %t: f32[3, 5]{1, 3} cpu = aten.t.default(%w)  # model.py:7
  %addmm: f32[4, 5] cpu = aten.addmm.default(%b, %x, %t)  # model.py:7
  %relu: f32[4, 5] cpu = aten.relu.default(%addmm)  # model.py:8
  %sigmoid: f32[4, 5] cpu = aten.sigmoid.default(%relu)  # model.py:9
  return (%sigmoid, %x, %relu)"""

# sigmoid is recomputed from the saved relu instead of being saved too.
BACKWARD = """\
graph block_backward(%x: f32[4, 3] cpu, %relu: f32[4, 5] cpu, %tangent_0: f32[4, 5] cpu):
  %sigmoid: f32[4, 5] cpu = aten.sigmoid.default(%relu)  # model.py:9
  %sigmoid_backward: f32[4, 5] cpu = aten.sigmoid_backward.default(%tangent_0, %sigmoid)
  %threshold_backward: f32[4, 5] cpu = aten.threshold_backward.default(%sigmoid_backward, %relu, 0)
  %t_1: f32[5, 4]{1, 5} cpu = aten.t.default(%threshold_backward)
  %mm: f32[5, 3] cpu = aten.mm.default(%t_1, %x)
  %t_2: f32[3, 5]{1, 3} cpu = aten.t.default(%mm)
  %sum: f32[1, 5] cpu = aten.sum.dim_IntList(%threshold_backward, [0], True)
  %view: f32[5] cpu = aten.view.default(%sum, [5])
  %t_3: f32[5, 3] cpu = aten.t.default(%t_2)
  return (%t_3, %view)"""


def block_graph():
    b = GraphBuilder("block")
    x, w = b.input("x", "f32[4, 3] cpu"), b.input("w", "f32[5, 3] cpu grad")
    bias = b.input("b", "f32[5] cpu grad")
    h = b.op("torch.nn.functional.linear", x, w, bias, source="model.py:7")
    return b.build(b.op("torch.sigmoid", b.op("torch.relu", h, source="model.py:8"), source="model.py:9"))


def block_inputs():
    return [torch.randn(4, 3), torch.randn(5, 3, requires_grad=True), torch.randn(5, requires_grad=True)]


def text(graph) -> str:
    return "\n".join(line for line in str(graph).splitlines() if not line.startswith("# stamp"))


def test_forward_and_backward_text():
    program = aot_eager(block_graph(), block_inputs()).last_program
    assert text(program.forward_graph) == FORWARD
    assert text(program.backward_graph) == BACKWARD
    assert program.report.saved_bytes == 4 * 5 * 4 and program.report.save_all_bytes == 2 * 4 * 5 * 4
    assert [s.pass_name for s in program.forward_graph.stamps] == ["trace", "functionalize", "partition"]


def test_inference_trace_has_no_tangents_or_grads():
    traced = trace(block_graph(), block_inputs(), training=False)
    assert traced.graph.ops() == ["aten.t.default", "aten.addmm.default", "aten.relu.default",
                                  "aten.sigmoid.default"]
    assert len(traced.graph.inputs) == 3 and not traced.is_training
    assert interpret(traced.graph, *block_inputs())[0].shape == (4, 5)


def test_joint_trace_adds_tangents_and_gradients():
    traced = trace(block_graph(), block_inputs(), training=True)
    assert [v.name for v in traced.graph.inputs] == ["x", "w", "b", "tangent_0"]
    assert traced.grad_inputs == (1, 2)
    assert len(traced.graph.outputs) == 1 + 2
    assert "aten.threshold_backward.default" in traced.graph.ops()


def test_factory_ops_record_the_real_device():
    b = GraphBuilder("factory")
    x = b.input("x", "f32[3] cpu")
    graph = b.build(b.op("torch.add", x, b.op("torch.ones", 3, device=torch.device("cpu"))))
    traced = trace(graph, [torch.randn(3)], training=False)
    assert "meta" not in str(traced.graph)
    x_value = torch.randn(3)
    torch.testing.assert_close(aot_eager(graph, [x_value])(x_value)[0], x_value + 1)


def test_trace_errors_name_the_torch_node():
    b = GraphBuilder("bad")
    x = b.input("x", "f32[3] cpu")
    graph = b.build(b.op("torch.Tensor.view", x, 2, 2, out_type="f32[2, 2] cpu"))
    with pytest.raises(TraceError, match=r"torch\.Tensor\.view\(%x, 2, 2\)"):
        trace(graph, [torch.randn(3)], training=False)


def test_decompose_hook_runs_on_the_functional_graph():
    def relu_to_clamp(graph):
        nodes = tuple(
            Node("aten.clamp_min.default", n.args + (0.0,), n.kwargs, n.outputs, n.source)
            if n.op == "aten.relu.default" else n for n in graph.nodes
        )
        return graph.replace(nodes=nodes)

    inputs = block_inputs()
    fn = aot_compile(block_graph(), inputs, interpreter_compiler, decompose=relu_to_clamp)
    assert "aten.clamp_min.default" in fn.last_program.forward_graph.ops()
    assert "decompose" in [s.pass_name for s in fn.last_program.forward_graph.stamps]
    torch.testing.assert_close(fn(*inputs)[0], interpret(block_graph(), *inputs)[0])


def attention_graph(device: str):
    b = GraphBuilder("attention")
    q = b.input("q", f"bf16[2, 4, 16, 32] {device} grad")
    k = b.input("k", f"bf16[2, 4, 16, 32] {device} grad")
    v = b.input("v", f"bf16[2, 4, 16, 32] {device} grad")
    return b.build(b.op("torch.nn.functional.scaled_dot_product_attention", q, k, v))


def _fused_ops(graph, inputs, training=True, device="cuda:0"):
    return trace(graph, inputs, training=training, device=device).graph.ops()


def test_cuda_training_attention_traces_to_the_fused_kernel_and_its_backward(monkeypatch):
    from torchsmith.autograd_aot import fused_attention

    # no GPU here: torch is told eager takes the memory-efficient kernel
    monkeypatch.setattr(fused_attention, "_eager_kernel", lambda call, device: "efficient")
    monkeypatch.setenv("TORCHSMITH_FUSED_ATTENTION", "1")
    qkv = [torch.empty(2, 4, 16, 32, dtype=torch.bfloat16, device="meta", requires_grad=True)] * 3
    ops = _fused_ops(attention_graph("cuda:0"), qkv)
    assert "aten._scaled_dot_product_efficient_attention.default" in ops
    assert "aten._scaled_dot_product_efficient_attention_backward.default" in ops
    assert "aten.bmm.default" not in ops and "aten._softmax.default" not in ops
    # On the CPU (and for inference) attention keeps torch's own choice.
    cpu_qkv = [torch.randn(2, 4, 16, 32, dtype=torch.bfloat16, requires_grad=True) for _ in range(3)]
    cpu_ops = trace(attention_graph("cpu"), cpu_qkv, training=True).graph.ops()
    assert "aten._scaled_dot_product_efficient_attention.default" not in cpu_ops
    inference = _fused_ops(attention_graph("cuda:0"), qkv, training=False)
    assert "aten._scaled_dot_product_efficient_attention.default" not in inference
    monkeypatch.delenv("TORCHSMITH_FUSED_ATTENTION")  # off by default until measured on a GPU
    default = _fused_ops(attention_graph("cuda:0"), qkv)
    assert "aten._scaled_dot_product_efficient_attention.default" not in default


def test_cuda_training_attention_keeps_half_precision_products(monkeypatch):
    """On meta, torch's math path computes half-precision attention in float32; CUDA's does not.
    Where no fused kernel runs, the traced CUDA program computes its products in bfloat16, as eager
    on the GPU."""
    from torchsmith.autograd_aot import fused_attention

    monkeypatch.setattr(fused_attention, "_eager_kernel", lambda call, device: "math")
    qkv = [torch.empty(2, 4, 16, 32, dtype=torch.bfloat16, device="meta", requires_grad=True)] * 3
    graph = trace(attention_graph("cuda:0"), qkv, training=True, device="cuda:0").graph
    products = [n for n in graph.nodes if n.op in ("aten.bmm.default", "aten.mm.default")]
    assert products and all(n.output.type.dtype == torch.bfloat16 for n in products)


@pytest.mark.parametrize("variant", ["plain", "bool_mask", "float_mask", "causal", "masked_row", "scale"])
def test_cuda_math_attention_matches_torch(variant):
    from torchsmith.autograd_aot.fused_attention import _math_attention

    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 3, 5, 8, requires_grad=True) for _ in range(3))
    mask, causal, scale = None, False, None
    if variant in ("bool_mask", "masked_row"):
        mask = torch.rand(5, 5) > 0.3
        mask[:, 0] = variant == "bool_mask"  # masked_row: row 0 of the scores fully masked below
        mask[0] = variant == "bool_mask" or mask[0] & False
    elif variant == "float_mask":
        mask = torch.randn(2, 1, 5, 5)
    causal = variant == "causal"
    scale = 0.3 if variant == "scale" else None
    got = _math_attention(q, k, v, mask, causal, scale)
    expected = torch.nn.functional.scaled_dot_product_attention(q, k, v, mask, is_causal=causal, scale=scale)
    if variant == "masked_row":
        expected = torch.nan_to_num(expected)  # eager's math gives NaN rows, _safe_softmax zeros
        assert torch.equal(got[..., 0, :], torch.zeros_like(got[..., 0, :]))
    torch.testing.assert_close(got, expected)
    grads = torch.autograd.grad(got.sum(), (q, k, v))
    if variant != "masked_row":
        expected_grads = torch.autograd.grad(expected.sum(), (q, k, v))
        for g, e in zip(grads, expected_grads):
            torch.testing.assert_close(g, e)


def test_attention_inside_multi_head_attention_takes_the_fused_kernel_too(monkeypatch):
    from torchsmith.autograd_aot import fused_attention

    capture = pytest.importorskip("torchsmith.capture").capture  # makes the graph (not in isolation)
    monkeypatch.setattr(fused_attention, "_eager_kernel", lambda call, device: "efficient")
    monkeypatch.setenv("TORCHSMITH_FUSED_ATTENTION", "1")
    graphs = []

    def keep(graph, example_inputs):
        graphs.append((graph, example_inputs))
        return lambda *args: interpret(graph, *args)

    layer = torch.nn.TransformerEncoderLayer(32, 4, dim_feedforward=64, dropout=0.0, batch_first=True)
    capture(lambda x: layer(x).sum(), keep)(torch.randn(2, 8, 32))
    graph, example = graphs[0]
    assert "torch.nn.functional.multi_head_attention_forward" in graph.ops()  # kept whole by capture
    meta = [
        torch.empty_like(t, device="meta").requires_grad_(t.requires_grad) if torch.is_tensor(t) else t
        for t in example
    ]
    ops = _fused_ops(graph, meta)
    assert "aten._scaled_dot_product_efficient_attention_backward.default" in ops
    assert "aten.bmm.default" not in ops
    assert torch.nn.functional.scaled_dot_product_attention is torch._C._nn.scaled_dot_product_attention


def test_fused_kernel_query_sees_real_tensors_while_tracing(monkeypatch):
    """Inside the tracer's dispatch mode a factory call makes a meta tensor (and a graph node): the
    question which kernel eager takes must be asked with real tensors, outside it (on the H200 it
    was once asked with meta tensors, so attention never took a fused kernel)."""
    from torchsmith.autograd_aot import fused_attention
    from torchsmith.autograd_aot.trace import _Recorder

    seen = []

    def choice(query, key, value, *args, **kwargs):
        seen.append((query.device.type, query.requires_grad))
        return torch.nn.attention.SDPBackend.CUDNN_ATTENTION.value

    monkeypatch.setattr(torch, "_fused_sdp_choice", choice)
    q = torch.empty(2, 4, 16, 32, device="meta", requires_grad=True)
    call = dict(fused_attention._DEFAULTS, query=q, key=q, value=q)
    recorder = _Recorder("cuda:0")
    with recorder:
        assert fused_attention._eager_kernel(call, "cpu") == "cudnn"  # the real device, here the CPU
    assert seen == [("cpu", True)]
    assert recorder.nodes == []
