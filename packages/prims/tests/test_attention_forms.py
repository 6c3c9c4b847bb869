"""attention_forms: a constant causal mask becomes is_causal, and key/value heads repeated for
grouped-query attention (transformers' repeat_kv) are read un-repeated, with the same values as
eager; masks that are not causal or not constant, and half-grouped or GPU forms the kernel would
repeat itself, are left alone."""

import pytest
import torch

from torchsmith.ir import GraphBuilder, interpret
from torchsmith.prims import prims_pipeline
from torchsmith.prims.attention_forms import attention_forms

B, H, KV, L, E = 2, 4, 2, 6, 8
SDPA = "prims.scaled_dot_product_attention"


def _repeat_kv(b, x, heads=KV):
    """x[:, :, None].expand(B, heads, H // heads, L, E).reshape(B, H, L, E), as ATen records it."""
    x = b.op("aten.unsqueeze.default", x, 2)
    x = b.op("aten.expand.default", x, [B, heads, H // heads, L, E])
    x = b.op("aten.clone.default", x, memory_format=torch.contiguous_format)
    return b.op("aten.view.default", x, [B, H, L, E])


def _graph(*, mask="causal", repeat=("k", "v"), device="cpu", dtype="f32"):
    """sdpa(q, repeat_kv(k), repeat_kv(v), mask): `mask` is "causal" (tril of ones), "band" (a
    constant mask that is not causal), "input" (a graph input) or None (is_causal=True)."""
    b = GraphBuilder("gqa")
    q = b.input("q", f"{dtype}[{B}, {H}, {L}, {E}] {device}")
    k = b.input("k", f"{dtype}[{B}, {KV}, {L}, {E}] {device}")
    v = b.input("v", f"{dtype}[{B}, {KV}, {L}, {E}] {device}")
    given = b.input("keep", f"b8[{L}, {L}] {device}") if mask == "input" else None
    key = _repeat_kv(b, k) if "k" in repeat else _repeat_kv(b, k, KV)
    value = _repeat_kv(b, v) if "v" in repeat else b.op("aten.cat.default", [v, v], 1)
    kwargs = {"is_causal": True} if mask is None else {}
    if mask in ("causal", "band"):
        ones = b.op("aten.ones.default", [L, L], dtype=torch.bool, device=torch.device(device),
                    pin_memory=False)
        given = b.op("aten.tril.default", ones)
        if mask == "band":
            given = b.op("aten.triu.default", given, -1)
    args = (q, key, value) + ((given,) if given is not None else ())
    graph = b.build(b.op("aten.scaled_dot_product_attention.default", *args, **kwargs))
    return graph


def _inputs(mask):
    inputs = [torch.randn(B, H, L, E), torch.randn(B, KV, L, E), torch.randn(B, KV, L, E)]
    if mask == "input":
        inputs.append(torch.ones(L, L, dtype=torch.bool).tril())
    return inputs


def _sdpa(graph):
    (node,) = [n for n in graph.nodes if n.op == SDPA]
    return node


@pytest.mark.parametrize("mask", ["causal", None])
def test_grouped_heads_are_read_unrepeated_and_a_constant_causal_mask_is_is_causal(mask):
    graph = _graph(mask=mask)
    result = prims_pipeline(on_missing="keep").run(graph, verify=True)
    node = _sdpa(result)
    assert [a.name for a in node.args[1:3]] == ["k", "v"]
    assert node.args[3] is None and node.args[4] is True
    assert "prims.clone" not in result.ops() and "prims.where" not in result.ops()
    inputs = _inputs(mask)
    torch.testing.assert_close(interpret(result, *inputs)[0], interpret(graph, *inputs)[0])


@pytest.mark.parametrize("mask", ["band", "input"])
def test_masks_that_are_not_constant_and_causal_stay(mask):
    graph = _graph(mask=mask)
    result = prims_pipeline(on_missing="keep").run(graph)
    node = _sdpa(result)
    assert node.args[3] is not None and node.args[4] is False
    assert [a.name for a in node.args[1:3]] == ["k", "v"]  # the CPU kernel groups heads under any mask
    inputs = _inputs(mask)
    torch.testing.assert_close(interpret(result, *inputs)[0], interpret(graph, *inputs)[0])


def test_a_value_not_repeated_like_its_key_keeps_both_copies():
    graph = _graph(mask=None, repeat=("k",))
    decomposed = prims_pipeline(on_missing="keep").steps[0].run(graph)
    assert attention_forms(decomposed) is decomposed


def test_on_a_gpu_only_the_flash_kernel_s_form_is_grouped():
    # types only: nothing runs, so no GPU is needed
    decompose = prims_pipeline(on_missing="keep").steps[0].run
    half = attention_forms(decompose(_graph(mask=None, device="cuda", dtype="bf16")))
    assert [a.name for a in _sdpa(half).args[1:3]] == ["k", "v"]
    for graph in (_graph(mask=None, device="cuda"), _graph(mask="input", device="cuda", dtype="bf16")):
        decomposed = decompose(graph)
        assert attention_forms(decomposed) is decomposed
