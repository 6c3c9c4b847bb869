"""Tiny models for the distributed tests: an MLP of user blocks, a GPT-2 and a BERT (random weights,
dropout off, so every rank and every run computes the same numbers)."""

import torch


class Block(torch.nn.Module):
    def __init__(self, d_in: int, d_out: int):
        super().__init__()
        self.lin = torch.nn.Linear(d_in, d_out)

    def forward(self, x):
        return torch.relu(self.lin(x))


class MLP(torch.nn.Module):
    def __init__(self, depth: int = 3):
        super().__init__()
        self.blocks = torch.nn.ModuleList([Block(8, 16)] + [Block(16, 16) for _ in range(depth - 1)])
        self.head = torch.nn.Linear(16, 4)

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return self.head(x)


class GeluBlock(torch.nn.Module):
    """A residual GELU block, as the benchmark's MLP is built of."""

    def __init__(self, width: int):
        super().__init__()
        self.lin = torch.nn.Linear(width, width)

    def forward(self, x):
        return torch.nn.functional.gelu(self.lin(x)) + x


class GeluMLP(torch.nn.Module):
    def __init__(self, width: int = 16, depth: int = 3):
        super().__init__()
        self.blocks = torch.nn.ModuleList([GeluBlock(width) for _ in range(depth)])
        self.head = torch.nn.Linear(width, 4)

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return self.head(x)


class LogitsOf(torch.nn.Module):
    """A transformers model called on token ids, returning its logits."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, ids):
        return self.model(input_ids=ids).logits


def gpt2():
    from transformers import GPT2Config, GPT2LMHeadModel

    config = GPT2Config(vocab_size=64, n_positions=16, n_embd=16, n_layer=2, n_head=2, resid_pdrop=0.0,
                        embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=0, eos_token_id=0)
    return LogitsOf(GPT2LMHeadModel(config))


def bert():
    from transformers import BertConfig, BertForMaskedLM

    config = BertConfig(vocab_size=64, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=32, max_position_embeddings=16, hidden_dropout_prob=0.0,
                        attention_probs_dropout_prob=0.0)
    return LogitsOf(BertForMaskedLM(config))


def build(name: str) -> torch.nn.Module:
    """The model `name` ("mlp", "gpt2", "bert"; "deep_mlp": 12 blocks, GPT-2 small's layer count)
    with weights from seed 0 (equal on every rank)."""
    torch.manual_seed(0)
    return {"mlp": MLP, "deep_mlp": lambda: MLP(depth=12), "gpt2": gpt2, "bert": bert}[name]()


def blocks(model: torch.nn.Module) -> torch.nn.ModuleList:
    """The repeated blocks FSDP shards one by one."""
    if isinstance(model, MLP):
        return model.blocks
    inner = model.model
    return inner.transformer.h if hasattr(inner, "transformer") else inner.bert.encoder.layer


def batches(name: str, rank: int, steps: int) -> list[torch.Tensor]:
    """`steps` inputs for `rank` (each rank trains on its own data, as under DDP)."""
    g = torch.Generator().manual_seed(100 + rank)
    if name.endswith("mlp"):
        return [torch.randn(4, 8, generator=g) for _ in range(steps)]
    return [torch.randint(0, 64, (2, 8), generator=g) for _ in range(steps)]


def loss_of(output: torch.Tensor) -> torch.Tensor:
    return output.float().pow(2).mean()
