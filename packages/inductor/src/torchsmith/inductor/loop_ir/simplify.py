"""Local rewrites of element expressions that drop operations with no effect on the value.

Lowerings write ops as the prims say: `iota` is `index * step + start` (`* 1 + 0` for arange),
`masked_fill` of a bool mask built by `where(c, True, False)`. Dropped here, such a producer costs
nothing (or a compare): the inliner then computes a causal mask from the loop indices inside the
softmax's loops instead of storing it and loading it back.

Each rule is (op, rewrite): `rewrite(op)` returns the simpler expression or None. Every rule keeps
the value bit for bit, including -0.0 and nan: a float `x + 0` is not `x` (-0.0 + 0 is +0.0), so the
additive rules apply to integers only; `x * 1` and `x / 1` are exact for every float.
"""

import torch

from torchsmith.inductor.loop_ir.program import Constant, Expr, Indirect, Op


def _is_const(expr: Expr, value) -> bool:
    # True == 1 in Python: a bool constant only matches a bool value.
    return (
        isinstance(expr, Constant)
        and isinstance(expr.value, bool) == isinstance(value, bool)
        and (expr.value == value)
    )


def _exact_int(op: Op) -> bool:
    return not op.dtype.is_floating_point and not op.dtype.is_complex


def _same_dtype(op: Op, arg: Expr) -> bool:
    return arg.dtype == op.dtype


def _add(op: Op):
    a, b = op.args
    if not _exact_int(op):
        return None
    if _is_const(b, 0) and _same_dtype(op, a):
        return a
    if _is_const(a, 0) and _same_dtype(op, b):
        return b
    return None


def _sub(op: Op):
    a, b = op.args
    return a if _exact_int(op) and _is_const(b, 0) and _same_dtype(op, a) else None


def _mul(op: Op):
    a, b = op.args
    if _is_const(b, 1) and _same_dtype(op, a) and op.dtype != torch.bool:
        return a
    if _is_const(a, 1) and _same_dtype(op, b) and op.dtype != torch.bool:
        return b
    return None


def _div(op: Op):
    a, b = op.args
    return a if op.dtype.is_floating_point and _is_const(b, 1) and _same_dtype(op, a) else None


def _where(op: Op):
    c, a, b = op.args
    if op.dtype != torch.bool or c.dtype != torch.bool:
        return None
    if _is_const(a, True) and _is_const(b, False):
        return c
    if _is_const(a, False) and _is_const(b, True):
        return Op("bitwise_not", (c,), torch.bool)
    return None


def _not(op: Op):
    (a,) = op.args
    if op.dtype == torch.bool and isinstance(a, Op) and a.op == "bitwise_not" and a.dtype == torch.bool:
        return a.args[0]
    return None


def _convert(op: Op):
    (a,) = op.args
    return a if a.dtype == op.dtype else None


RULES = {
    "add": _add, "sub": _sub, "mul": _mul, "div": _div, "where": _where, "bitwise_not": _not,
    "convert": _convert,
}  # fmt: skip


def simplify(expr: Expr) -> Expr:
    """`expr` with the no-op operations of `RULES` removed, bottom-up.

    >>> simplify(add(mul(index(i0):i64, 1:i64), 0:i64))  # doctest: +SKIP
    index(i0):i64
    """
    if isinstance(expr, Indirect):
        return Indirect(expr.var, simplify(expr.value), expr.size, simplify(expr.body))
    if not isinstance(expr, Op):
        return expr
    args = tuple(simplify(a) for a in expr.args)
    op = expr if args == expr.args else Op(expr.op, args, expr.dtype)
    rule = RULES.get(op.op)
    while rule is not None:
        simpler = rule(op)
        if simpler is None:
            break
        if not isinstance(simpler, Op):
            return simpler
        op, rule = simpler, RULES.get(simpler.op)
    return op
