"""The symbolic lowering's size fitting: hint points in general position, sums of symbols, floor
divisions as size conditions, and piecewise sizes the points cannot see."""

import itertools
from fractions import Fraction

import pytest
import sympy
import torch

from torchsmith.autograd_aot import aot_eager
from torchsmith.autograd_aot.symbolic import _blind_to, _Fitter, _NoFit, _solve, hint_points
from torchsmith.ir import GraphBuilder, TensorType, symbol
from torchsmith.ir.symbolic import floordiv

S0, S1 = symbol("s0"), symbol("s1")


@pytest.mark.parametrize("count", [1, 2, 3, 4])
def test_hint_points_are_affinely_independent(count):
    names = [f"s{i}" for i in range(count)]
    points = hint_points({n: 3 + 2 * i for i, n in enumerate(names)}, names)
    assert len(points) == count + 2
    rows = [[Fraction(p[n]) for n in names] + [Fraction(1)] for p in points[: count + 1]]
    # non-singular: n + 1 points pin a linear form down
    assert _solve(rows, [Fraction(0)] * (count + 1)) is not None


def test_a_sum_of_two_symbols_is_fitted_as_the_sum():
    points = hint_points({"s0": 3, "s1": 4}, ["s0", "s1"])
    fitter = _Fitter(points)
    values = tuple(p["s0"] + p["s1"] for p in points)
    assert sympy.simplify(fitter.fit(values) - (S0 + S1)) == 0
    with pytest.raises(_NoFit):
        fitter.fit(tuple(p["s0"] * p["s0"] + p["s1"] + 1 + i % 2 for i, p in enumerate(points)))


def test_a_floor_division_becomes_a_size_condition():
    points = hint_points({"s0": 400}, ["s0"])
    fitter = _Fitter(points)
    assert fitter.fit(tuple(p["s0"] // 5 - 1 for p in points)) == floordiv(S0, 5) - 1
    assert fitter.conditions == {(S0, 5)}


def test_piecewise_sizes_the_points_cannot_see_are_detected():
    points = hint_points({"s0": 16}, ["s0"])
    assert _blind_to(8 * floordiv(S0 + 7, 8), points)
    assert not _blind_to(floordiv(S0, 5) - 1, hint_points({"s0": 400}, ["s0"]))


def _cat_graph():
    b = GraphBuilder("cat")
    x = b.input("x", TensorType.make((S0, 3), torch.float32))
    y = b.input("y", TensorType.make((S1, 3), torch.float32))
    out = b.op("torch.cat", [x, y], out_type=TensorType.make((S0 + S1, 3), torch.float32))
    b.output(b.op("torch.Tensor.__mul__", out, 2, out_type=TensorType.make((S0 + S1, 3), torch.float32)))
    return b.build()


def test_cat_of_two_symbolic_parts_runs_every_size_with_one_program():
    graph = _cat_graph()
    fn = aot_eager(graph, [torch.randn(3, 3), torch.randn(4, 3)])
    for n, m in itertools.product((2, 5, 7), (3, 6)):
        x, y = torch.randn(n, 3), torch.randn(m, 3)
        (out,) = fn(x, y)
        torch.testing.assert_close(out, torch.cat([x, y]) * 2)
    assert len(fn.symbolic) == 1
