"""Class statements inside captured code (class_statement.py): the class is built at capture time,
its methods traced with the capture's closure cells; bodies that could behave differently when run
once, and classes that escape the graph, are refused with a reason. Each compared with eager."""

import pytest
import torch

from torchsmith.capture import FullGraphError


def masked_like(x, mask):
    """The shape of torch.masked's `_combine_input_and_mask`: a class defined on every call, used
    only on one branch, whose method closes over a function of the enclosing call."""

    def helper(t):
        return torch.where(mask, t, torch.zeros_like(t))

    class Combine(torch.autograd.Function):
        @staticmethod
        def forward(ctx, t):
            return helper(t)

        @staticmethod
        def backward(ctx, grad):
            return grad

    return helper(x).sum(0)


def test_class_statement_in_an_unused_branch_is_one_graph(compile_with, backend):
    compiled = compile_with(masked_like, fullgraph=True)
    x, mask = torch.randn(3, 4), torch.rand(3, 4) > 0.5
    torch.testing.assert_close(compiled(x, mask), masked_like(x, mask))
    assert len(backend.graphs) == 1
    x2, mask2 = torch.randn(3, 4), torch.rand(3, 4) > 0.5  # the same graph, no recapture
    torch.testing.assert_close(compiled(x2, mask2), masked_like(x2, mask2))
    assert len(backend.graphs) == 1


def test_methods_of_the_class_read_the_captures_cells(compile_with, backend):
    def f(x, scale):
        offset = x.mean()

        class Affine:
            @staticmethod
            def apply(t):
                return t * scale + offset

            def __init__(self, power):
                self.power = power

            def __call__(self, t):
                return Affine.apply(t) ** self.power

        return Affine(2)(x)

    compiled = compile_with(f, fullgraph=True)
    x = torch.randn(5)
    torch.testing.assert_close(compiled(x, 3.0), f(x, 3.0))
    assert len(backend.graphs) == 1


def test_a_class_that_escapes_is_refused(compile_with):
    def f(x):
        def helper(t):
            return t + 1

        class Escaping:
            @staticmethod
            def run(t):
                return helper(t)

        return x * 2, Escaping

    with pytest.raises(FullGraphError, match="class .*Escaping.* used after the graph"):
        compile_with(f, fullgraph=True)(torch.randn(3))
    y, cls = compile_with(f)(torch.randn(3))  # without fullgraph: eager, and the class works
    torch.testing.assert_close(cls.run(y), y + 1)


CALLS = []


def appends(x):
    class Busy:
        CALLS.append(1)  # a side effect eager runs on every call, capture would run once

    return x + 1


def measures(x):
    class Busy:
        size = len([1, 2])

    return x + Busy.size


@pytest.mark.parametrize("f, reads", [(appends, "CALLS"), (measures, "len")])
def test_a_body_doing_more_than_defining_methods_is_refused(compile_with, f, reads):
    with pytest.raises(FullGraphError, match=f"class statement 'Busy'.*reads {reads!r}"):
        compile_with(f, fullgraph=True)(torch.randn(3))
    x = torch.randn(3)
    torch.testing.assert_close(compile_with(f)(x), f(x))


def test_a_class_whose_methods_call_super_is_built(compile_with, backend):
    class Base:
        def __init__(self, scale):
            self.scale = scale

    def f(x):
        class Scaled(Base):
            def __init__(self):
                super().__init__(3.0)

        return x * Scaled().scale

    compiled = compile_with(f, fullgraph=True)
    x = torch.randn(4)
    torch.testing.assert_close(compiled(x), f(x))
    assert len(backend.graphs) == 1
