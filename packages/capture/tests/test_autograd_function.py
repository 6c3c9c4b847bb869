"""torch.autograd.Function.apply in captured code: `forward` inlined where no gradient is recorded,
a graph break (the custom backward kept) where one is."""

import torch


class Double(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, scale=2.0):
        ctx.save_for_backward(x)
        ctx.mark_non_differentiable()
        return x * scale

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * 3.0, None  # not forward's derivative: shows that this backward ran


class Shift(torch.autograd.Function):
    """The `setup_context` style: `forward` takes no ctx."""

    @staticmethod
    def forward(x, amount):
        return x + amount

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.amount = inputs[1]

    @staticmethod
    def backward(ctx, grad):
        return grad, None


def _reasons(compiled) -> list[str]:
    return [str(r.break_reason) for r in compiled.session.records if r.break_reason]


def test_apply_under_no_grad_inlines_forward(compile_with, backend):
    def f(x):
        return Double.apply(x + 1) - 1

    x = torch.randn(3, 4)
    compiled = compile_with(f)
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), f(x))
    assert len(backend.graphs) == 1
    assert _reasons(compiled) == []


def test_apply_of_tensors_without_grad_inlines_forward_in_grad_mode(compile_with, backend):
    def f(x):
        return Double.apply(x.sin(), 0.5)

    x = torch.randn(5)
    compiled = compile_with(f)
    out = compiled(x)
    torch.testing.assert_close(out, f(x))
    assert not out.requires_grad
    assert len(backend.graphs) == 1


def test_apply_with_setup_context_calls_forward_without_ctx(compile_with, backend):
    def f(x):
        return Shift.apply(x * 2, 3.0)

    x = torch.randn(2, 3)
    compiled = compile_with(f)
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), f(x))
    assert len(backend.graphs) == 1


def test_apply_recording_a_gradient_breaks_and_keeps_the_custom_backward(compile_with, backend):
    def f(x):
        return Double.apply(x * 1.0).sum()

    x = torch.randn(4, requires_grad=True)
    compiled = compile_with(f)
    out = compiled(x)
    torch.testing.assert_close(out, f(x.detach()))
    out.backward()
    torch.testing.assert_close(x.grad, torch.full((4,), 3.0))  # Double.backward's, not 2.0
    assert len(_reasons(compiled)) == 1, _reasons(compiled)  # apply runs natively, not captured
    assert "Double.apply with inputs that require grad" in _reasons(compiled)[0]


def test_apply_inside_a_module_under_no_grad_is_one_graph(compile_with, backend):
    class Gelu(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x * 0.5 * (1.0 + torch.tanh(0.79788456 * x * (1 + 0.044715 * x * x)))

    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(4, 4)

        def forward(self, x):
            return self.fc(Gelu.apply(self.fc(x)))

    block = Block().eval()
    x = torch.randn(2, 4)
    compiled = compile_with(block)
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), block(x))
    assert len(backend.graphs) == 1
