"""extern_plan: the library calls of a graph without size symbols run as steps planned when the graph
is built (arguments read from the wrapper's slots, the result's strides the only check), and give
eager's results: matmuls reading strided views, calls with constant parameters, several outputs."""

import pytest
import torch

from torchsmith.inductor import compile_graph
from torchsmith.inductor.errors import RuntimeCallError
from torchsmith.inductor.runtime import externs, wrapper
from torchsmith.inductor.testing import assert_matches_eager, make_graph

F32 = torch.float32


def _refuse_general_path(monkeypatch):
    def general(call, tensors, bindings):
        raise AssertionError(f"{call.name} ({call.kernel}) took run_extern's general path")

    monkeypatch.setattr(wrapper, "run_extern", general)


def test_matmuls_of_views_and_a_convolution_run_planned(monkeypatch):
    def body(b, x, w, bias, a, c, img, k):
        t = b.op("aten.t.default", x)  # a strided view read by the matmul
        mm = b.op("aten.mm.default", t, w)
        addmm = b.op("aten.addmm.default", bias, t, w)
        heads = b.op("aten.permute.default", b.op("aten.view.default", a, [2, 3, 4, 5]), [0, 2, 1, 3])
        bmm = b.op("aten.bmm.default", b.op("aten.reshape.default", heads, [8, 3, 5]), c)
        conv = b.op("aten.convolution.default", img, k, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1)
        return b.op("aten.relu.default", mm), addmm, bmm, conv

    types = {
        "x": ((6, 4), F32), "w": ((6, 5), F32), "bias": ((5,), F32), "a": ((2, 3, 20), F32),
        "c": ((8, 5, 7), F32), "img": ((1, 2, 6, 6), F32), "k": ((3, 2, 3, 3), F32),
    }  # fmt: skip
    graph = make_graph("planned", types, body)
    compiled = compile_graph(graph)
    _refuse_general_path(monkeypatch)
    inputs = [torch.randn(*shape, dtype=dtype) for shape, dtype in types.values()]
    for _ in range(2):  # the second call reuses nothing of the first
        assert_matches_eager(compiled, graph, *inputs, rtol=1e-5, atol=1e-5)


def test_a_matmul_result_in_another_layout_is_copied_into_the_planned_one(monkeypatch):
    def body(b, x, w):
        return (b.op("aten.mm.default", x, w),)

    graph = make_graph("layout", {"x": ((4, 8), F32), "w": ((8, 3), F32)}, body)
    compiled = compile_graph(graph)
    # a library that answers in column-major order: the program indexes the result row-major
    monkeypatch.setitem(externs.EXTERN_KERNELS, "prims.mm", lambda a, b: torch.mm(a, b).t().contiguous().t())
    again = compile_graph(graph)
    x, w = torch.randn(4, 8), torch.randn(8, 3)
    (out,) = again(x, w)
    assert out.stride() == (3, 1)
    torch.testing.assert_close(out, x @ w)
    torch.testing.assert_close(compiled(x, w)[0], x @ w)


def test_multi_output_fallbacks_keep_their_other_outputs():
    def body(b, x):
        values, indices = b.op("aten.topk.default", b.op("aten.mul.Tensor", x, 2.0), 3)
        return values, b.op("aten.add.Tensor", indices, 1)

    graph = make_graph("topk", {"x": ((4, 9), F32)}, body)
    assert_matches_eager(compile_graph(graph), graph, torch.randn(4, 9))


def test_a_view_of_a_parameter_is_made_once_and_follows_the_parameters_memory():
    def body(b, x, w):
        return (b.op("aten.mm.default", x, b.op("aten.t.default", w)),)

    graph = make_graph("weight", {"x": ((4, 8), F32), "w": ((3, 8), F32)}, body)
    compiled = compile_graph(graph)
    x, w = torch.randn(4, 8), torch.nn.Parameter(torch.randn(3, 8))
    with torch.no_grad():
        torch.testing.assert_close(compiled(x, w)[0], x @ w.t())
        w.add_(1.0)  # in place: the kept view reads the same memory
        torch.testing.assert_close(compiled(x, w)[0], x @ w.t())
        w.data = torch.randn(3, 8)  # other memory under the same parameter: a new view
        torch.testing.assert_close(compiled(x, w)[0], x @ w.t())
        other = torch.randn(3, 8)  # a plain tensor in the parameter's place is not kept
        torch.testing.assert_close(compiled(x, other)[0], x @ other.t())
        torch.testing.assert_close(compiled(x, w)[0], x @ w.t())


def test_a_planned_call_still_copies_a_result_aliasing_an_argument_or_in_another_layout(monkeypatch):
    def body(b, img, k):
        conv = b.op("aten.convolution.default", img, k, None, [1, 1], [0, 0], [1, 1], False, [0, 0], 1)
        return (b.op("aten.relu.default", conv),)

    types = {"img": ((1, 3, 4, 4), F32), "k": ((3, 3, 1, 1), F32)}
    graph = make_graph("conv", types, body)
    (call,) = [b for b in compile_graph(graph).program.buffers if "convolution" in getattr(b, "kernel", "")]
    img, k = torch.randn(1, 3, 4, 4), torch.randn(3, 3, 1, 1)
    expected = torch.relu(torch.nn.functional.conv2d(img, k))
    def column_major(img, k, *rest):
        return torch.nn.functional.conv2d(img, k).transpose(2, 3).contiguous().transpose(2, 3)

    def in_its_argument(img, k, *rest):
        return img.copy_(torch.nn.functional.conv2d(img, k))

    for fake, label in [(column_major, "another layout"), (in_its_argument, "its argument's storage")]:
        monkeypatch.setitem(externs.EXTERN_KERNELS, call.kernel, fake)
        compiled = compile_graph(graph)
        _refuse_general_path(monkeypatch)
        arg = img.clone()
        (out,) = compiled(arg, k)
        torch.testing.assert_close(out, expected, msg=label)
        assert out.is_contiguous(), label
        assert out.untyped_storage().data_ptr() != arg.untyped_storage().data_ptr(), label
    monkeypatch.setitem(externs.EXTERN_KERNELS, call.kernel, lambda img, k, *rest: img.double())
    with pytest.raises(RuntimeCallError, match="expected a torch.float32 tensor"):
        compile_graph(graph)(img, k)


def _counting_views(monkeypatch) -> list:
    views = []
    real = torch.Tensor.as_strided
    monkeypatch.setattr(torch.Tensor, "as_strided", lambda self, *a: views.append(a) or real(self, *a))
    return views


def test_a_kernel_buffer_read_through_one_reshaping_view_is_made_in_that_layout(monkeypatch):
    def one_view(b, x, w):
        heads = b.op("aten.view.default", b.op("aten.relu.default", x), [6, 4])
        return (b.op("aten.mm.default", heads, w),)

    def two_views_and_an_output(b, x, w, v):
        r = b.op("aten.relu.default", x)
        a = b.op("aten.mm.default", b.op("aten.view.default", r, [6, 4]), w)
        c = b.op("aten.mm.default", b.op("aten.view.default", r, [2, 12]), v)
        return a, c, b.op("aten.sin.default", b.op("aten.view.default", r, [6, 4]))

    types = {"x": ((2, 3, 4), F32), "w": ((4, 5), F32), "v": ((12, 3), F32)}
    x, w, v = torch.randn(2, 3, 4), torch.randn(4, 5), torch.randn(12, 3)
    graph = make_graph("one_view", {k: types[k] for k in ("x", "w")}, one_view)
    compiled = compile_graph(graph)
    assert_matches_eager(compiled, graph, x, w, rtol=1e-5, atol=1e-5)
    views = _counting_views(monkeypatch)
    compiled(x, w)
    assert views == []  # relu's buffer is made as the [6, 4] matrix the matmul reads
    graph = make_graph("two_views", types, two_views_and_an_output)
    compiled = compile_graph(graph)
    for _ in range(2):
        assert_matches_eager(compiled, graph, x, w, v, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("causal", [False, True])
def test_attention_with_constant_parameters_runs_planned(monkeypatch, causal):
    def body(b, q, k, v, mask):
        heads = [b.op("aten.permute.default", b.op("aten.view.default", t, [2, 6, 3, 4]), [0, 2, 1, 3])
                 for t in (q, k, v)]  # fmt: skip
        attn = b.op("aten.scaled_dot_product_attention.default", *heads, None if causal else mask, 0.0,
                    causal, scale=0.3)
        return (b.op("aten.relu.default", attn),)

    types = {"q": ((2, 6, 12), F32), "k": ((2, 6, 12), F32), "v": ((2, 6, 12), F32), "mask": ((6, 6), F32)}
    graph = make_graph("attention", types, body)
    compiled = compile_graph(graph)
    _refuse_general_path(monkeypatch)
    inputs = [torch.randn(*shape, dtype=dtype) for shape, dtype in types.values()]
    for _ in range(2):
        assert_matches_eager(compiled, graph, *inputs, rtol=1e-5, atol=1e-5)


def test_a_result_that_is_not_fresh_is_copied_unless_the_kernel_never_aliases():
    from torchsmith.inductor.runtime.extern_plan import _fresh_in_layout

    x = torch.randn(4, 3)
    assert not _fresh_in_layout(x, [x], (4, 3), (3, 1), F32)  # the argument itself: copied
    assert _fresh_in_layout(x.clone(), [x], (4, 3), (3, 1), F32)
    assert _fresh_in_layout(x, [x], (4, 3), (3, 1), F32, may_alias=False)
    assert not _fresh_in_layout(x.t(), [x], (3, 4), (4, 1), F32, may_alias=False)  # strides differ


def test_a_builtin_op_gets_its_constant_int_lists_as_tuples_made_once(monkeypatch):
    # torch.convolution parses its stride, padding and dilation lists and keeps none of them: the
    # planned call passes tuples made when the graph is built instead of a fresh list per call
    def body(b, img, k):
        return b.op("aten.convolution.default", img, k, None, [2, 1], [1, 0], [1, 1], False, [0, 0], 1)

    graph = make_graph("conv", {"img": ((1, 2, 7, 6), F32), "k": ((3, 2, 3, 3), F32)}, body)
    seen = []

    def convolution(*args):
        seen.append(args[3:6])
        return torch.convolution(*args)

    (call,) = [b for b in compile_graph(graph).program.buffers if "convolution" in getattr(b, "kernel", "")]
    monkeypatch.setitem(externs.EXTERN_KERNELS, call.kernel, convolution)
    compiled = compile_graph(graph)
    img, k = torch.randn(1, 2, 7, 6), torch.randn(3, 2, 3, 3)
    assert_matches_eager(compiled, graph, img, k, rtol=1e-5, atol=1e-5)
    assert seen == [([2, 1], [1, 0], [1, 1])]  # a Python function: lists, one copy per call
    monkeypatch.setitem(externs.EXTERN_KERNELS, call.kernel, torch.convolution)
    from torchsmith.inductor.runtime import extern_plan

    flats = []
    real = extern_plan._flat_params
    monkeypatch.setattr(extern_plan, "_flat_params", lambda *a: flats.append(real(*a)) or flats[-1])
    assert_matches_eager(compile_graph(graph), graph, img, k, rtol=1e-5, atol=1e-5)
    assert flats and all(flat == flats[0] for flat in flats)  # the closure's plan and the straight line's
    assert [v for is_tensor, v in flats[0] if not is_tensor][:4] == [None, (2, 1), (1, 0), (1, 1)]


def test_a_convolution_runs_as_one_straight_line_call_whose_result_is_checked(monkeypatch):
    # torch.convolution's result is a new tensor: the straight-line graph calls it with its constants
    # inline and compares sizes and strides; a result in another layout is copied into the planned
    # one, a result of the wrong dtype is an error naming the call
    from torchsmith.inductor.runtime import extern_plan

    def body(b, img, k):
        conv = b.op("aten.convolution.default", img, k, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1)
        return (b.op("aten.relu.default", conv),)

    graph = make_graph("conv", {"img": ((1, 3, 5, 5), F32), "k": ((4, 3, 3, 3), F32)}, body)
    compiled = compile_graph(graph)
    source = compiled._straight.source
    assert source.count("(v, b, sv, scratch)") == 1 and "r.stride() ==" in source  # no closure but run
    _refuse_general_path(monkeypatch)
    img, k = torch.randn(1, 3, 5, 5), torch.randn(4, 3, 3, 3)
    assert_matches_eager(compiled, graph, img, k, rtol=1e-5, atol=1e-5)
    (call,) = [b for b in compiled.program.buffers if "convolution" in getattr(b, "kernel", "")]

    def column_major(*args):
        return torch.convolution(*args).transpose(2, 3).contiguous().transpose(2, 3)

    monkeypatch.setitem(externs.EXTERN_KERNELS, call.kernel, column_major)
    monkeypatch.setitem(extern_plan.FRESH_RESULT_FUNCTIONS, call.kernel, column_major)
    (out,) = compile_graph(graph)(img, k)
    torch.testing.assert_close(out, torch.relu(torch.nn.functional.conv2d(img, k, padding=1)))
    wrong = lambda *args: torch.convolution(*args).double()  # noqa: E731
    monkeypatch.setitem(externs.EXTERN_KERNELS, call.kernel, wrong)
    monkeypatch.setitem(extern_plan.FRESH_RESULT_FUNCTIONS, call.kernel, wrong)
    with pytest.raises(RuntimeCallError, match="expected a torch.float32 tensor"):
        compile_graph(graph)(img, k)
