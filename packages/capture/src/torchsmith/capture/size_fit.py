"""Fitting an op's output sizes over the size symbols from its meta runs at several points (the
forms are listed in torchsmith.capture.dynamic_shapes, which runs the op)."""

from fractions import Fraction

import sympy

from torchsmith.ir import Slice, TensorType, Value
from torchsmith.ir.symbolic import floordiv, sym_max, sym_min
from torchsmith.ir.types import ScalarType, SymIntType


class NoFit(Exception):
    """No form fits an output dim at every point: the caller specializes the symbols involved."""


def expressions_in(arg) -> list:
    """The distinct symbolic size expressions an op's arguments hold (a pad amount, a slice bound,
    a dim of an input's type): candidates for its output dims."""
    found: dict = {}

    def visit(a):
        if isinstance(a, sympy.Expr):
            if a.free_symbols:
                found.setdefault(a, None)
        elif isinstance(a, Value):
            t = a.type
            if isinstance(t, TensorType):
                for d in t.shape:
                    visit(d)
            elif isinstance(t, SymIntType):
                visit(t.expr)
        elif isinstance(a, (Slice, slice)):
            visit((a.start, a.stop, a.step))
        elif isinstance(a, (tuple, list)):
            for x in a:
                visit(x)
        elif isinstance(a, dict):
            visit(tuple(a.values()))

    visit(arg)
    return list(found)


def int_constants_in(arg) -> list[int]:
    """The int constants >= 2 among an op's arguments (a view's chunk size, a pad multiple)."""
    if type(arg) is int:
        return [arg] if arg >= 2 else []
    if isinstance(arg, (tuple, list)):
        return sorted({k for a in arg for k in int_constants_in(a)})
    if isinstance(arg, dict):
        return int_constants_in(tuple(arg.values()))
    return []


class Candidates:
    """Sums and differences of the argument expressions, evaluated at each inference point: an
    output dim that equals one of them at every point is taken as that expression (`F.pad` by a
    ceil-div amount gives `n + ((n + 7) // 8 * 8 - n)`, which no affine form fits)."""

    LIMIT = 12

    def __init__(self, expressions: list, points: list[dict], constants: list[int] = ()):
        self.points = points
        self.expressions = expressions[: self.LIMIT]
        self.constants = list(constants)[: self.LIMIT]
        self._table = None

    def table(self) -> list:
        if self._table is None:
            single = [(e, self.values(e)) for e in self.expressions]
            pairs = []
            for i, (a, va) in enumerate(single):
                for b, vb in single[i:]:  # flatten of two dims (of one twice): a * b
                    pairs.append((a * b, tuple(x * y for x, y in zip(va, vb))))
                for b, vb in single[i + 1 :]:
                    pairs.append((a + b, tuple(x + y for x, y in zip(va, vb))))
                    pairs.append((a - b, tuple(x - y for x, y in zip(va, vb))))
                    pairs.append((b - a, tuple(y - x for x, y in zip(va, vb))))
                    # a slice `b[:n]` of a dim shorter than n at some points: min(n, len)
                    pairs.append((sym_min(a, b), tuple(min(x, y) for x, y in zip(va, vb))))
                    pairs.append((sym_max(a, b), tuple(max(x, y) for x, y in zip(va, vb))))
            # `x.view(n, -1, k)` of a dim e: e // k (and e * k, from a merge)
            scaled = [(floordiv(e, k), tuple(v // k for v in ve)) for e, ve in single for k in self.constants]
            scaled += [(e * k, tuple(v * k for v in ve)) for e, ve in single for k in self.constants]
            self._table = single + pairs + scaled
        return self._table

    def values(self, expr) -> tuple:
        return tuple(int(expr.xreplace({s: sympy.Integer(v) for s, v in p.items()})) for p in self.points)

    def match(self, values) -> object:
        for expr, at_points in self.table():
            if at_points == tuple(values):
                return expr
        return None


def fit_types(results, syms, env, candidates: Candidates):
    """The structure of output types with every dim and stride fitted over `syms` from the runs' `results`
    (see torchsmith.capture.dynamic_shapes); raises NoFit."""
    # Points: the hints, each symbol doubled alone, every symbol tripled, every symbol quintupled.
    hints = [env.hints[s] for s in syms]

    def dim(values):
        for form in (affine, monomial, candidate, floor_affine):
            try:
                return form(values)
            except NoFit:
                continue
        raise NoFit()

    def affine(values):  # c0 + c1*s1 + c2*s2 ...
        d0, *dd, d3, d5 = values
        coeffs = []
        for h, d in zip(hints, dd):
            diff = d - d0
            if diff % h:
                raise NoFit()
            coeffs.append(diff // h)
        c0 = d0 - sum(c * h for c, h in zip(coeffs, hints))
        for k, dk in ((3, d3), (5, d5)):
            if c0 + sum(c * k * h for c, h in zip(coeffs, hints)) != dk:
                raise NoFit()
        return sympy.Integer(c0) + sum(c * s for c, s in zip(coeffs, syms)) if any(coeffs) else d0

    def monomial(values):  # c * s1**k1 * s2**k2 ... (flattens, strides of square dims)
        d0, *dd, d3, d5 = values
        if d0 == 0:
            raise NoFit()
        powers = []
        for d in dd:
            ratio = Fraction(d, d0)
            k = ratio.numerator.bit_length() - 1
            if ratio.denominator != 1 or ratio.numerator != 1 << k:
                raise NoFit()
            powers.append(k)
        scale = 1
        for h, k in zip(hints, powers):
            scale *= h**k
        degree = sum(powers)
        if not degree or d0 % scale or d0 * 3**degree != d3 or d0 * 5**degree != d5:
            raise NoFit()
        return sympy.Integer(d0 // scale) * sympy.Mul(*(s**k for s, k in zip(syms, powers)))

    def candidate(values):
        expr = candidates.match(values)
        if expr is None:
            raise NoFit()
        return expr

    def floor_affine(values):  # (n*s + c) // d + b in one symbol (a strided conv's or pool's output)
        d0, *dd, d3, d5 = values
        moved = [i for i, d in enumerate(dd) if d != d0]
        if len(moved) != 1:
            raise NoFit()
        i = moved[0]
        h = hints[i]
        points = ((2 * h, dd[i]), (3 * h, d3), (5 * h, d5))
        slope = Fraction(d5 - d0, 4 * h)
        for d in range(1, 17):
            n = round(slope * d)
            if n == 0:
                continue
            for c in range(d):
                b = d0 - (n * h + c) // d
                if all((n * x + c) // d + b == v for x, v in points):
                    # exact on the sizes with the example's residue of n*s mod d: guard that
                    env.require_residue(n * syms[i], d, (n * h) % d)
                    return floordiv(n * syms[i] + c, d) + b
        raise NoFit()

    def stride(values, shape, layout):
        """A stride is usually a product of the fitted dims after it (`3*((s0 - 1) // 2)`), or, in a
        permuted dense layout (channels-last), of the dims inner to it: those of smaller stride in
        `layout`, the strides at the hints."""
        if len(set(values)) == 1:
            return values[0]
        for start in range(len(shape)):
            product = sympy.Mul(*[sympy.sympify(d) for d in shape[start:]])
            if product.free_symbols and candidates.values(product) == tuple(values):
                return product
        inner = sympy.Mul(*[sympy.sympify(d) for d, s in zip(shape, layout) if s < values[0]])
        if inner.free_symbols and candidates.values(inner) == tuple(values):
            return inner
        return dim(values)

    def walk(items):
        first = items[0]
        if isinstance(first, TensorType):
            if any(not isinstance(i, TensorType) or len(i.shape) != len(first.shape) for i in items):
                raise NoFit()
            shape = tuple(_int(dim([i.shape[k] for i in items])) for k in range(len(first.shape)))
            strides = tuple(
                _int(stride([i.strides[k] for i in items], shape, first.strides))
                for k in range(len(first.shape))
            )
            return first.replace(shape=shape, strides=strides)
        if isinstance(first, SymIntType):
            return SymIntType(_int(dim([i.expr for i in items])))
        if isinstance(first, ScalarType):
            return first
        parts = [walk([i[k] for i in items]) for k in range(len(first))]
        if isinstance(first, list):
            return parts
        return (
            type(first)(*parts)
            if hasattr(first, "_fields")
            else (type(first)(parts) if type(first) is not tuple else tuple(parts))
        )

    return walk(results)


def _int(d):
    return int(d) if isinstance(d, sympy.Integer) else d
