"""Symbolic shape expressions: canonical printing, parsing back, evaluation against Python ints."""

import operator
import random
import re

import pytest
import sympy

from torchsmith.ir import SymbolicError, compare, evaluate, floordiv, format_dim, mod, parse_dim, symbol
from torchsmith.ir.symbolic import FloorDiv, free_symbols, normalize_dim, sym_max, sym_min

s0, s1, s2 = symbol("s0"), symbol("s1"), symbol("s2")


# -- printing ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "expr, text",
    [
        (4, "4"),
        (s0, "s0"),
        (2 * s0 + 1, "2*s0 + 1"),
        (1 + s0 * 2, "2*s0 + 1"),  # one canonical form whatever the build order
        (s1 * s0, "s0*s1"),
        (3 - s0, "3 - s0"),
        (s0 - s1, "s0 - s1"),
        (s0**2, "s0**2"),
        (floordiv(s0, 2) ** 2, "(s0 // 2)**2"),
        (mod(s0, 3) ** 2, "(s0 % 3)**2"),
        (sym_min(s0, floordiv(s1 + 1, 3) ** 2), "min(s0, ((s1 + 1) // 3)**2)"),
        (floordiv(s0, 2), "s0 // 2"),
        (floordiv(s0 + 1, s1), "(s0 + 1) // s1"),
        (floordiv(s0, s1 * 2), "s0 // (2*s1)"),
        (floordiv(floordiv(s0, 2), 3), "s0 // 2 // 3"),
        (floordiv(s0, floordiv(s1, 2)), "s0 // (s1 // 2)"),
        (mod(s0, 3), "s0 % 3"),
        (mod(s0, floordiv(s1, 2)), "s0 % (s1 // 2)"),
        (sym_max(s0, s1), "max(s0, s1)"),
        (sym_min(s0, 4), "min(4, s0)"),
        (2 * floordiv(s0 + 1, s1), "2*((s0 + 1) // s1)"),
        (s2 * floordiv(s1, 2), "s2*(s1 // 2)"),
        (-floordiv(s0, 2), "-(s0 // 2)"),
        (-3 * floordiv(s0, s1), "-3*(s0 // s1)"),
        (-mod(s1, 4), "-(s1 % 4)"),
        (s0 - mod(s1, 4), "s0 - (s1 % 4)"),
        (floordiv(-s0, 2), "(-s0) // 2"),
        # a number times a product holding a sum: read back in an order that keeps the sum whole
        (6 * (sym_min(3, s0) * (s2 + 4)), "6*min(3, s0)*(s2 + 4)"),
        (-(sym_max(4, s1) * (s1 - 2)), "-max(4, s1)*(s1 - 2)"),
        (-((s0 + s2) * (s1 + 6)), "-((s0 + s2)*(s1 + 6))"),
        (3 - (s0 + s2) * (s1 + 6), "-((s0 + s2)*(s1 + 6)) + 3"),
        (compare(">=", s0, 4), "s0 >= 4"),
        (compare("==", s0, s1), "s0 == s1"),
        (compare("!=", 2 * s0, s1), "2*s0 != s1"),
    ],
)
def test_canonical_text_and_round_trip(expr, text):
    assert format_dim(expr) == text
    assert parse_dim(text) == expr
    assert format_dim(parse_dim(text)) == text


@pytest.mark.parametrize(
    "text, value",
    [
        ("s0 * 4 % 2", 0),
        ("(2*s0 + 2) // 2", s0 + 1),
        ("s0 // 1", s0),
        ("(s0*s1) // s1", s0),
        ("7 // 2", 3),
        ("-7 // 2", -4),
        ("-7 % 3", 2),
        ("max(3, 5)", 5),
        ("min(s0, s0)", s0),
        ("- - s0", s0),
        (" s0+1 ", s0 + 1),
    ],
)
def test_parse_simplifies(text, value):
    assert parse_dim(text) == value


def test_comparisons_decided_for_all_sizes_are_bools():
    assert compare(">=", s0, 1) is True  # sizes are positive
    assert compare("<", s0, 0) is False
    assert compare("==", s0 + 1, 1 + s0) is True
    assert isinstance(compare("<", s0, s1), sympy.Rel)
    with pytest.raises(SymbolicError, match="unknown comparison"):
        compare("<>", s0, 1)


@pytest.mark.parametrize(
    "text, fragment",
    [
        ("s0 / 2", "cannot read 's0 / 2'"),
        ("s0 ** -1", "in symbolic expression 's0 ** -1'"),
        ("f(s0)", "cannot read 'f(s0)'"),
        ("s0 +", "cannot parse symbolic expression 's0 +'"),
        ("_s0", "must be an identifier"),
        ("s0.real", "cannot read 's0.real'"),
        ("s0 and s1", "cannot read 's0 and s1'"),
        ("1.5", "cannot read '1.5'"),
    ],
)
def test_parse_refuses_what_is_not_a_size(text, fragment):
    with pytest.raises(SymbolicError, match=re.escape(fragment)):
        parse_dim(text)


# -- normalize, free symbols, evaluate ----------------------------------------------------------


def test_normalize_refuses_floats_rationals_and_bools():
    assert normalize_dim(sympy.Integer(3)) == 3 and type(normalize_dim(sympy.Integer(3))) is int
    bad_dims = (True, False, 2.0, sympy.Float(2.0), sympy.Rational(1, 2), s0 / 2, 1.5 * s0, 1 / s0, "4", None)
    for bad in bad_dims:
        with pytest.raises(SymbolicError):
            normalize_dim(bad)


def test_symbol_names_must_be_identifiers():
    for bad in ("0s", "a-b", "_private", ""):
        with pytest.raises(SymbolicError, match="identifier"):
            symbol(bad)


def test_free_symbols():
    assert free_symbols(7) == frozenset()
    assert free_symbols(2 * s0 + floordiv(s1, s2)) == {"s0", "s1", "s2"}
    assert free_symbols(compare("<", s0, s1)) == {"s0", "s1"}


def test_evaluate():
    bindings = {"s0": 7, "s1": 5}
    assert evaluate(3, {}) == 3
    assert evaluate(floordiv(s0, 2) + mod(s1, 3), bindings) == 5
    assert evaluate(sym_max(s0, 2 * s1), bindings) == 10
    assert evaluate(compare(">", s0, s1), bindings) is True
    assert type(evaluate(s0 * s1, bindings)) is int
    with pytest.raises(SymbolicError, match="no value for s2"):
        evaluate(s0 + s2, bindings)


def test_floordiv_and_mod_simplify():
    assert floordiv(12, 5) == 2 and floordiv(-12, 5) == -3
    assert floordiv(s0, 1) == s0
    assert floordiv(4 * s0, 2) == 2 * s0
    assert floordiv(s0 * s1, s0) == s1
    assert isinstance(floordiv(s0, 2), FloorDiv)
    assert mod(4 * s0, 2) == 0
    assert mod(s0, 1) == 0
    with pytest.raises(SymbolicError, match="division by zero"):
        floordiv(s0, 0)
    with pytest.raises(SymbolicError, match="division by zero"):
        mod(s0, 0)


def test_sympy_divisibility_mistakes_do_not_leak_in():
    # sympy 1.14 believes an even max(...) over 6 is an integer and squares Mod factors of products
    m = sym_max(6, 2 * s0)
    assert evaluate(mod(m, 6), {"s0": 7}) == 14 % 6
    assert evaluate(floordiv(m, 6), {"s0": 7}) == 14 // 6
    assert evaluate(mod(m + 1, 6), {"s0": 7}) == 15 % 6
    assert evaluate(mod(s2 * mod(s1, s0), 4), {"s0": 4, "s1": 2, "s2": 9}) == 18 % 4
    assert format_dim(sym_max(sym_min(6, s0), sym_min(5, s0))) == "min(6, s0)"


# -- property check: random expressions against Python int arithmetic -----------------------------

_NAMES = ("s0", "s1", "s2")


def _random_expr(rng: random.Random, depth: int):
    """A random size expression and a function computing it with Python ints."""
    if depth == 0 or rng.random() < 0.25:
        if rng.random() < 0.5:
            name = rng.choice(_NAMES)
            return symbol(name), lambda b: b[name]
        c = rng.randint(-3, 6)
        return c, lambda b: c
    op = rng.choice(["+", "-", "*", "//", "%", "max", "min", "neg", "square"])
    a, fa = _random_expr(rng, depth - 1)
    if op == "neg":
        return -a, lambda b: -fa(b)
    if op == "square":
        return a**2, lambda b: fa(b) ** 2
    if op in ("//", "%"):
        choice = rng.random()
        if choice < 0.3:  # a symbolic divisor kept positive
            sub, fsub = _random_expr(rng, depth - 1)
            d, fd = sym_max(1, sub), (lambda b: max(1, fsub(b)))
        elif choice < 0.5:
            name = rng.choice(_NAMES)
            d, fd = symbol(name), (lambda b: b[name])
        else:
            c = rng.choice([1, 2, 3, 4, 6, 7])
            d, fd = c, (lambda b: c)
        if op == "//":
            return floordiv(a, d), lambda b: fa(b) // fd(b)
        return mod(a, d), lambda b: fa(b) % fd(b)
    c, fc = _random_expr(rng, depth - 1)
    if op == "max":
        return sym_max(a, c), lambda b: max(fa(b), fc(b))
    if op == "min":
        return sym_min(a, c), lambda b: min(fa(b), fc(b))
    f = {"+": operator.add, "-": operator.sub, "*": operator.mul}[op]
    return f(a, c), lambda b: f(fa(b), fc(b))


@pytest.mark.parametrize("seed", range(4))
def test_random_expressions_match_python_ints(seed):
    rng = random.Random(seed)
    for _ in range(40):
        expr, python = _random_expr(rng, 3)
        expr = normalize_dim(expr)
        text = format_dim(expr)
        parsed = parse_dim(text)
        assert format_dim(parsed) == text, f"{text!r} printed back as {format_dim(parsed)!r}"
        for _ in range(4):
            bindings = {n: rng.randint(1, 9) for n in _NAMES}
            want = python(bindings)
            assert evaluate(expr, bindings) == want, f"{text} under {bindings}"
            assert evaluate(parsed, bindings) == want, f"parsed {text} under {bindings}"
