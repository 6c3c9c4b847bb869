"""Symbolic sizes: lower a graph whose input types carry size symbols (`f32[s0, 64]`) once for all sizes.

Meta tensors need concrete sizes, so the graph is lowered at the example inputs' sizes and at
n + 1 other points for n symbols (`hint_points`: every symbol doubled, then each one tripled in
turn; scaling keeps any divisibility the program relies on). The results must have the same
structure; every int that differs between them (in a type, an argument or an output view) is
re-expressed over the symbols (`_Fitter`: a monomial, `a*m + b`, `(n*m) // d + b`, or an integer
sum of monomials such as `s0 + s1`) and checked at every point. A floor division only fits because
the points keep `n*m` divisible by `d`: the lowering records that as a size condition the runtime
checks before reusing the program at other sizes.

When anything differs in structure (a size-dependent branch), does not fit, or a symbol is 0 or 1
in the example (those are always specialized), `lower_symbolic` returns None and the caller lowers
for the concrete sizes instead, which is always correct.

Symbols the backward needs but cannot read from its tensor inputs' shapes are passed to it as
saved ints (`aten.sym_size.int` in the forward).

Limits: the only size guards are "every symbol >= 2", the size conditions and the input shapes;
behaviour that the hint points agree on but smaller sizes would change (a constant slice bound past
the end of a short dimension) is not guarded. ATen still computes the right values there, but
declared types can be off.
"""

import dataclasses
import itertools
from fractions import Fraction

import sympy
import torch

from torchsmith.autograd_aot.errors import AotAutogradError
from torchsmith.autograd_aot.pipeline import Lowered, emit_graphs, lower
from torchsmith.autograd_aot.trace import OutputSpec
from torchsmith.ir import ArgList, Graph, Node, Slice, SymIntType, TensorType, Value, evaluate, symbol
from torchsmith.ir.interpreter import bind_symbols
from torchsmith.ir.symbolic import FloorDiv, floordiv


class _NoFit(Exception):
    """The lowered graphs differ in a way that is not an affine function of the symbols."""


def input_symbols(graph: Graph) -> dict[str, tuple[int, int]]:
    """Each bare size symbol of the graph's tensor inputs -> (input index, dim) where it first appears."""
    found: dict[str, tuple[int, int]] = {}
    for i, value in enumerate(graph.inputs):
        if isinstance(value.type, TensorType):
            for d, dim in enumerate(value.type.shape):
                if isinstance(dim, sympy.Symbol):
                    found.setdefault(dim.name, (i, d))
    return found


def hint_points(bindings: dict[str, int], names: list[str]) -> list[dict[str, int]]:
    """The sizes each lowering runs at: the example's, every symbol doubled, then each symbol in turn
    tripled with the others doubled. The points are affinely independent (their offsets from the
    doubled point are unit vectors), so a linear function of n symbols is pinned down by n + 1 of them
    and checked on the rest; scaling keeps any divisibility the program relies on."""
    points = [{n: bindings[n] for n in names}, {n: 2 * bindings[n] for n in names}]
    for tripled in names:
        points.append({n: (3 if n == tripled else 2) * bindings[n] for n in names})
    return points


def _solve(rows: list[list[Fraction]], rhs: list[Fraction]) -> list[Fraction] | None:
    """The exact solution of a square linear system, or None when it is singular."""
    n = len(rows)
    m = [list(r) + [b] for r, b in zip(rows, rhs)]
    for col in range(n):
        pivot = next((r for r in range(col, n) if m[r][col] != 0), None)
        if pivot is None:
            return None
        m[col], m[pivot] = m[pivot], m[col]
        for r in range(n):
            if r != col and m[r][col] != 0:
                factor = m[r][col] / m[col][col]
                m[r] = [a - factor * b for a, b in zip(m[r], m[col])]
    return [m[i][n] / m[i][i] for i in range(n)]


class _Fitter:
    """Re-expresses the ints of the lowerings at the hint points as expressions over the symbols.

    Forms tried, simplest first, each checked at every point: one monomial (`s0`, `s0*s1`), an
    affine function of one monomial (`2*s0 + 1`, or `(n*s0) // d + b`), then an integer linear
    combination of several monomials (`s0 + s1`, from a cat) when the points leave a check over.
    A floor division is exact at the points only because every point keeps `n*m` divisible by `d`;
    it is recorded in `conditions` (`n*m % d == 0`) for the runtime to check before reuse."""

    def __init__(self, hints: list[dict[str, int]]):
        self.hints = hints
        names = sorted(hints[0])
        # up to degree 4: the strides and element counts of 4-d tensors whose every dim is a symbol
        monomials = [m for degree in range(1, 5)
                     for m in itertools.combinations_with_replacement(names, degree)]
        self.monomials = [
            (sympy.Mul(*(symbol(n) for n in m)), [self._value(m, h) for h in hints]) for m in monomials
        ]
        self.linear = self.monomials[: len(names)]
        self.cache: dict[tuple[int, ...], object] = {}
        self.conditions: set[tuple[object, int]] = set()

    @staticmethod
    def _value(monomial, hint) -> int:
        result = 1
        for name in monomial:
            result *= hint[name]
        return result

    def fit(self, values: tuple[int, ...]):
        if values in self.cache:
            return self.cache[values]
        result = self._exact(values)
        if result is None:
            result = self._affine(values)
        if result is None:
            result = self._combination(values)
        if result is None:
            raise _NoFit(f"size {values[0]} is not an affine function of the symbols")
        self.cache[values] = result
        return result

    def _exact(self, values):
        return next((expr for expr, m in self.monomials if tuple(m) == values), None)

    def _affine(self, values):
        for expr, m in self.monomials:
            if m[1] == m[0]:
                continue
            a = Fraction(values[1] - values[0], m[1] - m[0])
            b = values[0] - a * m[0]
            if a == 0 or b.denominator != 1 or any(a * mi + b != v for mi, v in zip(m, values)):
                continue
            if a.denominator == 1:
                return int(a) * expr + int(b)
            if all((a.numerator * mi) % a.denominator == 0 for mi in m):
                self.conditions.add((a.numerator * expr, a.denominator))
                return floordiv(a.numerator * expr, a.denominator) + int(b)
        return None

    def _combination(self, values):
        """An integer linear combination of the linear monomials (a constant included), solved on
        the first points and checked on the others; then of any two monomials."""
        candidates = [self.linear] + [list(pair) for pair in itertools.combinations(self.monomials, 2)]
        for terms in candidates:
            unknowns = len(terms) + 1
            if len(terms) < 2 or len(self.hints) <= unknowns:
                continue  # no point would be left to check the fit
            rows = [[Fraction(m[i]) for _, m in terms] + [Fraction(1)] for i in range(unknowns)]
            solution = _solve(rows, [Fraction(v) for v in values[:unknowns]])
            if solution is None or any(c.denominator != 1 for c in solution):
                continue
            coeffs = [int(c) for c in solution]
            if any(sum(c * m[i] for c, (_, m) in zip(coeffs, terms)) + coeffs[-1] != v
                   for i, v in enumerate(values)):
                continue
            return sum(c * expr for c, (expr, _) in zip(coeffs, terms)) + coeffs[-1]
        return None


def _piecewise_expressions(graph: Graph) -> list:
    """The size expressions of the torch-level graph that rounding, `%`, min or max make
    piecewise (`8*((s0 + 7) // 8)` from padding up to a multiple of 8)."""
    found: dict = {}

    def visit(arg):
        if isinstance(arg, sympy.Expr):
            if arg.free_symbols and arg.has(FloorDiv, sympy.Mod, sympy.Min, sympy.Max):
                found.setdefault(arg, None)
        elif isinstance(arg, Value):
            t = arg.type
            if isinstance(t, TensorType):
                visit(t.shape + t.strides)
            elif isinstance(t, SymIntType):
                visit(t.expr)
        elif isinstance(arg, Slice):
            visit((arg.start, arg.stop, arg.step))
        elif isinstance(arg, tuple):
            for a in arg:
                visit(a)

    for node in graph.nodes:
        visit(node.args)
        visit(tuple(v for _, v in node.kwargs))
        visit(node.outputs)
    return list(found)


def _blind_to(expr, hints: list[dict[str, int]]) -> bool:
    """Whether the hint points cannot see how `expr` varies: every point is a multiple of the
    example's sizes, so `8*((s0 + 7) // 8)` at s0 = 16, 32, 48 looks like `s0`. The fit of its values
    at the points is compared with `expr` at nearby sizes the fit's own conditions admit."""
    if not {str(sym) for sym in expr.free_symbols} <= set(hints[0]):
        return False
    at = lambda point: evaluate(expr, point)
    values = tuple(at(h) for h in hints)
    probe = _Fitter(hints)
    try:
        fitted = values[0] if len(set(values)) == 1 else probe.fit(values)
    except _NoFit:
        return False  # nothing fits: a size that needs it makes the whole lowering fail instead
    base = hints[0]
    for name in base:
        for step in range(1, 13):
            point = dict(base, **{name: base[name] + step})
            if any(evaluate(e, point) % d for e, d in probe.conditions):
                continue
            if evaluate(fitted, point) != at(point):
                return True
    return False


def _merge(first, others: list, fitter: _Fitter):
    """`first` with every int that differs in `others` replaced by its symbolic expression."""
    if isinstance(first, bool) or first is None or not isinstance(first, (int, Value, TensorType, SymIntType,
                                                                          tuple, Slice, Node, OutputSpec)):
        if any(o != first for o in others):
            raise _NoFit(f"{first!r} differs between hint sizes")
        return first
    if any(type(o) is not type(first) for o in others):
        raise _NoFit("structure differs between hint sizes")
    if isinstance(first, int):
        values = (first, *others)
        return first if len(set(values)) == 1 else fitter.fit(values)
    if isinstance(first, Value):
        if any(o.name != first.name for o in others):
            raise _NoFit(f"value %{first.name} differs between hint sizes")
        return Value(first.name, _merge(first.type, [o.type for o in others], fitter))
    if isinstance(first, TensorType):
        key = lambda t: (t.dtype, t.device, t.requires_grad, t.rank)
        if any(key(o) != key(first) for o in others):
            raise _NoFit("tensor types differ between hint sizes")
        shape = _merge(first.shape, [o.shape for o in others], fitter)
        strides = _merge(first.strides, [o.strides for o in others], fitter)
        return TensorType(shape, first.dtype, first.device, strides, first.requires_grad)
    if isinstance(first, SymIntType):
        return SymIntType(_merge(first.expr, [o.expr for o in others], fitter))
    if isinstance(first, tuple):
        if any(len(o) != len(first) for o in others):
            raise _NoFit("argument lists differ in length between hint sizes")
        items = [_merge(x, [o[i] for o in others], fitter) for i, x in enumerate(first)]
        return ArgList(items) if isinstance(first, ArgList) else tuple(items)
    if isinstance(first, Slice):
        fields = ("start", "stop", "step")
        return Slice(*(_merge(getattr(first, f), [getattr(o, f) for o in others], fitter) for f in fields))
    if isinstance(first, Node):
        if any(o.op != first.op for o in others):
            raise _NoFit(f"{first.op} differs between hint sizes")
        return Node(first.op, _merge(first.args, [o.args for o in others], fitter),
                    _merge(first.kwargs, [o.kwargs for o in others], fitter),
                    _merge(first.outputs, [o.outputs for o in others], fitter), first.source)
    # OutputSpec: the chain of view nodes may hold sizes.
    if any((o.kind, o.index, o.value) != (first.kind, first.index, first.value) for o in others):
        raise _NoFit("output structure differs between hint sizes")
    chains = [tuple(node for node, _ in o.chain) for o in others]
    nodes = _merge(tuple(node for node, _ in first.chain), chains, fitter)
    if any(o.grad_enabled != first.grad_enabled for o in others):
        raise _NoFit("output structure differs between hint sizes")
    return OutputSpec(first.kind, first.index, tuple(zip(nodes, (i for _, i in first.chain))), first.value,
                      first.grad_enabled)


def _merge_graph(first: Graph, others: list[Graph], fitter: _Fitter) -> Graph:
    return first.replace(
        inputs=_merge(first.inputs, [g.inputs for g in others], fitter),
        nodes=_merge(first.nodes, [g.nodes for g in others], fitter),
        outputs=_merge(first.outputs, [g.outputs for g in others], fitter),
    )


def _hint_inputs(graph: Graph, example_inputs, hint: dict[str, int]) -> list:
    inputs = []
    for value, x in zip(graph.inputs, example_inputs):
        t = value.type
        if isinstance(t, TensorType):
            shape = [evaluate(d, hint) for d in t.shape]
            strides = [evaluate(s, hint) for s in t.strides]
            meta = torch.empty_strided(shape, strides, dtype=x.dtype, device="meta")
            inputs.append(meta.requires_grad_(x.requires_grad))
        elif isinstance(t, SymIntType):
            inputs.append(evaluate(t.expr, hint))
        else:
            inputs.append(x)
    return inputs


def _bindable(graph_inputs) -> set[str]:
    """Symbols the interpreter can read off these inputs (bare dims and SymInt inputs)."""
    names = set()
    for v in graph_inputs:
        dims = v.type.shape + v.type.strides if isinstance(v.type, TensorType) else (
            (v.type.expr,) if isinstance(v.type, SymIntType) else ())
        names.update(d.name for d in dims if isinstance(d, sympy.Symbol))
    return names


def _used_symbols(graph: Graph) -> set[str]:
    used = set()
    for v in graph.values():
        used |= set(v.type.free_symbols)
    return used


def _pass_symbols_to_backward(lowered: Lowered, symbols: dict[str, tuple[int, int]]) -> Lowered:
    """Save the symbols the backward cannot read from its own inputs as ints."""
    if lowered.backward is None:
        return lowered
    missing = sorted(_used_symbols(lowered.backward) - _bindable(lowered.backward.inputs))
    if not missing:
        return lowered
    forward, backward = lowered.forward, lowered.backward
    taken = {v.name for g in (forward, backward) for v in g.values()}
    nodes, saved = list(forward.nodes), []
    for name in missing:
        index, dim = symbols[name]
        out_name = next(f"{name}_size{'' if n == 0 else n}" for n in itertools.count() if
                        f"{name}_size{'' if n == 0 else n}" not in taken)
        value = Value(out_name, SymIntType(symbol(name)))
        nodes.append(Node("aten.sym_size.int", (forward.inputs[index], dim), (), (value,)))
        saved.append(value)
    split = lowered.num_saved
    forward = forward.replace(nodes=tuple(nodes), outputs=forward.outputs + tuple(saved))
    backward = backward.replace(inputs=backward.inputs[:split] + tuple(saved) + backward.inputs[split:])
    num_saved = split + len(saved)
    return dataclasses.replace(lowered, forward=forward, backward=backward, num_saved=num_saved)


def lower_symbolic(graph: Graph, example_inputs, *, training: bool, decompose=None) -> Lowered | None:
    """Lower `graph` once for every value of its size symbols, or None when that is not possible
    (see the module docstring); the caller then lowers for the concrete sizes."""
    symbols = input_symbols(graph)
    try:
        bindings = bind_symbols(graph, example_inputs)
    except Exception:
        return None
    if not symbols or any(bindings.get(name, 0) < 2 for name in symbols):
        return None
    hints = hint_points(bindings, sorted(symbols))
    for value, x in zip(graph.inputs, example_inputs):
        if isinstance(value.type, TensorType) and [evaluate(s, bindings) for s in value.type.strides] != list(
            x.stride()
        ):
            return None  # the trace at other sizes would not see the example's layout
    if any(_blind_to(expr, hints) for expr in _piecewise_expressions(graph)):
        return None  # lowerings at these points cannot tell the rounding apart: lower for these sizes
    device = next((str(x.device) for x in example_inputs if isinstance(x, torch.Tensor)), "cpu")
    try:
        first = lower(graph, example_inputs, training=training, decompose=decompose, emit_events=False)
        saved = [v.name for v in first.forward.outputs[len(first.forward.outputs) - first.num_saved:]]
        others = [
            lower(graph, _hint_inputs(graph, example_inputs, hint), training=training, decompose=decompose,
                  device=device, saved_names=saved if first.backward is not None else None,
                  emit_events=False)
            for hint in hints[1:]
        ]
        fitter = _Fitter(hints)
        if any(o.mutated_inputs != first.mutated_inputs or (o.backward is None) != (first.backward is None)
               or o.traced.differentiable_outputs != first.traced.differentiable_outputs for o in others):
            raise _NoFit("programs differ between hint sizes")
        forward = _merge_graph(first.forward, [o.forward for o in others], fitter)
        backward = None
        if first.backward is not None:
            backward = _merge_graph(first.backward, [o.backward for o in others], fitter)
        specs = _merge(first.traced.output_specs, [o.traced.output_specs for o in others], fitter)
    except (_NoFit, AotAutogradError):
        return None
    if first.traced.metadata_mutations:
        return None  # the in-place shape changes hold sizes too: lowered at concrete sizes
    traced = dataclasses.replace(first.traced, output_specs=specs)
    conditions = tuple(sorted(fitter.conditions, key=str))
    lowered = Lowered(traced, first.mutated_inputs, forward, backward, first.num_saved, first.report,
                      functional=first.functional, decomposed=first.decomposed, size_conditions=conditions)
    lowered = _pass_symbols_to_backward(lowered, symbols)
    emit_graphs(lowered)  # the hint-size lowerings above stayed quiet: observers see the merged graphs
    return lowered

