"""Training steps through CUDA attention under the whole stack (backend="inductor"): half-precision
attention without a mask runs the fused kernel eager takes (flash or cuDNN), forward and backward
(autograd_aot's fused_attention), and gives eager's outputs and gradients."""

import os

import pytest
import torch
from torch import nn

import torchsmith
from torchsmith.ir import events

pytestmark = pytest.mark.skipif(
    not torch.cuda.is_available() or os.environ.get("TRITON_INTERPRET") == "1", reason="needs a CUDA GPU"
)


class CausalAttention(nn.Module):
    def __init__(self, width: int, heads: int):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(width, 3 * width)
        self.out = nn.Linear(width, width)

    def forward(self, x):
        b, n, _ = x.shape
        q, k, v = self.qkv(x).view(b, n, 3, self.heads, -1).unbind(2)
        y = nn.functional.scaled_dot_product_attention(
            q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True
        )
        return self.out(y.transpose(1, 2).reshape(b, n, -1))


def _models():
    encoder = nn.TransformerEncoderLayer(64, 4, dim_feedforward=128, dropout=0.0, batch_first=True)
    return {"encoder_layer": encoder, "causal": CausalAttention(64, 4)}


@pytest.mark.parametrize("name", ["encoder_layer", "causal"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_training_step_matches_eager(name, dtype):
    torch.manual_seed(0)
    model = _models()[name].to("cuda", dtype)
    twin = _models()[name].to("cuda", dtype)
    twin.load_state_dict(model.state_dict())
    x = torch.randn(4, 128, 64, device="cuda", dtype=dtype)
    compiled = torchsmith.compile(twin, backend="inductor")
    with events.observe() as seen:
        compiled(x).sum().backward()
    twin.zero_grad()
    graphs = {e.payload["name"]: e.payload["graph"] for e in seen
              if e.stage == "autograd_aot" and e.kind == "graph"}
    forward_ops, backward_ops = graphs["forward"].ops(), graphs["backward"].ops()
    fused = [k for k in ("flash", "cudnn") if
             f"aten._scaled_dot_product_{k}_attention.default" in forward_ops]
    assert len(fused) == 1, forward_ops  # the kernel eager takes
    assert f"aten._scaled_dot_product_{fused[0]}_attention_backward.default" in backward_ops
    assert "aten.bmm.default" not in forward_ops + backward_ops
    for _ in range(2):
        expected = model(x)
        got = compiled(x)
        torch.testing.assert_close(got, expected, rtol=2e-2, atol=2e-2)
        expected.float().square().mean().backward()
        got.float().square().mean().backward()
        for (n, p), q in zip(model.named_parameters(), twin.parameters()):
            torch.testing.assert_close(q.grad, p.grad, rtol=5e-2, atol=5e-3, msg=n)
            p.grad = q.grad = None
