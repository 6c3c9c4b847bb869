"""Llama-family decoders from transformers (with the installed `kernels` package, whose attention
wrapper is `forward(self, *args, **kwargs)` carrying the wrapped function's `__signature__`) compile
end to end: logits equal eager, and no more graphs or breaks than torch.compile makes.

Tiny random configs: hidden 64, 2 layers, 4 heads, vocabulary 128, float32, eval. The KV cache is
off (`use_cache=False`): building a `DynamicCache` inside forward is a graph break in capture today.
"""

import pytest
import torch

import torchsmith

transformers = pytest.importorskip("transformers")

FAMILIES = ["Llama", "Mistral", "Qwen2", "Phi", "Gemma"]


def tiny_model(family: str) -> torch.nn.Module:
    config = getattr(transformers, f"{family}Config")(
        hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4,
        vocab_size=128, intermediate_size=128, max_position_embeddings=64,
    )
    if hasattr(config, "head_dim"):
        config.head_dim = 16
    torch.manual_seed(0)
    return getattr(transformers, f"{family}ForCausalLM")(config).eval()


def torch_compile_graph_count(model, ids) -> int:
    """Graphs torch.compile makes for one call (its backend counts them and runs each as is)."""
    graphs = []

    def counter(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    torch._dynamo.reset()
    with torch.no_grad():
        torch.compile(model, backend=counter)(ids, use_cache=False)
    torch._dynamo.reset()
    return len(graphs)


@pytest.mark.parametrize("backend", ["eager", "inductor"])
@pytest.mark.parametrize("family", FAMILIES)
def test_logits_equal_eager_with_no_more_graphs_than_torch_compile(family, backend):
    model = tiny_model(family)
    ids = torch.randint(0, 128, (2, 8), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        expected = model(ids, use_cache=False).logits
    graphs = []
    chosen = torchsmith.lookup_backend(backend)

    def counting(graph, example_inputs):
        graphs.append(graph)
        return chosen(graph, example_inputs)

    compiled = torchsmith.compile(model, backend=counting, options={"fallback": "raise"})
    with torch.no_grad():
        logits = compiled(ids, use_cache=False).logits
        again = compiled(ids, use_cache=False).logits  # the cached entry: no recompile
    torch.testing.assert_close(logits, expected, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(again, expected, rtol=1e-4, atol=1e-4)
    reference = torch_compile_graph_count(model, ids)
    assert 1 <= len(graphs) <= reference, (len(graphs), reference)
    report = torchsmith.explain(model)(ids, use_cache=False)
    assert report.graph_count <= reference
    assert report.graph_break_count <= reference - 1, report
