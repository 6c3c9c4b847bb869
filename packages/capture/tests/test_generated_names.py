"""User strings (attribute names, dict keys, keyword names) reach generated guards and run code as
data only: escaped literals and `getattr(x, '...')`, never pasted as source."""

import ast
import logging
import math
import operator
import re

import pytest
import torch
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from torchsmith.capture.pysource import (
    attribute,
    identifier,
    keyword_arguments,
    set_attribute,
    string_literal,
)


def _hostile_names(flag_path) -> list[str]:
    """Names that, pasted into guard or run source, would create `flag_path` on every call."""
    touch = f"open({str(flag_path)!r}, 'w')"
    return [
        f"a'] or {touch} or G['",
        f'a"] or {touch} or G["',
        f"a or {touch}",
        f"a\n{touch}\n",
        f"a') or {touch} or getattr(L, 'b",
        f"__class__ or {touch}",
    ]


@pytest.mark.parametrize("where", ["module attribute", "object attribute", "dict key", "set inside"])
def test_hostile_names_never_run(compile_with, tmp_path, where):
    flag = tmp_path / "PWNED"
    for name in _hostile_names(flag):
        _compile_and_run_with_hostile_name(compile_with, where, name)
        assert not flag.exists(), f"generated code executed text from the name {name!r}"


def _compile_and_run_with_hostile_name(compile_with, where, name):
    """One name of `test_hostile_names_never_run`: `f` reads `name`, `holder` and `table` as closure
    variables of this call (a helper rather than a loop body, so each `f` binds its own)."""

    class Box:
        pass

    holder = torch.nn.Module() if where == "module attribute" else Box()
    table = {name: 3.0}
    if where != "set inside":
        setattr(holder, name, 2.0)

    def f(x):
        if where == "dict key":
            return x * table[name]
        if where == "set inside":
            setattr(holder, name, getattr(holder, name, 1.0) + 1.0)
        return x * getattr(holder, name)

    compiled = compile_with(f)
    x = torch.randn(3)
    for _ in range(3):
        expected_holder = dict(vars(holder))
        got = compiled(x)
        compiled_holder = dict(vars(holder))
        vars(holder).clear()
        vars(holder).update(expected_holder)
        torch.testing.assert_close(got, f(x))
        assert vars(holder) == compiled_holder


@pytest.mark.parametrize(
    "name", ["w'q", "w q", "1w", "\u0175", "\ufb01", "a\nb", "a\\", 'q"', "x]", "class", ""]
)
def test_odd_attribute_names_compile_and_are_guarded(compile_with, backend, name, caplog):
    m = torch.nn.Module()
    setattr(m, name, 2.0)

    def f(x):
        return x * getattr(m, name)

    compiled = compile_with(f)
    x = torch.randn(2)
    with caplog.at_level(logging.WARNING, logger="torchsmith.capture"):
        torch.testing.assert_close(compiled(x), x * 2.0)
        setattr(m, name, 5.0)
        torch.testing.assert_close(compiled(x), x * 5.0)
    assert len(backend.graphs) == 2
    assert "internal error" not in caplog.text


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(name=st.text(max_size=12), value=st.floats(-4, 4, allow_nan=False))
def test_any_attribute_name_matches_eager(compile_with, name, value):
    m = torch.nn.Module()
    assume(not hasattr(m, name))  # a new attribute: setting __dict__ or _parameters breaks the module
    setattr(m, name, value)

    def f(x):
        return x * getattr(m, name) + hasattr(m, name + "_missing")

    compiled = compile_with(f, fullgraph=True)  # a compile error in generated code would raise
    x = torch.ones(2)
    torch.testing.assert_close(compiled(x), f(x))
    setattr(m, name, value + 1)
    torch.testing.assert_close(compiled(x), f(x))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(keys=st.lists(st.text(max_size=8), min_size=1, max_size=4, unique=True))
def test_any_dict_keys_and_keyword_names_match_eager(compile_with, keys):
    assume("x" not in keys)  # `inner(x, x=...)` raises in eager too
    def inner(x, **kw):
        return x * sum(kw.values())

    def f(x, d):
        d[keys[0]] = d[keys[0]] + 1.0  # replayed after the graph as a dict write
        return inner(x, **d) + sum(d[k] for k in keys)

    compiled = compile_with(f, fullgraph=True)
    x = torch.ones(2)
    d_eager = {k: float(i) for i, k in enumerate(keys)}
    d_compiled = dict(d_eager)
    torch.testing.assert_close(compiled(x, d_compiled), f(x, d_eager))
    assert d_compiled == d_eager


@settings(max_examples=200, deadline=None)
@given(text=st.text())
def test_string_literal_is_exact_and_has_no_syntax_characters(text):
    literal = string_literal(text)
    assert ast.literal_eval(literal) == text
    # nothing the guard rewriter reads as structure: no quotes, brackets, dots or parentheses
    assert re.fullmatch(r"[A-Za-z0-9_ \\]*", literal[1:-1])


@settings(max_examples=200, deadline=None)
@given(name=st.text(), value_name=st.sampled_from(["v", "K3"]))
def test_attribute_spellings_parse_and_keep_the_name(name, value_name):
    assume(not (name.startswith("__") and name.endswith("__")))  # __dict__, __class__ take no int
    class Box:
        pass

    box = Box()
    scope = {"box": box, value_name: 7}
    exec(compile(set_attribute("box", name, value_name), "<t>", "exec"), scope)  # noqa: S102
    assert getattr(box, name) == 7
    assert eval(compile(attribute("box", name), "<t>", "eval"), scope) == 7  # noqa: S307
    keywords_source = f"dict({', '.join(keyword_arguments([(name, value_name)]))})"
    kwargs = eval(compile(keywords_source, "<t>", "eval"), scope)  # noqa: S307
    assert kwargs == {name: 7}


@settings(max_examples=200, deadline=None)
@given(text=st.text())
def test_identifier_is_always_valid(text):
    name = identifier(text)
    assert name.isidentifier() and name.isascii()
    compile(f"{name} = 1", "<t>", "exec")


# ----------------------------------------------------------------- stdlib calls on Python values

STDLIB_PROGRAMS = {
    "math": lambda x, v: x * math.sqrt(abs(v["n"])) + math.floor(v["f"]) + math.copysign(1.0, v["f"]),
    "math_more": lambda x, v: x + math.hypot(v["n"], 2) + math.isclose(v["f"], 0.5) + math.gcd(v["n"], 6),
    "operator": lambda x, v: x * operator.add(v["n"], 1) + operator.getitem(v["s"], 0).isupper(),
    "itemgetter": lambda x, v: x * operator.itemgetter("n")(v),
    "len_sorted": lambda x, v: x * len(sorted(v["keys"])) + sorted(v["keys"], reverse=True).index("b"),
    "str_methods": lambda x, v: x * len(v["s"].strip().split("-")) + v["s"].lower().count("a"),
    # `%` formatting is one of the spellings captured here (an f-string would test another path)
    "str_format": lambda x, v: x + len(f"{v['s']!r}:{v['f']:.3f}") + len("%s" % v["s"]),  # noqa: UP031
    "isinstance": lambda x, v: (
        x * (2 if isinstance(v["n"], int) and not isinstance(v["f"], (int, str)) else 3)
    ),
    "min_max": lambda x, v: x * max(v["n"], 1) + min(v["keys"]).count("a"),
    "divmod_round": lambda x, v: x * divmod(v["n"], 3)[1] + round(v["f"], 1),
    "str_join_dict": lambda x, v: x * len(",".join(f"{k}={v[k]}" for k in ("n", "s"))),
    "tuple_ops": lambda x, v: x * (tuple(v["keys"]).count("a") + (v["n"],).index(v["n"])),
    "bool_int_float": lambda x, v: x * int(float(v["n"]) + bool(v["s"])) + str(v["n"]).zfill(3).count("0"),
    "chr_ord": lambda x, v: x + ord(chr(ord(v["s"][0]) + 1)) - ord("a"),
    "repr_hash_free": lambda x, v: x * len(repr(v["keys"])) + len(str(v["f"])),
    "any_all": lambda x, v: x * (any(k.startswith("a") for k in v["keys"]) + all(v["keys"])),
    "enumerate_zip": lambda x, v: (
        x * sum(i * len(k) for i, k in enumerate(v["keys"])) + len(list(zip(v["keys"], "xy")))
    ),
}


def _values(n, f, s, keys):
    return {"n": n, "f": f, "s": s, "keys": keys}


@pytest.mark.parametrize("name", sorted(STDLIB_PROGRAMS))
def test_stdlib_calls_on_python_values_are_correct_or_break(compile_with, name, caplog):
    fn = STDLIB_PROGRAMS[name]

    def f(x, v):
        return fn(x, v)

    compiled = compile_with(f)
    x = torch.randn(2)
    inputs = [
        _values(4, 0.5, "Ab-c", ["b", "a"]),
        _values(4, 0.5, "Ab-c", ["b", "a"]),
        _values(9, -1.25, "x-a-b", ["a", "b", "c"]),
        _values(4, 0.5, "Ab-c", ["b", "a"]),
    ]
    with caplog.at_level(logging.WARNING, logger="torchsmith.capture"):
        for v in inputs:
            torch.testing.assert_close(compiled(x, v), fn(x, v))
    assert "internal error" not in caplog.text
    assert "does not compile" not in caplog.text
