"""Printing loop-IR element expressions as C++: index expressions, elementwise ops, and the
statements that compute one element (`BodyWriter`, one named temporary per distinct subexpression).

Values are held in their dtype's compute type (`cpp_types.cpp_type`: float for float16/bfloat16);
a 16-bit op's result is rounded to its dtype as eager PyTorch rounds it.
"""

import sympy
import torch

from torchsmith.inductor.cpp.dtypes import HALF_DTYPES, cpp_constant, cpp_type, load_code, round_code
from torchsmith.inductor.cpp.indirect import emit_indirect
from torchsmith.inductor.cpp.rng import RANDOM_OPS, random_code
from torchsmith.inductor.cpp.vector_math import libm_call
from torchsmith.inductor.errors import CodegenError
from torchsmith.inductor.loop_ir.elementwise_ops import CPP_LOOKUP, OPERATOR_BY_NAME, operand_kind, spelling
from torchsmith.inductor.loop_ir.index_print import CPP_INDEX, print_index
from torchsmith.inductor.loop_ir.math_ops import (
    BINARY_BY_NAME,
    BINARY_MATH,
    UNARY_BY_NAME,
    UNARY_MATH,
    MathOp,
)
from torchsmith.inductor.loop_ir.program import Constant, Expr, IndexValue, Indirect, Load, Op


def cpp_index(expr) -> str:
    """An integer index/size expression in C++ (loop variables and size symbols are int64_t)."""
    return print_index(expr, CPP_INDEX)


# Ops that are libm functions (loop_ir/math_ops.py), printed as the C function of the operand's
# compute type: "exp" -> expf(x) for float, exp(x) for double.
LIBM_UNARY = {op.name: op.c for op in UNARY_MATH}
# The libm calls templates name by their C function: `{sqrt}` (rsqrt), `{atan2}`.
_LIBM_KEYS = ("sqrt", *(op.c for op in BINARY_MATH if op.cpp is None))


def _real_type(compute_type: str) -> str:
    """The libm type an operand computes in: its own when floating point, else double."""
    return compute_type if compute_type in ("float", "double") else "double"


def _libm_unary(math: MathOp, op: Op, arg: str) -> str:
    operand = op.args[-1].dtype
    if not operand.is_floating_point and math.rounding:
        return arg  # rounding an integer is the integer itself
    a = _real_type(cpp_type(operand))
    arg = f"static_cast<{a}>({arg})"
    if op.op == "cos":
        # g++ merges sin(x) and cos(x) of one loop into a scalar sincos call, and then the whole
        # loop stays scalar; x + 0 is exact for cos and keeps them apart.
        arg = f"({arg} + {a}(0))"
    code = f"{libm_call(math.c, a)}({arg})"
    return round_code(code, op.dtype) if op.dtype in HALF_DTYPES else code


def _template(op: Op, arity: int) -> tuple[str, bool]:
    """The C++ template of `op` (elementwise_ops.py or math_ops.py) and whether its result is exact
    (one of its operands: a 16-bit result needs no rounding)."""
    operand = op.args[-1].dtype
    entry = OPERATOR_BY_NAME.get(op.op)
    if entry is not None and entry.arity == arity:
        result = "bool" if op.dtype == torch.bool else None
        template = spelling(entry.cpp, CPP_LOOKUP[operand_kind(operand)], result)
        if template is not None:
            # A cast to its own dtype changes nothing, so it rounds nothing either.
            return template, entry.exact or (op.op == "convert" and operand == op.dtype)
    math = BINARY_BY_NAME.get(op.op) if arity == 2 else None
    if math is not None:
        return math.cpp or "{" + math.c + "}({0}, {1})", False
    raise CodegenError(f"no C++ form for elementwise op {op.op!r} on {operand} with {arity} operands")


def cpp_op(op: Op, args: list[str]) -> str:
    """The C++ expression of one elementwise op on already-named operands (compute-type values)."""
    if op.op in RANDOM_OPS:  # philox_rand/philox_randn: cpp/rng.py prints them
        return random_code(op, args)
    fmt = dict(T=cpp_type(op.dtype), A=cpp_type(op.args[-1].dtype))  # refuses a dtype C++ has not
    if len(args) == 1 and op.op in UNARY_BY_NAME:
        return _libm_unary(UNARY_BY_NAME[op.op], op, args[0])
    template, exact = _template(op, len(args))
    real = _real_type(fmt["A"])
    code = template.format(*args, **{name: libm_call(name, real) for name in _LIBM_KEYS}, **fmt)
    if op.dtype in HALF_DTYPES and not exact:
        # Eager computes a 16-bit op in float and rounds its result; so do we, op by op.
        code = round_code(code, op.dtype)
    return code


class BodyWriter:
    """Writes the statements computing expressions, one named temporary per distinct subexpression.

    With `inner_var` (the loop variable of the innermost loop) and a `hoisted` list, subexpressions
    that do not depend on that loop (a softmax row's max and sum, a scalar operand) are written to
    `hoisted` instead, for the caller to place before the loop: computed once per row, and the loop
    vectorizes (GCC gives up on a simd loop that reloads an element its own kernel stores)."""

    def __init__(
        self,
        pointer_of: dict[str, str],
        lines: list[str],
        indent: str,
        counter: list[int],
        inner_var=None,
        hoisted: list[str] | None = None,
        hoisted_indent: str = "",
    ):
        self.pointer_of, self.lines, self.indent, self.counter = pointer_of, lines, indent, counter
        self.inner_var, self.hoisted, self.hoisted_indent = inner_var, hoisted, hoisted_indent
        self.names: dict[Expr, str] = {}
        # Temporaries computed before the inner loop (hoisted): invariant like the loop's other
        # hoisted values, so a load indexed by one (an embedding row picked by a hoisted id) is too.
        self.hoisted_temps: set[str] = set()

    def _invariant_select(self, expr: Expr) -> bool:
        """A float select in the inner loop whose condition is the same in every iteration: written
        as `ts::blend` (bit operations), which GCC vectorizes where it does not the `?:`."""
        return (
            isinstance(expr, Op)
            and expr.op == "where"
            and expr.dtype in (torch.float32, torch.float64)
            and expr.args[0].dtype == torch.bool
            and all(a.dtype == expr.dtype for a in expr.args[1:])
            and self._invariant(expr.args[0])
            and not self._invariant(expr)
        )

    def _invariant(self, expr: Expr) -> bool:
        """Whether `expr` is the same in every iteration of the inner loop (so it can be hoisted)."""
        if self.hoisted is None:
            return False
        if isinstance(expr, (Load, IndexValue)):
            index = expr.index if isinstance(expr, Load) else expr.expr
            # Temporaries (`t<k>`, bound by indirect loads inside the loop) vary like the loop var,
            # unless they were hoisted.
            return not any(
                s == self.inner_var
                or (s.name[:1] == "t" and s.name[1:].isdigit() and s.name not in self.hoisted_temps)
                for s in sympy.sympify(index).free_symbols
            )
        if isinstance(expr, Op):
            return all(self._invariant(a) for a in expr.args)
        if isinstance(expr, Indirect):  # a gathered value whose index and row do not change
            return self._invariant(expr.value) and self._invariant(expr.body)
        return isinstance(expr, Constant)

    def _by_reciprocal(self, expr: Expr) -> bool:
        """Whether `expr` divides loop-varying values by a loop invariant that is not a constant (a
        softmax row's sum): multiplied by the reciprocal, computed once before the loop. A vector
        division costs several times a multiplication (a visible share of a softmax kernel);
        eager's softmax multiplies by the reciprocal too. Constants stay divisions (GCC already
        multiplies where that is exact: by powers of two)."""
        return (
            isinstance(expr, Op)
            and expr.op == "div"
            and expr.dtype in (torch.float32, torch.float64)
            and expr.args[1].dtype == expr.dtype
            and not isinstance(expr.args[1], Constant)
            and self._invariant(expr.args[1])
            and not self._invariant(expr.args[0])
        )

    def _reciprocal(self, divisor: Expr) -> str:
        """`r * s` names, hoisted: `x / y == (x * r) * s` with r = 1 / (y * s), where s = 2^64 for
        |y| < 2^-100 (whose plain reciprocal would overflow to inf) and 1 otherwise (exact)."""
        y, t = self.value(divisor), cpp_type(divisor.dtype)
        k = self.counter[0]
        self.counter[0] += 1
        big = "18446744073709551616.0" + ("f" if t == "float" else "")
        tiny = "7.888609052210118e-31" + ("f" if t == "float" else "")
        self.hoisted.append(
            f"{self.hoisted_indent}const {t} s{k} = ts::abs({y}) < {tiny} ? {t}({big}) : {t}(1); "
            f"const {t} r{k} = {t}(1) / ({y} * s{k});"
        )
        return f"r{k} * s{k}"

    def value(self, expr: Expr) -> str:
        """The name (or literal) holding `expr`, writing the statements that compute it first."""
        if expr in self.names:
            return self.names[expr]
        if isinstance(expr, Load):
            code = load_code(f"{self.pointer_of[expr.buffer]}[{cpp_index(expr.index)}]", expr.dtype)
        elif isinstance(expr, Constant):
            return cpp_constant(expr.value, expr.dtype)
        elif isinstance(expr, IndexValue):
            code = f"static_cast<{cpp_type(expr.dtype)}>({cpp_index(expr.expr)})"
            code = round_code(code, expr.dtype) if expr.dtype in HALF_DTYPES else code
        elif isinstance(expr, Indirect):
            # A load at an index read from data (gather, index): cpp_indirect checks and binds it.
            name = emit_indirect(self, expr)
            self.names[expr] = name
            return name
        elif self._invariant_select(expr):
            keep, a, b = (self.value(arg) for arg in expr.args)
            code = f"ts::blend({keep}, {a}, {b})"
        elif self._by_reciprocal(expr):
            code = f"{self.value(expr.args[0])} * {self._reciprocal(expr.args[1])}"
        else:
            code = cpp_op(expr, [self.value(a) for a in expr.args])
        name = f"t{self.counter[0]}"
        self.counter[0] += 1
        statement = f"{cpp_type(expr.dtype)} {name} = {code};"
        if self._invariant(expr):
            self.hoisted.append(f"{self.hoisted_indent}{statement}")
            self.hoisted_temps.add(name)
        else:
            self.lines.append(f"{self.indent}{statement}")
        self.names[expr] = name
        return name
