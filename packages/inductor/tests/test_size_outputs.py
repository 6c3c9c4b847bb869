"""Graphs whose outputs include sizes (`aten.sym_size.int`, a symbolic int such as `s0 // 2`), as
autograd_aot's forward graphs hand the backward a size symbol: the compiled graph returns them as
Python ints, like the reference interpreter (and eager), on the C++ path and the Triton one."""

import os

import pytest
import torch

if not torch.cuda.is_available():  # before triton's first import: see test_triton_kernels
    os.environ["TRITON_INTERPRET"] = "1"

from torchsmith.inductor import compile_for_device, compile_graph  # noqa: E402
from torchsmith.inductor.runtime.size_outputs import split_size_outputs  # noqa: E402
from torchsmith.ir import GraphBuilder, SymIntType, TensorType, interpret  # noqa: E402
from torchsmith.ir.symbolic import floordiv, symbol  # noqa: E402

F32 = torch.float32
S0 = symbol("s0")


def sizes_graph(device: str = "cpu"):
    """x: f32[s0, 4], h: f32[s0 // 2, 4] -> (x * 2, s0, h + 1, s0 // 2, x * s0, n): a tensor output,
    the size a backward would need, another tensor, a derived size, a size read by a node, and a
    size input returned as it is."""
    b = GraphBuilder("sizes")
    x = b.input("x", TensorType.make((S0, 4), F32, device=device))
    h = b.input("h", TensorType.make((floordiv(S0, 2), 4), F32, device=device))
    n = b.input("n", SymIntType(S0))
    doubled = b.op("aten.mul.Tensor", x, 2.0, out_type=x.type)
    size = b.op("aten.sym_size.int", x, 0, out_type=SymIntType(S0))
    half = b.op("aten.sym_size.int", h, 0, out_type=SymIntType(floordiv(S0, 2)))
    scaled = b.op("aten.mul.Tensor", x, size, out_type=x.type)
    return b.build(doubled, size, b.op("aten.add.Tensor", h, 1.0, out_type=h.type), half, scaled, n)


def inputs(n: int, device: str = "cpu"):
    return [torch.randn(n, 4, device=device), torch.randn(n // 2, 4, device=device), n]


def assert_same_outputs(got, expected):
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        if isinstance(e, torch.Tensor):
            torch.testing.assert_close(g, e)
        else:
            assert type(g) is int and g == e, (g, e)


def test_split_keeps_tensor_outputs_in_order():
    graph = sizes_graph()
    tensors, sizes = split_size_outputs(graph)
    assert [v.name for v in tensors.outputs] == [graph.outputs[k].name for k in (0, 2, 4)]
    assert [how and how[0] for how in sizes.outputs] == [None, "size", None, "size", None, "input"]
    assert split_size_outputs(tensors) == (tensors, None)  # nothing to take out: the graph as it is


@pytest.mark.parametrize("n", [6, 11])
def test_cpu_graph_returns_sizes_as_ints(n):
    graph = sizes_graph()
    compiled = compile_graph(graph, inputs(6))
    args = inputs(n)
    assert_same_outputs(compiled(*args), interpret(graph, *args))
    assert compiled.program.name == "sizes"  # the compiled graph's own attributes show through


def test_backend_entry_returns_sizes_as_ints():
    graph = sizes_graph()
    compiled = compile_for_device(graph, inputs(8))
    for n in (8, 14):
        args = inputs(n)
        assert_same_outputs(compiled(*args), interpret(graph, *args))


def test_triton_graph_returns_sizes_as_ints():
    pytest.importorskip("triton", reason="triton is not installed (pip install triton==3.6.0)")
    from torchsmith.inductor.gpu_pipeline import compile_graph_triton

    device = "cuda" if torch.cuda.is_available() else "cpu"
    graph = sizes_graph(device)
    compiled = compile_graph_triton(graph, inputs(6, device))
    for n in (6, 10):
        args = inputs(n, device)
        assert_same_outputs(compiled(*args), interpret(graph, *args))


def test_lent_outputs_are_counted_among_the_tensor_outputs():
    """`lend_outputs` names graph outputs; the tensor graph under it (CUDA graphs) counts only its
    tensor outputs, so graph output 4 is its output 2, and a size output is nobody's to lend."""
    _, sizes = split_size_outputs(sizes_graph())

    class Tensors:
        lent = None

        def lend_outputs(self, positions):
            self.lent = list(positions)

    tensors = Tensors()
    sizes.wrap(tensors).lend_outputs([3, 4])
    assert tensors.lent == [2]
