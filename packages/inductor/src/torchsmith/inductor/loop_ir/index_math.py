"""Index arithmetic for the scheduler: recover per-dim indices from a flat load index.

The loop IR stores flat element offsets (`1024*i0 + r0`). To inline a producer into a consumer, or to
check that a fused consumer reads only what the current outer iteration wrote, the scheduler needs the
producer's per-dim indices `(i0, r0)`. Recovering them with floordiv/mod is always correct but leaves
index arithmetic in inner loops (and sympy cannot fold it back without the variables' ranges), so
`split_index` instead reads the flat index as a sum of `coefficient * variable` terms and gives each
term to the dim whose stride divides it, checking with the variables' ranges that no dim can overflow
into the next (no carries): then the split is exact and every index stays affine.
"""

from functools import lru_cache

import sympy

from torchsmith.inductor.loop_ir.elementwise_ops import EXPENSIVE_OPS
from torchsmith.inductor.loop_ir.program import (
    ComputedBuffer,
    Expr,
    IndexValue,
    Indirect,
    Load,
    Op,
    index_vars,
    is_loop_var_name,
    reduction_vars,
)
from torchsmith.ir.symbolic import compare
from torchsmith.ir.types import contiguous_strides


def variable_ranges(buffer: ComputedBuffer) -> dict[sympy.Symbol, object]:
    """The range of each loop variable of `buffer`'s body (`i<k>` and, for a reduction, `r<k>`)."""
    body = buffer.body
    ranges = dict(zip(index_vars(len(body.ranges)), body.ranges))
    reduction_ranges = getattr(body, "reduction_ranges", ())
    ranges.update(zip(reduction_vars(len(reduction_ranges)), reduction_ranges))
    return ranges


def _quotient(term, stride):
    """`term / stride` when stride divides term (a polynomial with integer coefficients), else None."""
    q = sympy.cancel(sympy.sympify(term) / sympy.sympify(stride))
    if q.is_Integer:
        return q
    if sympy.fraction(q)[1] != 1 or not q.free_symbols:
        return None
    try:
        coefficients = sympy.Poly(q, *sorted(q.free_symbols, key=str)).coeffs()
    except sympy.PolynomialError:
        return None
    return q if all(c.is_Integer for c in coefficients) else None


_PYTHON_COMPARE = {"<=": int.__le__, ">=": int.__ge__, ">": int.__gt__, "==": int.__eq__}


def _holds(op: str, a, b) -> bool:
    a, b = sympy.sympify(a), sympy.sympify(b)
    if a.is_Integer and b.is_Integer:  # the common static case, without sympy's relational machinery
        return _PYTHON_COMPARE[op](int(a), int(b))
    return compare(op, sympy.expand(a), sympy.expand(b)) is True


def split_index(index, shape, strides, ranges: dict) -> tuple | None:
    """The per-dim indices `(j0, j1, ...)` with `index == sum(j_k * strides[k])` for every value of the
    loop variables in `ranges` (`{var: size}`), each `0 <= j_k < shape[k]` and affine; None when no
    such exact split exists (a carry between dims, a non-affine index, an unknown variable).

    >>> split_index(1024*i0 + r0, (256, 1024), (1024, 1), {i0: 256, r0: 1024})  # doctest: +SKIP
    (i0, r0)
    """
    # Cached: inlining asks twice per load site (decide, then rewrite), grouping once more.
    return _split_index(sympy.sympify(index), tuple(shape), tuple(strides), tuple(ranges.items()))


@lru_cache(maxsize=4096)
def _split_index(index, shape, strides, ranges_items) -> tuple | None:
    ranges = dict(ranges_items)
    strides = tuple(strides)
    dims = _dense_order(shape, strides)
    if dims is None:
        return None  # only dense buffers (row-major, channels-last, any permutation): ordered by stride
    # A variable of a one-iteration loop is 0: dropped, it cannot land in another dim (`512*i0` of a
    # [1, 2, 16, 16] buffer is not `2*i0` of dim 1).
    unit = {v: 0 for v, size in ranges.items() if size == 1}
    index = sympy.expand(sympy.sympify(index).xreplace(unit))
    index, clamps = _name_clamps(index, ranges)
    if index is None:
        return None
    ranges.update((name, hi + 1) for name, (_, hi) in clamps.items())
    loop_vars = [s for s in index.free_symbols if is_loop_var_name(s.name) or s in clamps]
    if any(v not in ranges for v in loop_vars):
        return None
    terms = []  # (quotient-to-be-assigned term, its largest value)
    rest = index
    for v in loop_vars:
        coefficient = index.coeff(v, 1)
        if coefficient == 0 or coefficient.free_symbols & set(loop_vars):
            return None
        terms.append((coefficient, v, ranges[v]))
        rest = rest - coefficient * v
    rest = sympy.expand(rest)
    if rest.free_symbols & set(loop_vars):
        return None  # floordiv/mod of a loop variable, or a product of two
    parts: list = [sympy.Integer(0)] * len(shape)
    largest: list = [sympy.Integer(0)] * len(shape)
    constants: list = [sympy.Integer(0)] * len(shape)
    for coefficient, v, size in terms:
        for k in dims:
            q = _quotient(coefficient, strides[k])
            if q is not None:
                if not _holds(">", q, 0):
                    return None
                parts[k] += q * v
                largest[k] += q * (size - 1)
                break
        else:
            return None
    constant_terms = [rest] if rest.is_Integer else list(sympy.Add.make_args(rest))
    for term in constant_terms:
        if term == 0:
            continue
        for k in dims:
            if term.is_Integer and strides[k] != 0 and sympy.sympify(strides[k]).is_Integer:
                q = sympy.Integer(int(term) // int(strides[k]))
                if q == 0:
                    continue
                term = term - q * strides[k]
                parts[k] += q
                largest[k] += q
                constants[k] += q
                if term == 0:
                    break
                continue
            q = _quotient(term, strides[k])
            if q is not None:
                parts[k] += q
                largest[k] += q
                constants[k] += q
                break
        else:
            if term != 0:
                return None
    for k, d in enumerate(shape):
        if not _holds("<=", largest[k], sympy.sympify(d) - 1):
            return None  # this dim can overflow into the next one: the split would be wrong
        if not _holds(">=", constants[k], 0):
            return None
    back = {name: atom for name, (atom, _) in clamps.items()}
    return tuple(sympy.expand(p).xreplace(back) for p in parts)


def _dense_order(shape, strides) -> list[int] | None:
    """The dims of size other than 1 from the largest stride to the smallest, where the strides are
    those of a dense buffer stored in that order (row-major: the dims in order; channels-last: N, H,
    W, C); None for any other layout (gaps, overlaps, symbolic strides out of order)."""
    dims = [k for k, d in enumerate(shape) if d != 1]
    row_major = contiguous_strides(tuple(shape))
    if all(_holds("==", strides[k], row_major[k]) for k in dims):
        return dims
    if not all(sympy.sympify(strides[k]).is_Integer and sympy.sympify(shape[k]).is_Integer for k in dims):
        return None
    order = sorted(dims, key=lambda k: -int(strides[k]))
    expected = 1
    for k in reversed(order):
        if int(strides[k]) != expected:
            return None
        expected *= int(shape[k])
    return order


def _name_clamps(index, ranges: dict) -> tuple:
    """`index` with each clamped term (`Min(7, i3)`, `Max(0, i3 - 8)`: how cat and padding read their
    inputs) named by a fresh variable, and `{name: (term, largest value)}`; the split then treats
    such a term like a loop variable of that range, exact because the term is an integer in it.
    (None, {}) when a clamp can go negative or its bounds are not static."""
    clamps: dict = {}
    found = index.atoms(sympy.Min, sympy.Max)
    # only the outermost clamps: `Min(15, i2 - 1)` inside `Max(0, Min(15, i2 - 1))` goes negative,
    # the whole term does not
    atoms = sorted((a for a in found if not any(a != b and b.has(a) for b in found)), key=str)
    for n, atom in enumerate(atoms):
        if not {s for s in atom.free_symbols if is_loop_var_name(s.name)}:
            continue
        bounds = _bounds(atom, ranges)
        if bounds is None or bounds[0] < 0:
            return None, {}
        name = sympy.Symbol(f"clamp_{n}", integer=True, nonnegative=True)
        clamps[name] = (atom, bounds[1])
    return index.xreplace({atom: name for name, (atom, _) in clamps.items()}), clamps


def _bounds(expr, ranges: dict) -> tuple[int, int] | None:
    """The least and largest integer value of `expr` (sums, integer multiples, Min and Max of loop
    variables with static ranges) over those ranges; None for anything else."""
    if expr.is_Integer:
        return int(expr), int(expr)
    if expr.is_Symbol:
        size = ranges.get(expr)
        size = sympy.sympify(size) if size is not None else None
        return (0, int(size) - 1) if size is not None and size.is_Integer and size > 0 else None
    if expr.is_Add or isinstance(expr, sympy.Min | sympy.Max):
        parts = [_bounds(a, ranges) for a in expr.args]
        if any(p is None for p in parts):
            return None
        if expr.is_Add:
            return sum(p[0] for p in parts), sum(p[1] for p in parts)
        pick = min if isinstance(expr, sympy.Min) else max
        return pick(p[0] for p in parts), pick(p[1] for p in parts)
    if expr.is_Mul:
        factor, rest = expr.as_coeff_Mul()
        inner = _bounds(rest, ranges) if factor.is_Integer and factor != 1 else None
        if inner is None:
            return None
        ends = (int(factor) * inner[0], int(factor) * inner[1])
        return min(ends), max(ends)
    return None


# Library calls (elementwise_ops.EXPENSIVE_OPS) cost several simple arithmetic ops even when vectorized:
# recomputing exp(x - max) in softmax's division loop costs more than storing it once per row.
EXPENSIVE_OP_COST = 4


def count_ops(expr: Expr) -> int:
    """The cost of evaluating `expr` once, in simple arithmetic ops (a library call such as `exp`
    counts EXPENSIVE_OP_COST): what inlining duplicates per extra load site."""
    if isinstance(expr, Op):
        own = EXPENSIVE_OP_COST if expr.op in EXPENSIVE_OPS else 1
        return own + sum(count_ops(a) for a in expr.args)
    if isinstance(expr, Indirect):
        return 1 + count_ops(expr.value) + count_ops(expr.body)
    return 0


def distinct_loads(expr: Expr, buffer: str) -> list[Load]:
    """The distinct loads of `buffer` in `expr` (code generation computes a repeated one once)."""
    from torchsmith.inductor.loop_ir.program import loads

    return list(dict.fromkeys(ld for ld in loads(expr) if ld.buffer == buffer))


def index_expressions(expr: Expr) -> list[sympy.Expr] | None:
    """Every index expression in `expr` (loads and index values), expanded; None when it holds an
    indirect load, whose variables are bound by data."""
    found: list[sympy.Expr] = []

    def visit(e) -> bool:
        if isinstance(e, Indirect):
            return False
        if isinstance(e, Load):
            found.append(sympy.expand(sympy.sympify(e.index)))
        elif isinstance(e, IndexValue):
            found.append(sympy.expand(sympy.sympify(e.expr)))
        return all(visit(a) for a in getattr(e, "args", ()))

    return found if visit(expr) else None


def reads_as_one_run(indices, outer: sympy.Symbol, inner: sympy.Symbol, inner_range) -> bool:
    """Whether every index reads loop variables `outer` and `inner` as one run: linear in both, with
    `outer`'s coefficient `inner_range` times `inner`'s (H and W of NCHW data are one run of H*W), so
    the two loops can be one."""
    for index in indices:
        a, b = index.coeff(outer), index.coeff(inner)
        if (a.free_symbols | b.free_symbols) & {outer, inner}:
            return False
        if sympy.expand(index - a * outer - b * inner).free_symbols & {outer, inner}:
            return False
        if sympy.expand(a - b * inner_range) != 0:
            return False
    return True
