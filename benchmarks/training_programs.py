"""Five small training programs for benchmarks: each an `nn.Module` whose forward returns a loss.

`PROGRAMS[name]()` returns `(title, module, data)`; `module(*data)` is one training step's
forward. Random weights, fp32, CPU; GPT-2 and BERT come from `transformers` configurations (no
downloads). `module.dropout` says whether the program uses dropout; `dropout_off(module)` sets every
dropout probability to 0.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


class WithLoss(torch.nn.Module):
    """`model` followed by a loss: the program returns one scalar to call `.backward()` on."""

    def __init__(self, model: torch.nn.Module, loss, dropout: bool):
        super().__init__()
        self.model, self.loss, self.dropout = model, loss, dropout

    def forward(self, *data):
        return self.loss(self.model, *data)


def mlp():
    model = torch.nn.Sequential(
        torch.nn.Linear(256, 512), torch.nn.GELU(), torch.nn.Linear(512, 512), torch.nn.ReLU(),
        torch.nn.Linear(512, 10),
    )
    data = [torch.randn(64, 256), torch.randint(0, 10, (64,))]
    return "MLP 64x256 -> 512 -> 512 -> 10", WithLoss(model, _classifier_loss, False), data


def encoder():
    model = torch.nn.TransformerEncoderLayer(64, 4, dim_feedforward=256, dropout=0.1, batch_first=True)
    # A loss that weighs each output differently: the outputs are layer-normed, so the mean of
    # their squares would have almost no gradient.
    data = [torch.randn(4, 32, 64), torch.randn(4, 32, 64)]
    return ("nn.TransformerEncoderLayer 4x32x64, 4 heads, ffn 256, dropout 0.1",
            WithLoss(model, lambda m, x, w: (m(x) * w).mean(), True), data)


def convnet():
    nn = torch.nn
    model = nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(32 * 8 * 8, 10),
    )
    data = [torch.randn(8, 3, 32, 32), torch.randint(0, 10, (8,))]
    return ("conv net 8x3x32x32: 2x (conv, BatchNorm train, relu, maxpool), linear",
            WithLoss(model, _classifier_loss, False), data)


def _classifier_loss(m, x, labels):
    return F.cross_entropy(m(x), labels)


def _lm_loss(logits, labels):
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1))


def gpt2():
    from transformers import GPT2Config, GPT2LMHeadModel

    config = GPT2Config(vocab_size=128, n_positions=64, n_embd=64, n_layer=2, n_head=4, bos_token_id=0,
                        eos_token_id=0, attn_implementation="eager")
    model = GPT2LMHeadModel(config)
    ids = torch.randint(0, 128, (2, 32))

    def loss(m, ids):
        logits = m(input_ids=ids, use_cache=False).logits
        return _lm_loss(logits[:, :-1], ids[:, 1:])

    title = "GPT-2 (transformers), 2 layers, d=64, 4 heads, 2x32 tokens, dropout 0.1"
    return title, WithLoss(model, loss, True), [ids]


def bert():
    from transformers import BertConfig, BertForMaskedLM

    config = BertConfig(vocab_size=128, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                        intermediate_size=256, max_position_embeddings=64, attn_implementation="eager")
    model = BertForMaskedLM(config)
    ids, types = torch.randint(0, 128, (2, 32)), torch.randint(0, 2, (2, 32))
    mask = torch.ones(2, 32, dtype=torch.long)
    mask[1, 24:] = 0

    def loss(m, ids, types, mask):
        logits = m(input_ids=ids, token_type_ids=types, attention_mask=mask).logits
        return _lm_loss(logits, ids)

    return ("BERT (transformers, masked LM), 2 layers, d=64, 4 heads, 2x32 tokens, padding mask, dropout 0.1",
            WithLoss(model, loss, True), [ids, types, mask])


PROGRAMS = {"mlp": mlp, "encoder": encoder, "convnet": convnet, "gpt2": gpt2, "bert": bert}


def dropout_off(module: torch.nn.Module) -> int:
    """Set every dropout probability in `module` to 0 (nn.Dropout modules and float attributes such
    as MultiheadAttention.dropout or BERT's attention dropout_prob); returns how many it changed."""
    changed = 0
    for m in module.modules():
        if isinstance(m, torch.nn.modules.dropout._DropoutNd):
            m.p, changed = 0.0, changed + 1
        for name, value in list(vars(m).items()):
            if "dropout" in name and isinstance(value, float) and value:
                setattr(m, name, 0.0)
                changed += 1
    return changed
