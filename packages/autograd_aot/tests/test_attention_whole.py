"""`F.scaled_dot_product_attention` where no gradient flows through it is traced as one
`aten.scaled_dot_product_attention.default` node (fused_attention.py): on meta the dispatcher would
split it into the math path, which computes half-precision inputs in float32."""

import pytest
import torch

from torchsmith.autograd_aot import trace
from torchsmith.ir import GraphBuilder, interpret

WHOLE = "aten.scaled_dot_product_attention.default"


def _graph(device: str, dtype: str = "bf16", grad: str = "", mask: str | None = None, **kwargs):
    b = GraphBuilder("attention")
    q, k, v = (b.input(n, f"{dtype}[2, 4, 16, 32] {device} {grad}".strip()) for n in "qkv")
    args = [q, k, v]
    if mask is not None:
        args.append(b.input("mask", f"{mask}[16, 16] {device}"))
    return b.build(b.op("torch.nn.functional.scaled_dot_product_attention", *args, **kwargs))


@pytest.mark.parametrize("device", ["cpu", "cuda:0"])
def test_inference_attention_is_one_node_in_the_input_dtype(device):
    qkv = [torch.empty(2, 4, 16, 32, dtype=torch.bfloat16, device="meta") for _ in range(3)]
    graph = trace(_graph(device), qkv, training=False, device=device).graph
    assert graph.ops() == [WHOLE]
    (node,) = graph.nodes
    assert node.output.type.dtype == torch.bfloat16 and str(node.output.type.device) == device
    assert "aten.bmm.default" not in graph.ops()


@pytest.mark.parametrize(
    "mask, options",
    [(None, {}), (None, {"is_causal": True}), ("bool", {}), ("f32", {"scale": 0.3}),
     ("bool", {"scale": 0.3})],
)
def test_whole_attention_computes_what_eager_does(mask, options):
    torch.manual_seed(0)
    inputs = [torch.randn(2, 4, 16, 32) for _ in range(3)]
    if mask == "bool":
        inputs.append(torch.rand(16, 16) > 0.3)
    elif mask == "f32":
        inputs.append(torch.randn(16, 16))
    graph = _graph("cpu", "f32", mask=mask, **options)
    aten = trace(graph, inputs, training=False).graph
    assert aten.ops() == [WHOLE]
    torch.testing.assert_close(interpret(aten, *inputs)[0], interpret(graph, *inputs)[0])


def test_frozen_inputs_in_a_training_trace_are_one_node_too():
    """Grad mode on, but nothing that requires grad reaches the call (frozen projections)."""
    qkv = [torch.randn(2, 4, 16, 32) for _ in range(3)]
    assert trace(_graph("cpu", "f32"), qkv, training=True).graph.ops() == [WHOLE]


def test_attention_with_gradients_or_dropout_keeps_its_parts():
    qkv = [torch.randn(2, 4, 16, 32, requires_grad=True) for _ in range(3)]
    ops = trace(_graph("cpu", "f32", grad="grad"), qkv, training=True).graph.ops()
    assert WHOLE not in ops and "aten.bmm.default" in ops
    plain = [t.detach() for t in qkv]
    dropout = trace(_graph("cpu", "f32", dropout_p=0.1), plain, training=False).graph.ops()
    assert WHOLE not in dropout
