"""Transformers models served at several sequence lengths (issues 17 and 19): outputs equal eager,
and each graph-break-free function compiles at most twice (specialized, then symbolic), so the
graph count after every later length stays at twice the first call's. Small configs, random weights."""

import warnings

import pytest
import torch

import torchsmith

transformers = pytest.importorskip("transformers")

LENGTHS = (5, 7, 9, 12)


def _gpt2():
    config = transformers.GPT2Config(n_layer=2, n_head=2, n_embd=32, vocab_size=100, n_positions=128)
    return transformers.GPT2Model(config).eval()


def _bert():
    config = transformers.BertConfig(num_hidden_layers=2, num_attention_heads=2, hidden_size=32,
                                     intermediate_size=64, vocab_size=100, max_position_embeddings=128)
    return transformers.BertModel(config).eval()


def _t5():
    config = transformers.T5Config(num_layers=2, num_heads=2, d_model=32, d_kv=16, d_ff=64, vocab_size=100)
    return transformers.T5EncoderModel(config).eval()


def _llama():
    config = transformers.LlamaConfig(num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=2,
                                      hidden_size=32, intermediate_size=64, vocab_size=100,
                                      max_position_embeddings=128)
    return transformers.LlamaModel(config).eval()


class _Counting:
    """A custom backend wrapping a registered one, counting the graphs it is given."""

    def __init__(self, name):
        self.inner, self.graphs = torchsmith.lookup_backend(name), []

    def __call__(self, graph, example_inputs):
        self.graphs.append(graph)
        return self.inner(graph, example_inputs)


def _serve(model, backend):
    """(graphs after the first call, after all calls); asserts outputs equal eager and no fallback."""
    torch.manual_seed(0)
    compiled = torchsmith.compile(model, backend=backend)
    counts = []
    with warnings.catch_warnings():
        warnings.simplefilter("error", torchsmith.FallbackWarning)
        for length in LENGTHS:
            ids = torch.randint(0, 100, (2, length))
            with torch.no_grad():
                expected = model(input_ids=ids).last_hidden_state
                actual = compiled(input_ids=ids).last_hidden_state
            torch.testing.assert_close(actual, expected, atol=1e-4, rtol=1e-4)
            counts.append(len(backend.graphs))
    return counts[0], counts[-1]


@pytest.mark.parametrize("make", [_bert, _t5, _llama], ids=["bert", "t5", "llama"])
@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_model_compiles_at_most_twice_over_lengths(make, backend):
    first, last = _serve(make(), _Counting(backend))
    assert last <= 2 * first, f"{last} graphs after {len(LENGTHS)} lengths, {first} after the first"


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_gpt2_input_ids_alone_at_several_lengths(backend):
    # the SymbolicError of issue 17 came from a custom backend wrapping a registered one as well
    _serve(_gpt2(), _Counting(backend))


def test_gpt2_compiles_at_most_twice_over_lengths():
    first, last = _serve(_gpt2(), _Counting("aot_eager"))
    assert last <= 2 * first


def test_transformer_encoder_layer_default_backend():
    layer = torch.nn.TransformerEncoderLayer(16, 2, 32, batch_first=True, dropout=0.0).eval()
    compiled = torchsmith.compile(layer)
    for length in LENGTHS:
        x = torch.randn(2, length, 16)
        torch.testing.assert_close(compiled(x), layer(x), atol=1e-5, rtol=1e-4)
