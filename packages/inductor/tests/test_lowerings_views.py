"""cat, pad and flip: loop lowerings without copies of their operands, against eager PyTorch."""

import torch

import torchsmith.prims  # noqa: F401  (registers the prims)
from torchsmith.inductor import compile_graph, lower
from torchsmith.inductor.loop_ir.program import ComputedBuffer, loads
from torchsmith.inductor.testing import assert_matches_eager, make_graph
from torchsmith.ir import GraphBuilder, TensorType
from torchsmith.ir.symbolic import symbol

F32, I64 = torch.float32, torch.int64


def _cat_pad_flip(b, x, y, z):
    xt = b.op("aten.t.default", x)  # a transposed (non-contiguous) operand
    c0 = b.op("aten.cat.default", [xt, y, xt], 1)
    c1 = b.op("aten.cat.default", [z, b.op("aten.neg.default", z)])
    padded = b.op("aten.constant_pad_nd.default", c0, [1, 2, 0, 3], 1.5)
    flipped = b.op("aten.flip.default", padded, [0, 1])
    # A flipped operand of an extern call is copied first: torch's strided views cannot step backwards.
    product = b.op("aten.mm.default", b.op("aten.flip.default", x, [0]), y)
    return c0, c1, padded, flipped, b.op("aten.flip.default", xt, [-1]), product


def test_cat_pad_flip_match_eager():
    graph = make_graph("views", {"x": ((4, 3), F32), "y": ((3, 2), F32), "z": ((2, 5), F32)}, _cat_pad_flip)
    inputs = torch.randn(4, 3), torch.randn(3, 2), torch.randn(2, 5)
    assert_matches_eager(compile_graph(graph), graph, *inputs)


def test_cat_reads_each_operand_in_place_with_clamped_indices():
    graph = make_graph("views", {"x": ((4, 3), F32), "y": ((3, 2), F32), "z": ((2, 5), F32)}, _cat_pad_flip)
    program = lower(torchsmith.prims.decompose(graph))
    cat = next(b for b in program.buffers if b.name == "cat")
    assert isinstance(cat, ComputedBuffer)
    # The transposed x is read through its strides (no copy); every load stays inside its operand.
    assert sorted(ld.buffer for ld in loads(cat.body.value)) == ["x", "x", "y"]
    assert "min(3, i1)" in str(cat.body) and "max(0, i1 - 6)" in str(cat.body)


def test_pad_int_and_flip_of_outputs_with_symbolic_sizes():
    s0 = symbol("s0")

    def body(b, x, n):  # prims directly: their type rules work on symbolic sizes
        padded = b.op("prims.pad", n, [1, 1, 2, 0], -7)
        return b.op("prims.flip", x, [0]), padded, b.op("prims.cat", [x, x], 0)

    graph = make_graph(
        "symbolic",
        {"x": TensorType.make((s0, 3), F32), "n": TensorType.make((s0, 2), I64)},
        body,
    )
    compiled = compile_graph(graph)
    for rows in (1, 5):
        x, n = torch.randn(rows, 3), torch.randint(-9, 9, (rows, 2))
        assert_matches_eager(compiled, graph, x, n)


def test_cat_with_an_empty_operand_and_many_operands():
    def body(b, x, e, f):
        rows = [b.op("aten.mul.Tensor", x, float(k)) for k in range(9)]
        return b.op("aten.cat.default", [e, x, e], 0), b.op("aten.cat.default", [f, *rows, x], 1)

    graph = make_graph("cats", {"x": ((2, 3), F32), "e": ((0, 3), F32), "f": ((2, 0), F32)}, body)
    assert_matches_eager(compile_graph(graph), graph, torch.randn(2, 3), torch.randn(0, 3), torch.randn(2, 0))


def test_outputs_get_the_strides_their_types_declare():
    # The graph's output types carry eager's strides; outputs are laid out (or copied) to match them.
    b = GraphBuilder("strides")
    x = b.input("x", TensorType.make((4, 6), F32))
    y = b.input("y", TensorType.make((2, 3, 4, 5), F32, strides=(60, 1, 15, 3)))
    t = b.op("prims.permute", x, [1, 0])
    transposed = b.op("prims.add", t, 1.0, out_type=TensorType.make((6, 4), F32, strides=(1, 6)))
    channels_last = b.op(
        "prims.mul", y, 2.0, out_type=TensorType.make((2, 3, 4, 5), F32, strides=(60, 1, 15, 3))
    )
    flipped = b.op("prims.flip", x, [1])
    graph = b.build(transposed, t, channels_last, flipped)
    x, y = torch.randn(4, 6), torch.randn(2, 4, 5, 3).permute(0, 3, 1, 2)
    expected = [x.t() + 1.0, x.t(), y * 2.0, x.flip(1)]
    for got, want in zip(compile_graph(graph)(x, y), expected):
        assert got.stride() == want.stride() and torch.equal(got, want)


def test_cat_and_pad_of_computed_operands_along_every_dim_match_eager():
    # Each operand is computed (not a graph input), so the cat's clamped reads split per dim and the
    # operands' arithmetic runs inside the cat's loop; uneven operand sizes, a size-1 operand.
    shapes = {"x": ((3, 4, 5), F32), "y": ((3, 4, 5), F32)}

    def body(b, x, y):
        outs = []
        for dim in range(3):
            first = b.op("aten.mul.Tensor", x, y)
            second = b.op("aten.sub.Tensor", b.op("aten.exp.default", y), x)
            narrow = b.op("aten.slice.Tensor", b.op("aten.neg.default", x), dim, 0, 1)
            outs.append(b.op("aten.cat.default", [first, narrow, second], dim))
        padded = b.op("aten.constant_pad_nd.default", b.op("aten.sin.default", x), [2, 1, 0, 3], -0.5)
        return (*outs, padded)

    graph = make_graph("computed_cats", shapes, body)
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(3, 4, 5, generator=g), torch.randn(3, 4, 5, generator=g)
    assert_matches_eager(compile_graph(graph), graph, x, y)
