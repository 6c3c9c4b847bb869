"""extern_pool: matmul extern calls write into their call site's buffer from the previous run, but
never into one a caller still holds (a returned result, a view of it, or a buffer a later kernel
took over)."""

import pytest
import torch

from torchsmith.inductor import compile_graph
from torchsmith.inductor.runtime import extern_pool, onednn_matmul
from torchsmith.inductor.testing import make_graph

F32 = torch.float32


@pytest.fixture(autouse=True)
def blas_matmuls(monkeypatch):
    """torch's matmuls, which take `out=` (products oneDNN runs return fresh tensors, unpooled)."""
    monkeypatch.setattr(onednn_matmul, "FORCE", False)


def _graph(body, **types):
    return make_graph("pool", {name: (shape, F32) for name, shape in types.items()}, body)


def test_intermediate_matmul_results_are_reused_across_calls():
    def body(b, x, w):
        return b.op("aten.sum.dim_IntList", b.op("aten.mm.default", x, w), [1])

    extern_pool.clear()
    compiled = compile_graph(_graph(body, x=(256, 256), w=(256, 512)))
    x, w = torch.randn(256, 256), torch.randn(256, 512)
    first = compiled(x, w)[0]
    (entry,) = extern_pool._pool.values()
    kept = entry[1].data_ptr()
    del entry  # a reference held here would (rightly) keep the buffer from reuse
    second = compiled(x * 2, w)[0]
    assert next(iter(extern_pool._pool.values()))[1].data_ptr() == kept  # the same buffer again
    torch.testing.assert_close(first, (x @ w).sum(1), rtol=1e-4, atol=1e-3)
    torch.testing.assert_close(second, (2 * x @ w).sum(1), rtol=1e-4, atol=1e-3)


def test_a_buffer_a_later_kernel_took_over_is_not_reused_while_held():
    # relu writes in place of the mm result (memory plan), and relu's result is returned.
    def body(b, x, w):
        return b.op("aten.relu.default", b.op("aten.mm.default", x, w))

    extern_pool.clear()
    compiled = compile_graph(_graph(body, x=(256, 256), w=(256, 512)))
    x, w = torch.randn(256, 256), torch.randn(256, 512)
    first = compiled(x, w)[0]
    compiled(-x, w)
    torch.testing.assert_close(first, torch.relu(x @ w))


def test_results_a_caller_holds_are_never_overwritten():
    def body(b, x, w, bias):
        product = b.op("aten.addmm.default", bias, x, w)
        return product, b.op("aten.view.default", b.op("aten.mm.default", x, w), [512, 256])

    extern_pool.clear()
    compiled = compile_graph(_graph(body, x=(256, 256), w=(256, 512), bias=(512,)))
    inputs = [torch.randn(256, 256), torch.randn(256, 512), torch.randn(512)]
    held = compiled(*inputs)
    expected = [inputs[2] + inputs[0] @ inputs[1], (inputs[0] @ inputs[1]).view(512, 256)]
    for _ in range(3):
        again = compiled(torch.randn(256, 256), *inputs[1:])
        assert all(a.data_ptr() != h.data_ptr() for a, h in zip(again, held))
    for got, want in zip(held, expected):
        torch.testing.assert_close(got, want)


def test_replaced_kernels_without_out_still_run(monkeypatch):
    from torchsmith.inductor.runtime import externs

    calls = []
    monkeypatch.setitem(externs.EXTERN_KERNELS, "prims.mm", lambda a, b: calls.append(1) or torch.mm(a, b))

    def body(b, x, w):
        return b.op("aten.mm.default", x, w)

    compiled = compile_graph(_graph(body, x=(4, 8), w=(8, 3)))
    x, w = torch.randn(4, 8), torch.randn(8, 3)
    torch.testing.assert_close(compiled(x, w)[0], x @ w)
    assert calls == [1]


def test_a_pooled_result_can_be_taken_over_by_its_only_holder():
    # AccumulateGrad makes a gradient `.grad` without a copy only when nothing else references the
    # tensor: the pool's own reference must not count, while its buffer still waits for the release.
    def body(b, g, x):
        return b.op("aten.mm.default", b.op("aten.t.default", g), x)

    extern_pool.clear()
    compiled = compile_graph(_graph(body, g=(256, 512), x=(256, 256)))
    g, x = torch.randn(256, 512), torch.randn(256, 256)

    class WeightGrad(torch.autograd.Function):
        @staticmethod
        def forward(ctx, weight):
            return weight.sum()

        @staticmethod
        def backward(ctx, grad):
            (result,) = compiled(g, x)
            WeightGrad.returned = result.data_ptr()
            return result

    weight = torch.zeros(512, 256, requires_grad=True)
    WeightGrad.apply(weight).backward()
    assert weight.grad.data_ptr() == WeightGrad.returned  # taken over, not copied
    torch.testing.assert_close(weight.grad, g.t() @ x)
    again = compiled(2 * g, x)[0]  # the pool's buffer is .grad now: a fresh one, .grad untouched
    assert again.data_ptr() != weight.grad.data_ptr()
    torch.testing.assert_close(weight.grad, g.t() @ x)
