"""`SomeFunction.apply(...)` of a `torch.autograd.Function` where no gradient is recorded.

With grad mode off, or no tensor argument requiring grad, eager's `apply` records no backward
node: it runs `forward` on a fresh context and returns its outputs. Capture does the same and inlines
`forward` (with `setup_context`, when the class defines one, left out: it only prepares the
backward). Where a gradient would be recorded the custom `backward` matters, and the call stays a
graph break that names the class.
"""

import torch

from torchsmith.capture.errors import Unsupported
from torchsmith.capture.variables import ConstVar, TensorVar


class NoGradContext:
    """The `ctx` a captured `forward` receives: what it saves for a backward that never runs is
    dropped, as eager drops the context of a call that records no gradient."""

    def __init__(self, inputs: int):
        self.needs_input_grad = (False,) * inputs
        self.materialize_grads = True

    def save_for_backward(self, *tensors):
        pass

    def save_for_forward(self, *tensors):
        pass

    def mark_dirty(self, *tensors):
        pass

    def mark_non_differentiable(self, *tensors):
        pass

    def set_materialize_grads(self, value):
        pass


def is_autograd_function_apply(fn) -> bool:
    """Whether `fn` is `torch.autograd.Function.apply`, bound to a subclass or plain (called with the
    class as its first argument, as a method tracker calls it)."""
    try:
        return getattr(fn, "__func__", fn) is _APPLY
    except Exception:  # objects whose attribute lookup raises are no `apply`
        return False


_APPLY = torch.autograd.Function.apply.__func__


def apply_without_grad(tracer, args: list, kwargs: dict):
    """The tracker of `cls.apply(*args, **kwargs)` (`args[0]` is the class): `cls.forward` inlined
    where no gradient is recorded, else a graph break naming the class."""
    owner, *args = args
    cls = tracer.as_python(owner)
    if not (isinstance(cls, type) and issubclass(cls, torch.autograd.Function)):
        raise Unsupported(f"autograd.Function.apply called on {owner.describe()}")
    tensors = [t for t in tracer.flat_trackers([*args, *kwargs.values()]) if isinstance(t, TensorVar)]
    if tracer.grad_enabled and any(t.type.requires_grad for t in tensors):
        raise Unsupported(
            f"{cls.__qualname__}.apply with inputs that require grad (a custom autograd.Function "
            "backward; it runs eagerly)"
        )
    forward = ConstVar(cls.forward)
    if cls.setup_context is not torch.autograd.Function.setup_context:
        return tracer.call(forward, list(args), dict(kwargs))  # forward(*args): no ctx
    ctx = ConstVar(NoGradContext(len(args)))
    return tracer.call(forward, [ctx, *args], dict(kwargs))
