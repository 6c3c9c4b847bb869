"""End to end training through `torchsmith.compile` with backend="aot_eager" and backend="inductor":
GPT-2 and BERT.

Both models are built by `transformers` from small configurations with random weights (nothing is
downloaded) and dropout 0, so eager and compiled training agree up to float rounding. Each test runs
a few optimizer steps on an eager copy and a compiled copy built from the same weights and compares
the loss and every parameter's gradient at each step, then the final weights. Under "inductor" every
graph must compile (no fallback to eager, forward or backward) and the compiled code must run.
"""

import copy
import logging

import pytest
import torch

import torchsmith

transformers = pytest.importorskip("transformers")

STEPS = 3
ATOL, RTOL = 1e-5, 1e-4


BACKENDS = ["aot_eager", "inductor"]


class Counting:
    """A registered backend, counting the graphs it is given and the errors it raised on them."""

    def __init__(self, name):
        self.graphs, self.failures = [], []
        self.inner = torchsmith.lookup_backend(name)

    def __call__(self, graph, example_inputs):
        self.graphs.append(graph)
        try:
            return self.inner(graph, example_inputs)
        except Exception as e:
            self.failures.append(f"{type(e).__name__}: {e}")
            raise


def _inductor_stats():
    from torchsmith.inductor import BACKEND_STATS

    return (BACKEND_STATS.calls, BACKEND_STATS.kernel_calls, BACKEND_STATS.backward_fallbacks)


def _train_and_compare(model, batches, caplog, backend_name):
    torch.manual_seed(0)
    eager_model = model
    compiled_model = copy.deepcopy(model)
    backend = Counting(backend_name)
    stats_before = _inductor_stats() if backend_name == "inductor" else None
    compiled = torchsmith.compile(compiled_model, backend=backend)
    eager_opt = torch.optim.SGD(eager_model.parameters(), lr=0.1)
    compiled_opt = torch.optim.SGD(compiled_model.parameters(), lr=0.1)
    names = [n for n, _ in eager_model.named_parameters()]
    with caplog.at_level(logging.WARNING, logger="torchsmith"):
        for step, batch in enumerate(batches):
            expected = eager_model(**batch).loss
            actual = compiled(**batch).loss
            torch.testing.assert_close(actual, expected, atol=ATOL, rtol=RTOL, msg=f"loss at step {step}")
            expected.backward()
            actual.backward()
            for name, p, q in zip(names, eager_model.parameters(), compiled_model.parameters(), strict=True):
                one_sided = (p.grad is None) != (q.grad is None)
                assert not one_sided, f"step {step}: only one side has a grad of {name}"
                if p.grad is not None:
                    torch.testing.assert_close(q.grad, p.grad, atol=ATOL, rtol=RTOL,
                                               msg=f"grad of {name} at step {step}")
            eager_opt.step()
            compiled_opt.step()
            eager_opt.zero_grad()
            compiled_opt.zero_grad()
    for (name, p), q in zip(eager_model.named_parameters(), compiled_model.parameters(), strict=True):
        torch.testing.assert_close(q, p, atol=ATOL, rtol=RTOL, msg=f"weight {name} after training")
    # the model's layers are captured (graph breaks at transformers' output classes are expected)
    captured = sum(len(g.nodes) for g in backend.graphs)
    assert captured >= 50, f"only {captured} ops captured in {len(backend.graphs)} graphs: mostly eager"
    internal = [r for r in caplog.records if "internal error" in r.getMessage()]
    assert not internal, internal[0].getMessage()
    assert not backend.failures, backend.failures[0][:2000]
    if stats_before is not None:
        calls, kernel_calls, backward_fallbacks = _inductor_stats()
        assert calls > stats_before[0] and kernel_calls > stats_before[1], "no generated kernel ran"
        assert backward_fallbacks == stats_before[2], "a backward graph fell back to eager ops"
    return backend


def _token_batches(vocab, n, batch=2, length=16):
    gen = torch.Generator().manual_seed(1)
    return [torch.randint(0, vocab, (batch, length), generator=gen) for _ in range(n)]


@pytest.mark.parametrize("backend", BACKENDS)
def test_gpt2_training_matches_eager(caplog, backend):
    torch.manual_seed(0)
    config = transformers.GPT2Config(n_layer=2, n_embd=64, n_head=2, vocab_size=128, n_positions=64,
                                     resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, use_cache=False,
                                     bos_token_id=0, eos_token_id=0)
    model = transformers.GPT2LMHeadModel(config).train()
    batches = [{"input_ids": ids, "labels": ids} for ids in _token_batches(128, STEPS)]
    _train_and_compare(model, batches, caplog, backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_bert_training_matches_eager(caplog, backend):
    torch.manual_seed(0)
    config = transformers.BertConfig(num_hidden_layers=2, hidden_size=64, num_attention_heads=2,
                                     intermediate_size=128, vocab_size=128, max_position_embeddings=64,
                                     hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
                                     use_cache=False)
    model = transformers.BertForMaskedLM(config).train()
    batches = []
    for ids in _token_batches(128, STEPS):
        mask = torch.ones_like(ids)
        mask[1, -4:] = 0  # padding on the second sequence
        labels = torch.full_like(ids, -100)
        labels[:, ::3] = ids[:, ::3]
        batches.append({"input_ids": ids, "attention_mask": mask, "labels": labels})
    _train_and_compare(model, batches, caplog, backend)
