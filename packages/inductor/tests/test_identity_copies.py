"""Copies that change nothing (a clone of an intermediate into the same layout, read by nothing
else) are dropped: their readers read the intermediate. Copies that matter stay."""

import torch

from torchsmith.inductor import compile_graph, lower, to_prims
from torchsmith.inductor.loop_ir.program import ComputedBuffer
from torchsmith.inductor.lowering.copies import elide_identity_copies
from torchsmith.inductor.testing import assert_matches_eager, make_graph

F32 = torch.float32
SHAPES = {"x": ((4, 6), F32), "w": ((6, 5), F32), "v": ((5, 3), F32)}


def _copies(graph) -> tuple[int, int]:
    """(computed buffers before, after) eliding identity copies."""
    program = lower(to_prims(graph))
    count = lambda p: sum(isinstance(b, ComputedBuffer) for b in p.buffers)  # noqa: E731
    return count(program), count(elide_identity_copies(program))


def _inputs():
    g = torch.Generator().manual_seed(0)
    return [torch.randn(*shape, generator=g) for shape, _ in SHAPES.values()]


def test_clone_of_a_library_result_read_by_another_call_is_dropped():
    def body(b, x, w, v):
        copied = b.op("aten.clone.default", b.op("aten.mm.default", x, w))
        return b.op("aten.mm.default", copied, v)

    graph = make_graph("clone_mm", SHAPES, body)
    assert _copies(graph) == (1, 0)
    assert_matches_eager(compile_graph(graph), graph, *_inputs())


def test_copies_that_matter_stay():
    def both_returned(b, x, w, v):
        product = b.op("aten.mm.default", x, w)
        return product, b.op("aten.clone.default", product)  # two outputs must not share storage

    def of_an_input(b, x, w, v):
        return b.op("aten.mm.default", b.op("aten.clone.default", w), v)

    def transposed(b, x, w, v):
        product = b.op("aten.t.default", b.op("aten.mm.default", x, w))
        contiguous = b.op("aten.clone.default", product, memory_format=torch.contiguous_format)
        return b.op("aten.mm.default", contiguous, x)

    for body in (both_returned, of_an_input, transposed):
        graph = make_graph(body.__name__, SHAPES, body)
        before, after = _copies(graph)
        assert before == after == 1, body.__name__
        compiled = compile_graph(graph)
        assert_matches_eager(compiled, graph, *_inputs())
    outputs = compile_graph(make_graph("both", SHAPES, both_returned))(*_inputs())
    assert outputs[0].data_ptr() != outputs[1].data_ptr()
