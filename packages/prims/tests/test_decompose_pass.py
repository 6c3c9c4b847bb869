"""The decompose pass itself: keep sets, missing ops, stamps, symbolic shapes, source lines, and
that the decomposition check catches a wrong decomposition."""

import os
import pathlib

import pytest
import torch

from torchsmith.ir import GraphBuilder, interpret
from torchsmith.ir.symbolic import symbol
from torchsmith.prims import DECOMPOSITIONS, DecompositionError, decompose
from torchsmith.prims.testing.aten_samples import aten_samples
from torchsmith.prims.testing.harness import check_decomposition


def _mlp():
    b = GraphBuilder("mlp")
    x = b.input("x", "f32[4, 8] cpu")
    w = b.input("w", "f32[16, 8] cpu")
    bias = b.input("b", "f32[16] cpu")
    y = b.op("aten.addmm.default", bias, x, b.op("aten.t.default", w), source="model.py:3")
    z = b.op("aten.gelu.default", y, approximate="tanh")
    return b.build(b.op("aten.sum.dim_IntList", z, [1], True)), [
        torch.randn(4, 8),
        torch.randn(16, 8),
        torch.randn(16),
    ]


def test_decompose_leaves_only_prims_and_matches_eager():
    graph, inputs = _mlp()
    decomposed = decompose(graph)
    assert all(node.dialect == "prims" for node in decomposed.nodes)
    assert "prims.mm" in decomposed.ops()
    torch.testing.assert_close(interpret(decomposed, *inputs)[0], interpret(graph, *inputs)[0])
    assert [s.pass_name for s in decomposed.stamps] == ["decompose"]


def test_emitted_nodes_keep_the_source_line():
    decomposed = decompose(_mlp()[0])
    from_addmm = [n for n in decomposed.nodes if n.source == "model.py:3"]
    assert {"prims.mm", "prims.add"} <= {n.op for n in from_addmm}
    assert all(n.source is None for n in decomposed.nodes if n not in from_addmm)


def test_keep_by_overload_or_packet_name():
    graph, inputs = _mlp()
    for keep in ({"aten.addmm.default"}, {"aten.addmm"}):
        decomposed = decompose(graph, keep=keep)
        assert "aten.addmm.default" in decomposed.ops() and "prims.mm" not in decomposed.ops()
        torch.testing.assert_close(interpret(decomposed, *inputs)[0], interpret(graph, *inputs)[0])


def test_missing_decomposition_names_the_node_and_the_fix():
    b = GraphBuilder("g")
    x = b.input("x", "f32[4] cpu")
    graph = b.build(b.op("aten.digamma.default", x, source="model.py:9"))
    with pytest.raises(DecompositionError, match=r"aten\.digamma\.default.*model\.py:9.*keep="):
        decompose(graph)
    kept = decompose(graph, on_missing="keep")
    assert kept.ops() == ["aten.digamma.default"]


def test_ops_kept_whole_by_design_need_no_keep_set():
    b = GraphBuilder("g")
    x = b.input("x", "f32[4, 3] cpu")
    values, _ = b.op("aten.sort.default", x)
    assert decompose(b.build(values)).ops() == ["aten.sort.default"]


def test_low_precision_layer_norm_stays_whole():
    b = GraphBuilder("g")
    x = b.input("x", "bf16[2, 8] cpu")
    out, _, _ = b.op("aten.native_layer_norm.default", x, [8], None, None, 1e-5)
    assert decompose(b.build(out)).ops() == ["aten.native_layer_norm.default"]


def test_symbolic_shapes_decompose_and_run():
    s0 = symbol("s0")
    b = GraphBuilder("g")
    x = b.input("x", f"f32[{s0}, 8] cpu")
    y = b.input("y", "f16[8] cpu")
    total = b.op("aten.add.Tensor", x, y, out_type=f"f32[{s0}, 8] cpu")
    soft = b.op("aten._softmax.default", total, 0, False, out_type=f"f32[{s0}, 8] cpu")
    mean = b.op("aten.mean.dim", soft, [0], True, out_type="f32[1, 8] cpu")
    view = b.op("aten.view.default", soft, [-1], out_type=f"f32[8*{s0}] cpu")
    graph = b.build(mean, view)
    decomposed = decompose(graph)
    assert decomposed.outputs[1].type.shape == (8 * s0,)
    for n in (2, 5):
        inputs = [torch.randn(n, 8), torch.randn(8).half()]
        for got, expected in zip(interpret(decomposed, *inputs, check_types=True), interpret(graph, *inputs)):
            torch.testing.assert_close(got, expected)


def test_a_wrong_decomposition_is_caught(monkeypatch):
    def off_by_a_little(e, a, *, approximate="none"):
        return e.pointwise(lambda x: e.mul(e.mul(x, 0.5001), e.add(e.erf(e.mul(x, 0.7071)), 1.0)), a)

    monkeypatch.setitem(DECOMPOSITIONS, "aten.gelu.default", off_by_a_little)
    with pytest.raises(AssertionError, match="farther from float64 than eager"):
        check_decomposition("aten.gelu.default", aten_samples("aten.gelu.default")[0])


def test_a_decomposition_with_the_wrong_dtype_is_refused(monkeypatch):
    monkeypatch.setitem(DECOMPOSITIONS, "aten.exp.default", lambda e, a: e.exp(e.to(a, torch.float64)))
    b = GraphBuilder("g")
    graph = b.build(b.op("aten.exp.default", b.input("x", "f32[3] cpu")))
    with pytest.raises(DecompositionError, match="gave f64"):
        decompose(graph)


def test_decomposed_graphs_round_trip_through_text_and_json():
    from torchsmith.ir import dumps, format_graph, loads, parse_graph

    graph, _ = _mlp()
    decomposed = decompose(graph)
    assert format_graph(parse_graph(format_graph(decomposed))) == format_graph(decomposed)
    assert format_graph(loads(dumps(decomposed))) == format_graph(decomposed)


def test_size_computations_are_copied_whole():
    s0 = symbol("s0")
    b = GraphBuilder("g")
    x = b.input("x", f"f32[{s0}, 4] cpu")
    size = b.op("aten.sym_size.int", x, 0, out_type=f"sym({s0})")
    out = b.op("aten.view.default", x, [size, 2, 2], out_type=f"f32[{s0}, 2, 2] cpu")
    decomposed = decompose(b.build(out))
    assert decomposed.ops() == ["aten.sym_size.int", "prims.reshape"]
    x_value = torch.randn(3, 4)
    torch.testing.assert_close(interpret(decomposed, x_value)[0], x_value.view(3, 2, 2))


GOLDEN = pathlib.Path(__file__).parent / "golden"


def test_decomposed_mlp_matches_golden_text():
    # The text form of a decomposed graph, without the stamp (its time varies). To accept a change:
    # TORCHSMITH_UPDATE_GOLDEN=1 pytest packages/prims/tests/test_decompose_pass.py
    from torchsmith.ir import format_graph

    text = format_graph(decompose(_mlp()[0]).replace(stamps=()))
    path = GOLDEN / "mlp_decomposed.txt"
    if os.environ.get("TORCHSMITH_UPDATE_GOLDEN"):
        path.write_text(text)
    assert text == path.read_text()


def test_public_api_matches_its_snapshot():
    # An accidental change to the public names or signatures fails here (STYLE 16); to accept a
    # deliberate one: TORCHSMITH_UPDATE_GOLDEN=1 pytest packages/prims/tests/test_decompose_pass.py
    import inspect

    import torchsmith.prims as prims
    from torchsmith.prims import promotion

    lines = []
    for module in (prims, promotion):
        for name in sorted(getattr(module, "__all__", None) or dir(module)):
            obj = getattr(module, name)
            if (
                name.startswith("_")
                or inspect.ismodule(obj)
                or getattr(obj, "__module__", "").split(".")[:2]
                != [
                    "torchsmith",
                    "prims",
                ]
            ):
                continue
            signature = str(inspect.signature(obj)) if callable(obj) and not inspect.isclass(obj) else ""
            lines.append(f"{module.__name__}.{name}{signature}")
    text = "\n".join(lines) + "\n"
    path = GOLDEN / "public_api.txt"
    if os.environ.get("TORCHSMITH_UPDATE_GOLDEN"):
        path.write_text(text)
    assert text == path.read_text()


def test_force_decomposes_an_op_kept_whole_by_default():
    b = GraphBuilder("g")
    grad = b.input("grad", "f32[1, 5, 4] cpu")
    x = b.input("x", "f32[1, 3, 9] cpu")
    w = b.input("w", "f32[5, 3, 3] cpu")
    outs = b.op(
        "aten.convolution_backward.default", grad, x, w, [5], [2], [1], [2], False, [0], 1, [True] * 3
    )
    graph = b.build(*outs)
    assert decompose(graph).ops() == ["aten.convolution_backward.default"]
    forced = decompose(graph, force={"aten.convolution_backward"})
    assert "prims.convolution" in forced.ops() and all(n.dialect == "prims" for n in forced.nodes)
    inputs = [torch.randn(1, 5, 4), torch.randn(1, 3, 9), torch.randn(5, 3, 3)]
    for got, expected in zip(interpret(forced, *inputs), interpret(graph, *inputs)):
        torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-5)


def _dropout_graph():
    b = GraphBuilder("g")
    x = b.input("x", "f32[64, 64] cpu")
    out, mask = b.op("aten.native_dropout.default", x, 0.25, True)
    noise = b.op("aten.rand.default", [3, 5], dtype=torch.float32, device="cpu")
    return b.build(out, mask, noise)


def test_random_ops_stay_whole_unless_philox_is_asked_for():
    graph = _dropout_graph()
    assert decompose(graph).ops() == ["aten.native_dropout.default", "aten.rand.default"]
    decomposed = decompose(graph, philox=True)
    assert decomposed.ops().count("prims.philox_rand") == 2
    assert [v.name for v in decomposed.inputs] == ["x", "philox_seed", "philox_offset"]


def test_philox_dropout_is_reproducible_and_scaled():
    decomposed = decompose(_dropout_graph(), philox=True)
    x = torch.randn(64, 64)
    seed, offset = torch.tensor(7), torch.tensor(100)
    out, mask, noise = interpret(decomposed, x, seed, offset, check_types=True)
    again = interpret(decomposed, x, seed, offset)
    assert all(torch.equal(a, b) for a, b in zip((out, mask, noise), again))
    assert not torch.equal(mask, interpret(decomposed, x, seed, torch.tensor(101))[1])
    assert abs(mask.float().mean().item() - 0.75) < 0.03
    torch.testing.assert_close(out, torch.where(mask, x / 0.75, 0.0))
    assert 0 <= noise.min() and noise.max() < 1


def test_each_random_node_draws_its_own_stream():
    b = GraphBuilder("g")
    first = b.op("aten.rand.default", [100], dtype=torch.float32, device="cpu")
    second = b.op("aten.rand.default", [100], dtype=torch.float32, device="cpu")
    decomposed = decompose(b.build(first, second), philox=True)
    a, c = interpret(decomposed, torch.tensor(3), torch.tensor(0))
    assert not torch.equal(a, c)
    # Node k uses offset base + k: the second node's stream is the first's at the next base.
    shifted, _ = interpret(decomposed, torch.tensor(3), torch.tensor(1))
    assert torch.equal(shifted, c)


def test_an_op_kept_inside_a_decomposition_on_symbolic_sizes_is_a_clear_error():
    # layer_norm decomposes through native_layer_norm, which stays whole in bfloat16; its output
    # types would come from meta tensors, which need concrete sizes.
    b = GraphBuilder("g")
    x = b.input("x", f"bf16[{symbol('s0')}, 8] cpu")
    out = b.op("aten.layer_norm.default", x, [8], out_type=f"bf16[{symbol('s0')}, 8] cpu")
    with pytest.raises(DecompositionError, match=r"aten\.layer_norm\.default.*native_layer_norm"):
        decompose(b.build(out))
