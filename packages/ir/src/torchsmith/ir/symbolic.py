"""Symbolic integer expressions for shapes: symbols, + - * // %, min/max and comparisons.

A dimension is a plain `int` when it is known, or a sympy expression over integer symbols
(`s0`, `2*s0 + 1`) when it is not. Expressions are simplified by sympy as they are built and
printed in one canonical form, so two equal shapes print the same way::

    >>> s0 = symbol("s0")
    >>> format_dim(floordiv(2 * s0 + 2, 2))
    's0 + 1'
    >>> parse_dim("s0 * 4 % 2")
    0
"""

import ast
import functools
import keyword
import operator

import sympy
from sympy.printing.str import StrPrinter

from torchsmith.ir.errors import SymbolicError

Dim = int | sympy.Expr

# Bounds on what the expression reader does for one text, so a hostile file cannot make it hang or
# exhaust memory: its length, how deeply it nests, the exponent of a power and the size of every
# integer it meets (literal or computed). A shape or index never needs more.
MAX_EXPRESSION_CHARS = 4096
MAX_EXPRESSION_DEPTH = 250  # operators, brackets and signs together (a sum of n terms nests n deep)
MAX_BRACKET_DEPTH = 100  # brackets and runs of signs, checked before Python's parser runs
MAX_EXPONENT = 16
MAX_INTEGER_BITS = 128
MAX_SYMBOL_CHARS = 64
# Symbols become parameters of generated C++ functions: a keyword there would not compile.
_CODEGEN_RESERVED = frozenset(
    "auto bool break case char const continue default do double else enum extern float for goto if inline "
    "int long register return short signed sizeof static struct switch typedef union unsigned void "
    "volatile while class namespace template this new delete operator private public protected "
    "virtual true false nullptr".split()
)


def symbol(name: str) -> sympy.Symbol:
    """The size symbol `name`. Sizes are positive integers (0 and 1 are always specialized)."""
    reserved = keyword.iskeyword(name) or name in _CODEGEN_RESERVED
    well_formed = name.isascii() and name.isidentifier() and len(name) <= MAX_SYMBOL_CHARS
    if not well_formed or name.startswith("_") or reserved:
        shown = name if len(name) <= 40 else name[:40] + "..."
        raise SymbolicError(
            f"symbol name {shown!r} must be an identifier (ASCII, at most {MAX_SYMBOL_CHARS} characters) "
            "not starting with '_' and not a C++ or Python keyword"
        )
    return sympy.Symbol(name, integer=True, positive=True)


class FloorDiv(sympy.Function):
    """Python's `a // b` on integers, kept whole so it prints back as `a // b`."""

    is_integer = True

    @classmethod
    def eval(cls, a, b):
        if b == 0:
            raise SymbolicError(f"division by zero in {a} // 0")
        if a.is_Integer and b.is_Integer:
            return sympy.Integer(int(a) // int(b))
        if b == 1:
            return a
        return _exact_quotient(a, b)


def _exact_quotient(a, b):
    """`a / b` when it is an integer polynomial in integer-valued terms, else None.

    sympy's own `is_integer` is not trusted here: sympy 1.14 decides that any even expression
    divided by 6 is an integer (`(Max(6, 2*s0) / 6).is_integer` is True), which is wrong for s0 = 7.
    """
    integral_terms = (FloorDiv, sympy.Mod, sympy.Max, sympy.Min)
    # sympy.simplify costs milliseconds per call (a quarter second on its first): a quotient that
    # is already a polynomial over plain symbols is decided without it, as simplify would decide it.
    try:
        plain = sympy.Poly(a / b)
    except (sympy.polys.polyerrors.PolynomialError, sympy.polys.polyerrors.GeneratorsNeeded):
        plain = None
    if plain is not None and all(g.is_Symbol for g in plain.gens):
        return plain.as_expr() if all(c.is_Integer for c in plain.coeffs()) else None
    quotient = sympy.simplify(a / b)
    if quotient.is_number:
        return quotient if quotient.is_Integer else None
    try:
        poly = sympy.Poly(quotient)
    except sympy.polys.polyerrors.PolynomialError:
        return None
    integral_gens = all(g.is_Symbol or isinstance(g, integral_terms) for g in poly.gens)
    if integral_gens and all(c.is_Integer for c in poly.coeffs()) and quotient.is_integer:
        return quotient
    return None


def floordiv(a: Dim, b: Dim) -> Dim:
    """`a // b` on ints or symbolic dims."""
    return normalize_dim(FloorDiv(sympy.sympify(a), sympy.sympify(b)))


def mod(a: Dim, b: Dim) -> Dim:
    """`a % b` on ints or symbolic dims (non-negative operands, as sizes are)."""
    a, b = sympy.sympify(a), sympy.sympify(b)
    if b == 0:
        raise SymbolicError(f"division by zero in {a} % 0")
    risky = a.has(sympy.Max, sympy.Min, sympy.Mod) or b.has(sympy.Max, sympy.Min)
    if risky and not (a.is_Integer and b.is_Integer):
        # sympy 1.14's Mod simplification goes wrong here: it drops terms it believes divisible by b,
        # trusting the wrong `is_integer` of even max/min terms (see _exact_quotient), and it squares a
        # Mod factor of a product (Mod(s2*Mod(s1, s0), 4) -> Mod(s2*Mod(s1, s0)**2, 4)).
        # Decide divisibility ourselves, else keep a % b whole.
        if _exact_quotient(a, b) is not None:
            return 0
        return normalize_dim(sympy.Mod(a, b, evaluate=False))
    return normalize_dim(sympy.Mod(a, b))


def _fold_constant_min_max(expr):
    # sympy rewrites Max(Min(6, s0), Min(5, s0)) as Min(s0, Max(5, 6)) and leaves the constant
    # Max(5, 6) unevaluated, which neither prints back nor evaluates; fold such parts to ints.
    if not isinstance(expr, sympy.Basic):
        return expr
    constant = lambda e: isinstance(e, (sympy.Max, sympy.Min)) and e.is_number
    return expr.replace(constant, lambda e: e.func(*e.args)) if expr.has(sympy.Max, sympy.Min) else expr


def sym_max(*dims: Dim) -> Dim:
    return normalize_dim(_fold_constant_min_max(sympy.Max(*dims)))


def sym_min(*dims: Dim) -> Dim:
    return normalize_dim(_fold_constant_min_max(sympy.Min(*dims)))


def normalize_dim(value) -> Dim:
    """Return a plain int for anything integral and constant, else the sympy expression.

    Refuses floats, rationals and booleans: a dimension is always an integer.
    """
    if isinstance(value, bool):
        raise SymbolicError(f"a dimension must be an integer, got {value!r}")
    if isinstance(value, int):
        return value
    if isinstance(value, sympy.Expr):
        if value.is_Integer:
            return int(value)
        if value.is_number or value.is_integer is False or _has_fraction(value):
            raise SymbolicError(f"a dimension must be an integer expression, got {value}")
        return value
    raise SymbolicError(f"a dimension must be an int or a symbolic expression, got {value!r}")


def _has_fraction(expr: sympy.Expr) -> bool:
    """Whether `expr` holds a non-integer number or a division (`s0/2`, `1.5*s0`, `1/s0`)."""
    return any(not n.is_Integer for n in expr.atoms(sympy.Number)) or any(
        p.exp.is_negative for p in expr.atoms(sympy.Pow)
    )


def is_symbolic(value) -> bool:
    return isinstance(value, sympy.Basic) and not value.is_number


def free_symbols(value) -> frozenset[str]:
    """Names of the symbols an int, expression or relation depends on."""
    if isinstance(value, sympy.Basic):
        return frozenset(s.name for s in value.free_symbols)
    return frozenset()


def evaluate(value, bindings: dict[str, int]):
    """Substitute concrete values for symbols; returns an int (or bool for a relation)."""
    if isinstance(value, (int, bool)):
        return value
    missing = free_symbols(value) - bindings.keys()
    if missing:
        raise SymbolicError(f"cannot evaluate {format_dim(value)}: no value for {', '.join(sorted(missing))}")
    result = value.xreplace(
        {symbol(n): sympy.Integer(v) for n, v in bindings.items() if n in free_symbols(value)}
    )
    if result in (sympy.true, sympy.false):
        return bool(result)
    if not result.is_Integer:
        raise SymbolicError(f"{format_dim(value)} did not evaluate to an integer under {bindings}")
    return int(result)


_RELATIONS = {
    "==": sympy.Eq,
    "!=": sympy.Ne,
    "<": sympy.Lt,
    "<=": sympy.Le,
    ">": sympy.Gt,
    ">=": sympy.Ge,
}


_INT_RELATIONS = {
    "==": operator.eq,
    "!=": operator.ne,
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
}


def compare(op: str, a: Dim, b: Dim):
    """`a <op> b`: a Python bool when it is decided for all sizes, else a sympy relation."""
    if type(a) is int and type(b) is int and op in _INT_RELATIONS:
        # Static sizes, the common case: no sympy relation to build (a graph compares thousands).
        return _INT_RELATIONS[op](a, b)
    try:
        relation = _RELATIONS[op](sympy.sympify(a), sympy.sympify(b))
    except KeyError:
        raise SymbolicError(f"unknown comparison {op!r}; expected one of {' '.join(_RELATIONS)}") from None
    if relation in (sympy.true, sympy.false):
        return bool(relation)
    return relation


class _DimPrinter(StrPrinter):
    """sympy's printer, but with Python spelling: `a // b`, `a % b`, `max(a, b)`, `a == b`.

    Python's `//` and `%` bind like `*` and looser than unary minus, so their operands and the
    products they appear in are parenthesized where sympy's own precedence would drop the parentheses.
    """

    def parenthesize(self, item, level, strict=False):
        # sympy ranks a // b as a function call; it binds like *, so `(s0 // 2)**2` keeps its parentheses
        if isinstance(item, FloorDiv) and (50 < level or (not strict and 50 <= level)):
            return f"({self._print(item)})"
        return super().parenthesize(item, level, strict)

    def _operand(self, x, right: bool) -> str:
        text = self._print(x)
        plain = (x.is_Symbol or (x.is_Integer and x >= 0)) or isinstance(x, (sympy.Max, sympy.Min))
        if plain or (not right and isinstance(x, FloorDiv)):
            return text
        return f"({text})"

    def _print_FloorDiv(self, expr):
        a, b = expr.args
        return f"{self._operand(a, False)} // {self._operand(b, True)}"

    def _print_Mod(self, expr):
        a, b = expr.args
        return f"{self._operand(a, False)} % {self._operand(b, True)}"

    def _print_Mul(self, expr):
        # Printed text is read back left to right, and sympy distributes a number over a sum as soon
        # as the two meet (`3*(s0 + 1)` becomes `3*s0 + 3`), so sums go after the other factors, or
        # the whole product is parenthesized; `//` and `%` factors are always parenthesized.
        coeff, rest = expr.as_coeff_Mul()
        factors = rest.as_ordered_factors()
        sums = [f for f in factors if f.is_Add]
        others = [f for f in factors if not f.is_Add]
        if not any(isinstance(f, (FloorDiv, sympy.Mod)) for f in factors) and not (sums and coeff != 1):
            return super()._print_Mul(expr)
        product = "*".join(
            f"({self._print(f)})" if isinstance(f, (FloorDiv, sympy.Mod)) else self.parenthesize(f, 50)
            for f in others + sums
        )
        if coeff == 1:
            return product
        if not others:
            product = f"({product})"
        return ("-" if coeff == -1 else f"{self._print(coeff)}*") + product

    def _print_Max(self, expr):
        return "max(" + ", ".join(self._print(a) for a in expr.args) + ")"

    def _print_Min(self, expr):
        return "min(" + ", ".join(self._print(a) for a in expr.args) + ")"

    def _print_Relational(self, expr):
        op = {"==": "==", "!=": "!=", "<": "<", "<=": "<=", ">": ">", ">=": ">="}[expr.rel_op]
        return f"{self._print(expr.lhs)} {op} {self._print(expr.rhs)}"


_PRINTER = _DimPrinter()


@functools.lru_cache(maxsize=4096)
def _format_symbolic(expr) -> str:
    return _PRINTER.doprint(expr)


def format_dim(value) -> str:
    """The canonical text of a dim or relation: `4`, `s0`, `2*s0 + 1`, `s0 // 2`, `s0 >= 4`."""
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, int):
        return str(value)
    if isinstance(value, sympy.Basic):
        return _format_symbolic(value)
    raise SymbolicError(f"not a dimension: {value!r}")


_BINARY = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.FloorDiv: floordiv,
    ast.Mod: mod,
}
_COMPARE = {ast.Eq: "==", ast.NotEq: "!=", ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">="}


def _bounded(value, text: str):
    """`value`, or a SymbolicError when it is (or holds) an integer beyond MAX_INTEGER_BITS."""
    if isinstance(value, int):
        numbers = [value]
    else:
        numbers = value.atoms(sympy.Integer) if isinstance(value, sympy.Basic) else []
    if any(abs(int(n)).bit_length() > MAX_INTEGER_BITS for n in numbers):
        raise _too_large(text)
    return value


def _too_large(text: str) -> SymbolicError:
    return SymbolicError(f"symbolic expression {_shown(text)} holds an integer beyond 2**{MAX_INTEGER_BITS}")


def _shown(text: str) -> str:
    return repr(text if len(text) <= 60 else text[:60] + "...")


def _too_deep(text: str) -> SymbolicError:
    return SymbolicError(f"symbolic expression {_shown(text)} nests too deeply for a size expression")


def _build(node: ast.AST, text: str, make_symbol=symbol, depth: int = 0):
    if depth > MAX_EXPRESSION_DEPTH:
        raise _too_deep(text)

    def build(child):
        return _build(child, text, make_symbol, depth + 1)

    if isinstance(node, ast.Constant) and type(node.value) is int:
        return _bounded(node.value, text)
    if isinstance(node, ast.Name):
        return make_symbol(node.id)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return -build(node.operand)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Pow):
        exponent = node.right
        if isinstance(exponent, ast.Constant) and type(exponent.value) is int and exponent.value >= 0:
            if exponent.value > MAX_EXPONENT:
                raise SymbolicError(
                    f"symbolic expression {_shown(text)}: exponent {exponent.value} is above {MAX_EXPONENT}"
                )
            base = build(node.left)
            if isinstance(base, int) and abs(base).bit_length() * exponent.value > MAX_INTEGER_BITS:
                raise _too_large(text)
            return _bounded(base**exponent.value, text)
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        return _bounded(_BINARY[type(node.op)](build(node.left), build(node.right)), text)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("max", "min"):
        args = [build(a) for a in node.args]
        return sym_max(*args) if node.func.id == "max" else sym_min(*args)
    if isinstance(node, ast.Compare) and len(node.ops) == 1 and type(node.ops[0]) in _COMPARE:
        return compare(_COMPARE[type(node.ops[0])], build(node.left), build(node.comparators[0]))
    raise SymbolicError(f"cannot read {ast.unparse(node)!r} in symbolic expression {text!r}")


def _nesting(text: str) -> int:
    """An upper bound on how deeply `text` nests: open brackets plus a run of unary signs, counted
    before Python's own parser sees it (which recurses, and runs out of memory on 100,000 signs)."""
    depth = deepest = signs = 0
    for char in text:
        if char in "([":
            depth += 1
        elif char in ")]":
            depth -= 1
        if char in "-+~":
            signs += 1
        elif not char.isspace():
            deepest, signs = max(deepest, depth + signs), 0
    return max(deepest, depth + signs)


@functools.lru_cache(maxsize=4096)
def parse_dim(text: str, make_symbol=symbol):
    """Read what `format_dim` wrote: an int, a symbolic expression or a relation. `make_symbol(name)`
    gives the sympy symbol of each name (default: a size symbol, a positive integer); a caller whose
    expressions hold other variables (the inductor's loop indices) passes its own."""
    if not isinstance(text, str):
        raise SymbolicError(f"a symbolic expression is a string, got {type(text).__name__}")
    if len(text) > MAX_EXPRESSION_CHARS:
        raise SymbolicError(
            f"symbolic expression {_shown(text)} has {len(text)} characters; at most {MAX_EXPRESSION_CHARS}"
        )
    if not text.isascii():  # Python's parser would fold look-alike letters (NFKC: 'ſ0' reads as 's0')
        raise SymbolicError(f"symbolic expression {_shown(text)} holds a non-ASCII character")
    if _nesting(text) > MAX_BRACKET_DEPTH:
        raise _too_deep(text)
    try:
        tree = ast.parse(text.strip(), mode="eval")
        value = _build(tree.body, text, make_symbol)
    except SyntaxError as e:
        raise SymbolicError(f"cannot parse symbolic expression {_shown(text)}: {e.msg}") from None
    except (RecursionError, MemoryError, ValueError, OverflowError) as e:
        raise SymbolicError(f"cannot read symbolic expression {_shown(text)}: {type(e).__name__}") from e
    if isinstance(value, (bool, sympy.logic.boolalg.Boolean)) or isinstance(value, sympy.Rel):
        return value
    return normalize_dim(value)
