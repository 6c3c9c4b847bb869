"""Dynamic shapes at capture level: size symbols, their guards, and symbolic output types.

A dynamic dimension of an input tensor becomes a symbol (`s0`) in its IR type. Dims of equal size
share one symbol ("duck sizing", guarded to stay equal); sizes 0 and 1 are always specialized, and
every symbol is guarded `>= 2` so a later 0/1 recompiles.

Output types of an op on symbolic inputs are found without per-op shape rules: the op runs on
meta tensors at the sizes seen now (the hints), again with one symbol doubled at a time, and with
every symbol tripled and quintupled. Each output dim (and stride) is fitted as
`c0 + c1*s0 + c2*s1 ...` (or `c * s0 * s1 ...`, for flattening) from the first runs and checked
against the last two. When no such form fits (or the op fails at the other sizes), the symbols
involved are specialized: guarded equal to their hints, so the graph stays right for every call its
guards admit. This is a heuristic: a piecewise size function (`max`, rounding) that happens to agree
at all of these points would be fitted wrongly; per-op symbolic shape rules would remove that risk.

Python code may also use sizes (`x.shape[0]`, `len(x)`): those are `SymVar`s. Arithmetic keeps
them symbolic, comparisons decide at the hint and add a guard, and any other use specializes.
"""

from fractions import Fraction

import sympy
import torch

from torchsmith.capture.errors import Unsupported
from torchsmith.ir import Slice, TensorType, Value
from torchsmith.ir.symbolic import evaluate, floordiv, sym_max, sym_min, symbol
from torchsmith.ir.types import ScalarType, SymIntType, contiguous_strides


class ShapeEnv:
    """The size symbols of one capture: their hints, where they come from, and their guards."""

    def __init__(self, guards, namespace):
        self.guards = guards
        self.ns = namespace
        self.hints: dict[sympy.Symbol, int] = {}
        self.origin: dict[sympy.Symbol, str] = {}  # symbol -> "L['x'].size(0)"
        self.specialized: set[sympy.Symbol] = set()
        namespace.values["___ev"] = evaluate

    def size_symbol(self, size: int, size_source: str):
        """The dim for a dynamic size read through `size_source` (an int when specialized)."""
        if size < 2:
            self.guards.add(f"{size_source} == {size}")
            return size
        for sym, hint in self.hints.items():
            if hint == size:  # duck sizing: equal sizes share a symbol
                self.guards.add(f"{size_source} == {self.origin[sym]}")
                return sym
        sym = symbol(f"s{len(self.hints)}")
        self.hints[sym] = size
        self.origin[sym] = size_source
        self.guards.add(f"{size_source} >= 2")
        return sym

    def hint(self, expr) -> int:
        """The value of a dim at the sizes seen in this capture."""
        if isinstance(expr, int):
            return expr
        return int(evaluate(expr, {s.name: h for s, h in self.hints.items()}))

    def specialize(self, expr) -> int:
        """Fix `expr` to its hint from now on (guarding every symbol in it)."""
        if isinstance(expr, int):
            return expr
        for sym in expr.free_symbols:
            if sym not in self.specialized:
                self.specialized.add(sym)
                self.guards.add(f"{self.origin[sym]} == {self.hints[sym]}")
        return self.hint(expr)

    def python_expr(self, expr) -> str:
        """Source code computing `expr` at run time from the inputs' sizes."""
        if isinstance(expr, int) or expr.is_Integer:
            return str(int(expr))
        if expr.is_Symbol:
            return self.origin[expr]
        bindings = ", ".join(f"{s.name!r}: {self.origin[s]}" for s in sorted(expr.free_symbols, key=str))
        return f"___ev({self.ns.name_of(expr)}, {{{bindings}}})"

    def require_residue(self, expr, divisor: int, residue: int) -> None:
        """Guard `expr % divisor == residue` (true at the hints): a fitted floor division is exact
        on that residue class (a trivial guard when `divisor` is 1)."""
        if divisor > 1:
            self.guards.add(f"({self.python_expr(expr)}) % {divisor} == {residue}")

    def decide(self, relation) -> bool:
        """The truth of a symbolic comparison at the hints, guarded to stay so."""
        relation = sympy.sympify(relation)
        if relation in (sympy.true, sympy.false):
            return bool(relation)
        value = bool(relation.subs(self.hints))
        held = relation if value else sympy.Not(relation)
        if held in (sympy.true, sympy.false):
            return value
        if not isinstance(held, sympy.core.relational.Relational):
            self.specialize(relation.lhs - relation.rhs)
            return value
        lhs, rhs = self.python_expr(held.lhs), self.python_expr(held.rhs)
        self.guards.add(f"{lhs} {held.rel_op} {rhs}")
        return value

    # ----------------------------------------------------------------- types
    def input_type(self, tensor: torch.Tensor, source: str, dims: set[int]) -> TensorType:
        """The IR type of an input tensor whose `dims` are dynamic (only contiguous ones are)."""
        shape = [
            self.size_symbol(size, f"{source}.size({d})") if d in dims else size
            for d, size in enumerate(tensor.shape)
        ]
        return TensorType(
            tuple(shape),
            tensor.dtype,
            str(tensor.device),
            contiguous_strides(tuple(shape)),
            tensor.requires_grad,
        )

    def substitute(self, arg, scale: dict | None = None):
        """`arg` with every symbol replaced by its hint (times `scale[symbol]`)."""
        values = {s: h * (scale.get(s, 1) if scale else 1) for s, h in self.hints.items()}
        if isinstance(arg, sympy.Expr):
            return int(arg.subs(values))
        if isinstance(arg, Value):
            t = arg.type
            if isinstance(t, TensorType):
                return Value(
                    arg.name,
                    t.replace(
                        shape=tuple(_at(d, values) for d in t.shape),
                        strides=tuple(_at(d, values) for d in t.strides),
                    ),
                )
            if isinstance(t, SymIntType):
                return Value(arg.name, SymIntType(_at(t.expr, values)))
            return arg
        if isinstance(arg, Slice):
            return Slice(*(self.substitute(p, scale) for p in (arg.start, arg.stop, arg.step)))
        if isinstance(arg, slice):
            return slice(*(self.substitute(p, scale) for p in (arg.start, arg.stop, arg.step)))
        if isinstance(arg, tuple):
            return (
                type(arg)(self.substitute(a, scale) for a in arg)
                if type(arg) is tuple
                else type(arg)([self.substitute(a, scale) for a in arg])
            )
        return arg


def _at(dim, values):
    return int(dim.subs(values)) if isinstance(dim, sympy.Expr) else dim


def symbols_in(arg) -> set:
    """The size symbols appearing in a graph argument (Values' types, expressions, nested)."""
    if isinstance(arg, sympy.Expr):
        return set(arg.free_symbols)
    if isinstance(arg, Value):
        t = arg.type
        if isinstance(t, TensorType):
            return set().union(*[d.free_symbols for d in t.shape + t.strides if isinstance(d, sympy.Expr)])
        if isinstance(t, SymIntType) and isinstance(t.expr, sympy.Expr):
            return set(t.expr.free_symbols)
        return set()
    if isinstance(arg, (Slice, slice)):
        return symbols_in((arg.start, arg.stop, arg.step))
    if isinstance(arg, (tuple, list)):
        return set().union(*[symbols_in(a) for a in arg]) if arg else set()
    if isinstance(arg, dict):
        return symbols_in(tuple(arg.values()))
    return set()


def infer_symbolic(env: ShapeEnv, infer, args: tuple, kwargs: dict):
    """Output types of an op on symbolic inputs (see the module docstring); `infer(args, kwargs)`
    returns the structure of TensorTypes for concrete inputs."""
    syms = sorted(symbols_in((args, kwargs)) - env.specialized, key=str)
    if not syms:
        return infer(env.substitute(args), {k: env.substitute(v) for k, v in kwargs.items()})
    runs = [None] + [{s: 2} for s in syms] + [{s: 3 for s in syms}, {s: 5 for s in syms}]
    results = []
    for scale in runs:
        try:
            results.append(
                infer(env.substitute(args, scale), {k: env.substitute(v, scale) for k, v in kwargs.items()})
            )
        except Unsupported:
            if scale is None:
                raise
            results.append(None)
    if any(r is None for r in results):
        return _specialized(env, syms, results[0])
    points = [{s: env.hints[s] * (scale.get(s, 1) if scale else 1) for s in env.hints} for scale in runs]
    try:
        return _fit(results, syms, env, _Candidates(expressions_in((args, kwargs)), points,
                                                           int_constants_in((args, kwargs))))
    except _NoFit:
        return _specialized(env, syms, results[0])


class _NoFit(Exception):
    pass


def _specialized(env: ShapeEnv, syms, structure):
    for s in syms:
        env.specialize(s)
    return structure


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


class _Candidates:
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


def _fit(results, syms, env, candidates: _Candidates):
    # Points: the hints, each symbol doubled alone, every symbol tripled, every symbol quintupled.
    hints = [env.hints[s] for s in syms]

    def dim(values):
        for form in (affine, monomial, candidate, floor_affine):
            try:
                return form(values)
            except _NoFit:
                continue
        raise _NoFit()

    def affine(values):  # c0 + c1*s1 + c2*s2 ...
        d0, *dd, d3, d5 = values
        coeffs = []
        for h, d in zip(hints, dd):
            diff = d - d0
            if diff % h:
                raise _NoFit()
            coeffs.append(diff // h)
        c0 = d0 - sum(c * h for c, h in zip(coeffs, hints))
        for k, dk in ((3, d3), (5, d5)):
            if c0 + sum(c * k * h for c, h in zip(coeffs, hints)) != dk:
                raise _NoFit()
        return sympy.Integer(c0) + sum(c * s for c, s in zip(coeffs, syms)) if any(coeffs) else d0

    def monomial(values):  # c * s1**k1 * s2**k2 ... (flattens, strides of square dims)
        d0, *dd, d3, d5 = values
        if d0 == 0:
            raise _NoFit()
        powers = []
        for d in dd:
            ratio = Fraction(d, d0)
            k = ratio.numerator.bit_length() - 1
            if ratio.denominator != 1 or ratio.numerator != 1 << k:
                raise _NoFit()
            powers.append(k)
        scale = 1
        for h, k in zip(hints, powers):
            scale *= h**k
        degree = sum(powers)
        if not degree or d0 % scale or d0 * 3**degree != d3 or d0 * 5**degree != d5:
            raise _NoFit()
        return sympy.Integer(d0 // scale) * sympy.Mul(*(s**k for s, k in zip(syms, powers)))

    def candidate(values):
        expr = candidates.match(values)
        if expr is None:
            raise _NoFit()
        return expr

    def floor_affine(values):  # (n*s + c) // d + b in one symbol (a strided conv's or pool's output)
        d0, *dd, d3, d5 = values
        moved = [i for i, d in enumerate(dd) if d != d0]
        if len(moved) != 1:
            raise _NoFit()
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
        raise _NoFit()

    def walk(items):
        first = items[0]
        if isinstance(first, TensorType):
            if any(not isinstance(i, TensorType) or len(i.shape) != len(first.shape) for i in items):
                raise _NoFit()
            shape = tuple(_int(dim([i.shape[k] for i in items])) for k in range(len(first.shape)))
            strides = tuple(_int(dim([i.strides[k] for i in items])) for k in range(len(first.shape)))
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
