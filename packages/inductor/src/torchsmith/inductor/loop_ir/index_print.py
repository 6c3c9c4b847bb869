"""One printer for the integer index and size expressions of the loop IR, with a table of operator
spellings per target language: `print_index(expr, CPP_INDEX)`, `print_index(expr, TRITON_INDEX)`.

Indices and sizes are non-negative, so a language's truncating integer division is floor division
there, and `%` is the floor modulo.
"""

from dataclasses import dataclass

import sympy

from torchsmith.inductor.errors import CodegenError
from torchsmith.ir.symbolic import FloorDiv, format_dim


@dataclass(frozen=True, slots=True)
class IndexSyntax:
    """How one language spells the operators of index expressions: infix `floordiv` and `mod`,
    functions `max` and `min` of two arguments."""

    language: str
    floordiv: str
    mod: str
    max: str
    min: str


CPP_INDEX = IndexSyntax("C++", floordiv="/", mod="%", max="ts::imax", min="ts::imin")
TRITON_INDEX = IndexSyntax("Triton", floordiv="//", mod="%", max="tl.maximum", min="tl.minimum")


def print_index(expr, syntax: IndexSyntax) -> str:
    """`expr` (a sympy integer expression over loop variables and size symbols) in `syntax`'s
    language; raises `CodegenError` for an operator the loop IR's indices do not use.

    >>> print_index(FloorDiv(i0, 4) + 2 * s0, TRITON_INDEX)   # doctest: +SKIP
    '((i0 // 4) + (2 * s0))'
    """
    expr = sympy.sympify(expr)
    if expr.is_Integer:
        return str(int(expr))
    if expr.is_Symbol:
        return expr.name
    if isinstance(expr, sympy.Add):
        return "(" + " + ".join(print_index(a, syntax) for a in expr.args) + ")"
    if isinstance(expr, sympy.Mul):
        return "(" + " * ".join(print_index(a, syntax) for a in expr.args) + ")"
    if isinstance(expr, FloorDiv):
        return f"({print_index(expr.args[0], syntax)} {syntax.floordiv} {print_index(expr.args[1], syntax)})"
    if isinstance(expr, sympy.Mod):
        return f"({print_index(expr.args[0], syntax)} {syntax.mod} {print_index(expr.args[1], syntax)})"
    if isinstance(expr, (sympy.Max, sympy.Min)):
        fn = syntax.max if isinstance(expr, sympy.Max) else syntax.min
        out = print_index(expr.args[0], syntax)
        for a in expr.args[1:]:
            out = f"{fn}({out}, {print_index(a, syntax)})"
        return out
    if isinstance(expr, sympy.Pow) and expr.exp.is_Integer and expr.exp > 0:
        return "(" + " * ".join([print_index(expr.base, syntax)] * int(expr.exp)) + ")"
    raise CodegenError(f"cannot print index expression {format_dim(expr)} in {syntax.language}")
