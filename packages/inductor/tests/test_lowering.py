"""Lowering to the loop IR: text form, hashing, views as index remapping, errors. No compiler runs."""

import pytest
import sympy
import torch

import torchsmith.prims
from torchsmith.inductor import LoweringError, lower, to_prims
from torchsmith.inductor.loop_ir.program import ComputedBuffer, ExternCall, Reduction, index_vars
from torchsmith.inductor.lowering.view_refs import as_tensor_view, reshape_view, strided_ref
from torchsmith.inductor.testing import make_graph
from torchsmith.ir import GraphBuilder, TensorType
from torchsmith.ir.symbolic import symbol

F32 = torch.float32


def softmax_graph():
    def body(b, x):
        m = b.op("aten.amax.default", x, [1], True)
        e = b.op("aten.exp.default", b.op("aten.sub.Tensor", x, m))
        return b.op("aten.div.Tensor", e, b.op("aten.sum.dim_IntList", e, [1], True))

    return make_graph("softmax", {"x": ((4, 8), F32)}, body)


SOFTMAX_LOOPS = """\
loops softmax(%x: f32[4, 8]{8, 1}):
  buf amax: f32[4]{1} = reduce max [4] over [8]: load(x, 8*i0 + r0)  # %amax = prims.amax
  buf sub: f32[4, 8]{8, 1} = pointwise [4, 8]: sub(load(x, 8*i0 + i1), load(amax, i0))  # %sub = prims.sub
  buf exp: f32[4, 8]{8, 1} = pointwise [4, 8]: exp(load(sub, 8*i0 + i1))  # %exp = prims.exp
  buf sum: f32[4]{1} = reduce sum [4] over [8]: load(exp, 8*i0 + r0)  # %sum = prims.sum
  buf div: f32[4, 8]{8, 1} = pointwise [4, 8]: div(load(exp, 8*i0 + i1), load(sum, i0))  # %div = prims.div
  return (view(div, [4, 8]{8, 1}+0))"""


def test_softmax_text_form():
    assert str(lower(to_prims(softmax_graph()))) == SOFTMAX_LOOPS


def test_programs_are_hashable_values():
    a, b = lower(to_prims(softmax_graph())), lower(to_prims(softmax_graph()))
    assert a == b and hash(a) == hash(b)
    assert len({a, b}) == 1


def test_views_become_index_expressions_without_copies():
    def body(b, x):
        t = b.op("aten.permute.default", x, [2, 0, 1])  # [4, 2, 3]
        s = b.op("aten.slice.Tensor", t, 0, 1, 4, 2)  # [2, 2, 3]
        u = b.op("aten.unsqueeze.default", s, 1)  # [2, 1, 2, 3]
        e = b.op("aten.expand.default", u, [2, 5, 2, 3])
        return b.op("aten.neg.default", e)

    program = lower(to_prims(make_graph("views", {"x": ((2, 3, 4), F32)}, body)))
    (buffer,) = program.buffers
    assert isinstance(buffer, ComputedBuffer)
    # neg reads x[i2, i3, 1 + 2*i0] directly: x's strides are (12, 4, 1).
    assert str(buffer.body.value) == "neg(load(x, 2*i0 + 12*i2 + 4*i3 + 1))"


def test_reshape_of_contiguous_data_stays_linear():
    ref = strided_ref("x", (4, 6), (6, 1), F32)
    assert reshape_view(ref, (2, 2, 3, 2)).index == sympy.sympify("12*i0 + 6*i1 + 2*i2 + i3").xreplace(
        {sympy.Symbol(f"i{k}"): v for k, v in enumerate(index_vars(4))}
    )
    assert as_tensor_view(reshape_view(ref, (24,))).strides == (1,)


def test_reshape_of_transposed_data_is_not_strided():
    transposed = strided_ref("x", (4, 6), (1, 4), F32)
    flat = reshape_view(transposed, (24,))
    assert as_tensor_view(flat) is None  # needs floordiv/mod: a copy when a strided tensor is needed
    assert as_tensor_view(reshape_view(transposed, (2, 2, 6))).strides == (2, 1, 4)


def test_symbolic_sizes_flow_into_ranges_and_indices():
    s0 = symbol("s0")

    def body(b, x):
        return b.op("prims.sum", b.op("prims.exp", x), [0])  # prims infer types symbolically

    program = lower(to_prims(make_graph("sym", {"x": TensorType.make((s0, 8), F32)}, body)))
    assert program.symbols == ("s0",)
    reduction = program.buffers[-1].body
    assert isinstance(reduction, Reduction) and reduction.reduction_ranges == (s0,)


def test_matmul_is_an_extern_call():
    def body(b, x, w):
        return b.op("aten.mm.default", x, w)

    program = lower(to_prims(make_graph("mm", {"x": ((3, 4), F32), "w": ((4, 5), F32)}, body)))
    (call,) = program.buffers
    assert isinstance(call, ExternCall) and call.kernel == "prims.mm"


def test_dead_buffers_are_dropped():
    def body(b, x):
        b.op("aten.exp.default", x)  # unused
        return b.op("aten.neg.default", x)

    program = lower(to_prims(make_graph("dead", {"x": ((3,), F32)}, body)))
    assert [buf.name for buf in program.buffers] == ["neg"]


def test_prim_without_loop_lowering_runs_as_a_listed_extern_call():
    assert torchsmith.prims  # registers the prims
    b = GraphBuilder("scan")
    x = b.input("x", TensorType.make((3, 4096), F32))  # too long a scan for the masked-reduction loop
    graph = b.build(b.op("prims.cumsum", x, 1))
    program = lower(graph)
    (call,) = program.buffers
    assert isinstance(call, ExternCall) and call.kernel == "prims.cumsum"
    assert [op for op, _ in program.fallbacks] == ["prims.cumsum"]
    assert "eager fallback prims.cumsum" in str(program)


def test_torch_level_ops_get_a_pointer_to_autograd_aot():
    b = GraphBuilder("torch_level")
    x = b.input("x", TensorType.make((3,), F32))
    graph = b.build(b.op("torch.sin", x))
    with pytest.raises(LoweringError, match=r"torch\.sin.*autograd_aot"):
        lower(to_prims(graph))
