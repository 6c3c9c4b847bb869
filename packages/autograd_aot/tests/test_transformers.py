"""GPT-2 and BERT from small configurations (random weights), training mode with dropout on.

The torch-level graphs come from torch.fx (through torchsmith.ir.fx), standing in for capture:
parameters are lifted to graph inputs as capture lifts them. On CPU, compiled dropout draws from
the generator exactly as eager does, so with one seed the losses and gradients must agree.
"""

import math

import pytest
import torch
import torch.fx
import torch.nn.functional as F

from torchsmith.autograd_aot import aot_eager
from torchsmith.ir import interpret
from torchsmith.ir.fx import from_fx, lifted_attributes

B, T, D, H, V, LAYERS, P = 2, 8, 16, 2, 30, 2, 0.1


def attention(x, wqkv, bqkv, wo, bo, mask):
    q, k, v = F.linear(x, wqkv, bqkv).split(D, dim=2)
    q, k, v = (t.view(B, T, H, D // H).transpose(1, 2) for t in (q, k, v))
    scores = torch.matmul(q, k.transpose(-2, -1)) * (1.0 / math.sqrt(D // H))
    weights = F.dropout(F.softmax(scores + mask, dim=-1), P, True)
    y = torch.matmul(weights, v).transpose(1, 2).contiguous().view(B, T, D)
    return F.dropout(F.linear(y, wo, bo), P, True)


LAYER_PARAMETERS = {
    "ln1_w": (D,), "ln1_b": (D,), "wqkv": (3 * D, D), "bqkv": (3 * D,), "wo": (D, D), "bo": (D,),
    "ln2_w": (D,), "ln2_b": (D,), "w1": (4 * D, D), "b1": (4 * D,), "w2": (D, 4 * D), "b2": (D,),
}


class TinyModel(torch.nn.Module):
    """Parameters by name; `forward` is the model function over them."""

    def __init__(self, shapes: dict[str, tuple]):
        super().__init__()
        for name, shape in shapes.items():
            is_norm_weight = "ln" in name and name.endswith("_w")
            init = torch.ones(shape) if is_norm_weight else torch.randn(shape) * 0.1
            self.register_parameter(name, torch.nn.Parameter(init))

    def layer(self, i):
        return [getattr(self, f"l{i}_{n}") for n in LAYER_PARAMETERS]


def model_shapes(extra: dict[str, tuple]) -> dict[str, tuple]:
    shapes = dict(extra)
    for i in range(LAYERS):
        shapes.update({f"l{i}_{n}": s for n, s in LAYER_PARAMETERS.items()})
    return shapes


class GPT2(TinyModel):
    def __init__(self):
        super().__init__(model_shapes({"wte": (V, D), "wpe": (T, D), "lnf_ln_w": (D,), "lnf_b": (D,)}))

    def forward(self, idx, targets):
        x = F.dropout(self.wte[idx] + self.wpe[:T], P, True)
        causal = torch.full((T, T), float("-inf")).triu(1)
        for i in range(LAYERS):
            ln1_w, ln1_b, wqkv, bqkv, wo, bo, ln2_w, ln2_b, w1, b1, w2, b2 = self.layer(i)
            x = x + attention(F.layer_norm(x, (D,), ln1_w, ln1_b), wqkv, bqkv, wo, bo, causal)
            h = F.gelu(F.linear(F.layer_norm(x, (D,), ln2_w, ln2_b), w1, b1), approximate="tanh")
            x = x + F.dropout(F.linear(h, w2, b2), P, True)
        logits = F.linear(F.layer_norm(x, (D,), self.lnf_ln_w, self.lnf_b), self.wte)  # tied weights
        return F.cross_entropy(logits.view(-1, V), targets.view(-1))


class Bert(TinyModel):
    def __init__(self):
        super().__init__(model_shapes({
            "word": (V, D), "position": (T, D), "token_type": (2, D), "emb_ln_w": (D,), "emb_b": (D,),
            "head_w": (D, D), "head_b": (D,), "head_ln_w": (D,), "head_ln_b": (D,), "decoder_b": (V,),
        }))

    def forward(self, ids, token_types, attention_mask, labels):
        x = self.word[ids] + self.position[:T] + self.token_type[token_types]
        x = F.dropout(F.layer_norm(x, (D,), self.emb_ln_w, self.emb_b), P, True)
        padding = (1.0 - attention_mask[:, None, None, :].float()) * -10000.0
        for i in range(LAYERS):  # post-norm, as BERT
            ln1_w, ln1_b, wqkv, bqkv, wo, bo, ln2_w, ln2_b, w1, b1, w2, b2 = self.layer(i)
            x = F.layer_norm(x + attention(x, wqkv, bqkv, wo, bo, padding), (D,), ln1_w, ln1_b)
            h = F.linear(F.gelu(F.linear(x, w1, b1)), w2, b2)
            x = F.layer_norm(x + F.dropout(h, P, True), (D,), ln2_w, ln2_b)
        h = F.layer_norm(F.gelu(F.linear(x, self.head_w, self.head_b)), (D,), self.head_ln_w, self.head_ln_b)
        logits = F.linear(h, self.word, self.decoder_b)
        return F.cross_entropy(logits.view(-1, V), labels.view(-1), ignore_index=-100)


def gpt2_program():
    data = [torch.randint(0, V, (B, T)), torch.randint(0, V, (B, T))]
    return GPT2(), data


def bert_program():
    labels = torch.full((B, T), -100)
    labels[:, 2] = torch.randint(0, V, (B,))
    mask = torch.ones(B, T, dtype=torch.long)
    mask[1, 6:] = 0
    data = [torch.randint(0, V, (B, T)), torch.randint(0, 2, (B, T)), mask, labels]
    return Bert(), data


@pytest.mark.parametrize("make", [gpt2_program, bert_program], ids=["gpt2", "bert"])
def test_training_step_matches_eager(make):
    torch.manual_seed(0)
    model, data = make()
    module = torch.fx.symbolic_trace(model)
    graph = from_fx(module, data, lift_attributes=True)
    params = [t for _, t in lifted_attributes(module)]

    def fresh():
        return data + [p.detach().clone().requires_grad_(p.requires_grad) for p in params]

    eager_inputs, compiled_inputs = fresh(), fresh()
    fn = aot_eager(graph, compiled_inputs)
    for _ in range(2):  # the second step reuses the compiled program and its lazily built backward
        torch.manual_seed(1)
        (expected,) = interpret(graph, *eager_inputs)
        expected.backward()
        torch.manual_seed(1)
        (actual,) = fn(*compiled_inputs)
        actual.backward()
        torch.testing.assert_close(actual, expected)
    for e, a in zip(eager_inputs, compiled_inputs):
        if isinstance(e, torch.Tensor) and e.requires_grad:
            torch.testing.assert_close(a.grad, e.grad, atol=1e-5, rtol=1e-4)
    assert len(fn.programs) == 1
    report = fn.last_program.report
    # Saved whatever its size: a GELU output that a matmul reads in the forward and its weight
    # gradient in the backward; cheap values only the backward's own ops read are recomputed.
    assert report.saved_bytes <= report.save_all_bytes and report.recomputed_nodes > 0
    backward_ops = fn.last_program.backward_graph.ops()
    assert not any("bernoulli" in op for op in backward_ops)  # masks are saved, never redrawn
