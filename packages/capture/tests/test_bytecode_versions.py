"""Bytecode of every supported CPython (3.11-3.13) captures into graphs, breaks resume correctly,
and an instruction capture does not know is a graph break that names it."""

import functools
import logging
import sys

import pytest
import torch

from torchsmith.capture import FullGraphError, capture
from torchsmith.capture.instructions import normalize
from torchsmith.capture.tracer import Tracer


def test_product_of_two_locals_is_one_graph(compile_with, backend):
    def f(x, y):
        a = x * y
        return a

    x, y = torch.randn(3), torch.randn(3)
    torch.testing.assert_close(compile_with(f)(x, y), x * y)
    assert len(backend.graphs) == 1
    assert backend.graphs[0].ops() == ["torch.Tensor.__mul__"]


def test_fused_loads_and_stores_keep_their_order(compile_with, backend):
    def f(x, y):
        a, b = y, x  # 3.13: STORE_FAST_STORE_FAST
        c = [t * 2 for t in (a, b)]  # STORE_FAST_LOAD_FAST inside the comprehension
        return a - b, c[0] / (c[1] + 3)

    x, y = torch.randn(3), torch.randn(3)
    for got, want in zip(compile_with(f)(x, y), f(x, y)):
        torch.testing.assert_close(got, want)
    assert len(backend.graphs) == 1


def test_keyword_calls_star_calls_and_methods(compile_with, backend):
    def scale(t, *, by=1.0, shift=0.0):
        return t * by + shift

    def f(x, *rest, **named):
        y = scale(x, by=2.0, shift=1.0)  # CALL_KW on 3.13
        z = scale(*rest, **named)  # CALL_FUNCTION_EX with a NULL after the callable on 3.13
        return y.sum(dim=0, keepdim=True) + z.mean()

    x, w = torch.randn(4), torch.randn(4)
    torch.testing.assert_close(compile_with(f)(x, w, by=3.0), f(x, w, by=3.0))
    assert len(backend.graphs) == 1


def test_fstrings_truth_tests_and_none_checks(compile_with, backend):
    def f(x, tag=None, flags=(1, 2)):
        name = f"{x.shape[0]!r}-{len(flags):>3}-{tag}"
        if tag is None and not flags == ():
            x = x + len(name)
        if flags:
            x = x * 2
        return x

    x = torch.randn(5)
    torch.testing.assert_close(compile_with(f)(x), f(x))
    assert len(backend.graphs) == 1


def test_nested_functions_with_defaults_and_closures(compile_with, backend):
    def f(x):
        k = 3

        def inner(t, a=2, *, b=1) -> torch.Tensor:  # SET_FUNCTION_ATTRIBUTE on 3.13
            return t * a + b + k

        g = functools.partial(inner, b=5)
        return inner(x) + g(x, a=4)

    x = torch.randn(3)
    torch.testing.assert_close(compile_with(f)(x), f(x))
    assert len(backend.graphs) == 1


def test_super_and_loops_over_modules(compile_with, backend):
    class Base(torch.nn.Module):
        def forward(self, x):
            return x + 1

    class Child(Base):
        def __init__(self):
            super().__init__()
            self.layers = torch.nn.ModuleList(torch.nn.Linear(3, 3) for _ in range(2))

        def forward(self, x):
            for layer in self.layers:
                x = layer(x)
            return super().forward(x)

    model = Child()
    x = torch.randn(2, 3)
    torch.testing.assert_close(compile_with(model)(x), model(x))
    assert len(backend.graphs) == 1


def test_break_on_tensor_truth_resumes_both_ways(compile_with, backend):
    def f(x):
        y = x + 1
        if y.sum() > 0:
            return y * 2
        return y - 2

    compiled = compile_with(f)
    for x in (torch.ones(3), -torch.ones(3) * 5):
        torch.testing.assert_close(compiled(x), f(x))


def test_break_on_negated_tensor_resumes(compile_with, backend):
    def f(x):
        y = x * 3
        flag = not y.any()
        return y + 1, flag

    compiled = compile_with(f)
    for x in (torch.zeros(2), torch.ones(2)):
        got, want = compiled(x), f(x)
        torch.testing.assert_close(got[0], want[0])
        assert got[1] == want[1]


def test_break_inside_closure_resumes_with_shared_cells(compile_with, backend):
    def f(x):
        total = x * 2

        def add(t):
            return t + total

        y = add(x)
        print("a graph break", end="\r")
        return add(y), total

    x = torch.randn(3)
    got, want = compile_with(f)(x), f(x)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b)
    assert len(backend.graphs) == 2


def test_an_instruction_without_handler_is_a_named_graph_break(compile_with, backend, monkeypatch, caplog):
    def f(x):
        y = x.sin()
        return y * y

    monkeypatch.setattr(Tracer, "op_BINARY_OP", None)  # as if the opcode were new
    x = torch.randn(3)
    with caplog.at_level(logging.INFO, logger="torchsmith.capture"):
        compiled = compile_with(f)
        torch.testing.assert_close(compiled(x), f(x))
    reasons = [str(r.break_reason) for r in compiled.session.records if r.break_reason is not None]
    assert any("BINARY_OP" in r for r in reasons), reasons
    assert any("BINARY_OP" in m for m in caplog.messages)
    assert [g.ops() for g in backend.graphs][:1] == [["torch.Tensor.sin"]]
    with pytest.raises(FullGraphError, match="BINARY_OP"):
        capture(f, backend, fullgraph=True)(x)


@pytest.mark.skipif(sys.version_info < (3, 13), reason="3.13 bytecode")
def test_313_fused_instructions_are_normalized():
    def f(x, y):
        a, b = x, y
        return a * b, [t for t in (a, b)]

    names = {ins.opname for ins in normalize(f.__code__)}
    assert not names & {"LOAD_FAST_LOAD_FAST", "STORE_FAST_LOAD_FAST", "STORE_FAST_STORE_FAST", "CALL_KW"}


def test_break_inside_a_split_instruction_resumes_at_the_whole_instruction(compile_with, backend):
    np = pytest.importorskip("numpy")

    def f(x):
        y = x * 2
        a = y.numpy()  # a graph break: NumPy runs eagerly
        b = a[1:]  # 3.12+: BINARY_SLICE, split in two; the break is inside it
        return torch.as_tensor(np.ascontiguousarray(b)) + y.sum()

    x = torch.arange(4.0)
    compiled = compile_with(f)
    torch.testing.assert_close(compiled(x), f(x))
    reasons = [str(r.break_reason) for r in compiled.session.records if r.break_reason is not None]
    assert not any("cannot resume" in r for r in reasons), reasons
    assert len(backend.graphs) >= 2  # the code after the slice is captured again


def test_break_inside_a_split_slice_store_resumes_after_it(compile_with, backend):
    pytest.importorskip("numpy")

    def f(x):
        y = x + 1
        a = y.numpy()
        a[1:3] = 7.0  # 3.12+: STORE_SLICE, split in two; runs natively and writes through to y
        return y * 2

    x = torch.arange(5.0)
    compiled = compile_with(f)
    torch.testing.assert_close(compiled(x), f(x))
    assert len(backend.graphs) == 2  # the code after the slice store is captured again


def test_break_inside_a_comprehension_keeps_the_items_built_so_far(compile_with, backend):
    # 3.12+ inline comprehensions: the list being built is on the stack at each break, and each
    # resume function appends to the list it received
    def f(x, xs):
        return [print("a graph break", end="\r") or t * x for t in xs]

    x, xs = torch.randn(2), [torch.randn(2) for _ in range(3)]
    got = compile_with(f)(x, xs)
    assert len(got) == 3
    for a, b in zip(got, f(x, xs)):
        torch.testing.assert_close(a, b)
