"""Dynamic shapes at capture level: size symbols, their guards, and symbolic output types.

A dynamic dimension of an input tensor becomes a symbol (`s0`) in its IR type. Dims of equal size
share one symbol ("duck sizing", guarded to stay equal); sizes 0 and 1 are always specialized, and
every symbol is guarded `>= 2` so a later 0/1 recompiles.

Output types of an op on symbolic inputs are found without per-op shape rules: the op runs on
meta tensors at the sizes seen now (the hints), again with one symbol doubled at a time, and with
every symbol tripled and quintupled. Each output dim (and stride) is fitted, first form that holds
at every point, as `c0 + c1*s0 + c2*s1 ...`; as `c * s0**k0 * s1**k1 ...` (flattens, square
dims); as one of the argument expressions, a sum, difference, product, min or max of two of them,
or one of them // or * an int argument (`F.pad` by a ceil-div amount, `b[:n]`, `view(n, -1, k)`);
as `(n*s + c) // d + b` in one symbol (strided convolutions and pools), guarded on the residue of
`n*s` mod d, on which that form is exact; a stride also as a product of the dims after it, or of
the dims inner to it in a permuted dense layout (channels-last). An op that fails when one symbol
alone changes (a static weight broadcast against a symbolic channel count) specializes that symbol
and fits the rest. When no form fits (or the op fails at the other sizes), the symbols involved are
specialized: guarded equal to their hints, so the graph stays right for every call its guards admit.
Comparisons decided on sizes are kept as facts (`s0 <= 64`): when the runs at all the sizes do not
fit, the fit is tried on the sizes the facts admit (a position buffer sliced to a checked length
is clamped only past the check), provided each symbol still changes alone and once with the others.
This is a heuristic: a piecewise size function that happens to agree with a simpler form at all of
these points would be fitted wrongly; per-op symbolic shape rules would remove that risk.

Python code may also use sizes (`x.shape[0]`, `len(x)`): those are `SymVar`s. Arithmetic keeps
them symbolic, comparisons and min/max decide at the hint and add a guard, a slice of a tensor keeps
its symbolic bounds, and any other use specializes.
"""


import sympy
import torch

from torchsmith.capture.errors import Unsupported
from torchsmith.capture.size_fit import Candidates, NoFit, expressions_in, fit_types, int_constants_in
from torchsmith.ir import Slice, TensorType, Value
from torchsmith.ir.symbolic import evaluate, symbol
from torchsmith.ir.types import SymIntType, contiguous_strides


class ShapeEnv:
    """The size symbols of one capture: their hints, where they come from, and their guards."""

    def __init__(self, guards, namespace):
        self.guards = guards
        self.ns = namespace
        self.hints: dict[sympy.Symbol, int] = {}
        self.origin: dict[sympy.Symbol, str] = {}  # symbol -> "L['x'].size(0)"
        self.specialized: set[sympy.Symbol] = set()
        # comparisons decided and guarded (`s0 <= 64`): sizes outside them never reach this graph
        self.facts: list = []
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
        self.facts.append(held)
        return value

    def admits(self, point: dict) -> bool:
        """Whether sizes `point` (symbol -> int) satisfy every guarded comparison."""
        return all(bool(fact.subs(point)) for fact in self.facts)

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
    points = [{s: env.hints[s] * (scale.get(s, 1) if scale else 1) for s in env.hints} for scale in runs]
    # Sizes the guards exclude never reach the graph, so what the op does there (a slice
    # `buf[:, :s0]` clamped at the buffer's length past `s0 <= 64`) need not fit: when all the
    # sizes do not, the fit is tried again on the admitted ones.
    kept = [i for i, p in enumerate(points) if i == 0 or env.admits(p)]
    if len(kept) == len(runs) or not _enough(kept, len(syms)):
        kept = None
    if any(r is None for r in results) and (kept is None or any(results[i] is None for i in kept)):
        # An op that fails when one symbol alone changes (a static weight broadcast against a
        # symbolic channel count) needs that symbol fixed, not the others: fit again without it.
        failing = [s for s, r in zip(syms, results[1:1 + len(syms)]) if r is None]
        if 0 < len(failing) < len(syms):
            for s in failing:
                env.specialize(s)
            return infer_symbolic(env, infer, args, kwargs)
        return _specialized(env, syms, results[0])
    candidates = lambda pts: Candidates(expressions_in((args, kwargs)), pts, int_constants_in((args, kwargs)))
    if not any(r is None for r in results):
        try:
            return fit_types(results, syms, env, candidates(points))
        except NoFit:
            if kept is None:
                return _specialized(env, syms, results[0])
    try:
        return fit_types([results[i] for i in kept], syms, env, candidates([points[i] for i in kept]))
    except NoFit:
        return _specialized(env, syms, results[0])


def _enough(kept: list[int], n_syms: int) -> bool:
    """Whether the admitted runs still fit every symbol: the hints, each symbol changed alone (its
    doubling) and once more with the others, so a dim that follows a symbol is not fitted as a
    constant or as another symbol."""
    return kept[: n_syms + 1] == list(range(n_syms + 1)) and len(kept) >= n_syms + 2


def _specialized(env: ShapeEnv, syms, structure):
    for s in syms:
        env.specialize(s)
    return structure
