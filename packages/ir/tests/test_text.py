"""The text form: golden files, exact round trips (printed graphs parse back equal) and parse errors.

Regenerate the golden files after an intended format change with
`TORCHSMITH_UPDATE_GOLDEN=1 pytest packages/ir/tests/test_text.py`, then read the diff.
"""

import enum
import math
import os
import pathlib
import random

import pytest
import sympy
import torch

from torchsmith.ir import (
    ArgList,
    Graph,
    GraphBuilder,
    Node,
    ParseError,
    ScalarType,
    Slice,
    Stamp,
    SymIntType,
    TensorType,
    Value,
    floordiv,
    format_graph,
    mod,
    parse_arg,
    parse_graph,
    parse_node,
    symbol,
)
from torchsmith.ir.dtypes import DTYPE_BY_NAME
from torchsmith.ir.symbolic import sym_max, sym_min
from torchsmith.ir.text import format_arg

GOLDEN_DIR = pathlib.Path(__file__).parent / "golden"
UPDATE_GOLDEN = os.environ.get("TORCHSMITH_UPDATE_GOLDEN") == "1"
s0, s1 = symbol("s0"), symbol("s1")


# -- strict comparison ------------------------------------------------------------------------------
# `==` on graphs is too lenient for a round trip: 1 == 1.0 == True, ArgList((1,)) == (1,),
# -0.0 == 0.0, and nan != nan. `strict_key` tags every leaf with its type and spells floats by repr.


def strict_key(x):
    """A hashable description of `x` that tells apart everything the text form must keep apart."""
    if isinstance(x, Graph):
        stamps = tuple((s.pass_name, strict_key(s.seconds)) for s in x.stamps)
        return ("graph", x.name, strict_key(x.inputs), strict_key(x.nodes), strict_key(x.outputs), stamps)
    if isinstance(x, Node):
        kwargs = tuple((k, strict_key(v)) for k, v in x.kwargs)
        return ("node", x.op, strict_key(x.args), kwargs, strict_key(x.outputs), x.source)
    if isinstance(x, Value):
        return ("value", x.name, strict_key(x.type))
    if isinstance(x, TensorType):
        return ("tensor", strict_key(x.shape), x.dtype, x.device, strict_key(x.strides), x.requires_grad)
    if isinstance(x, SymIntType):
        return ("symint", strict_key(x.expr))
    if isinstance(x, ScalarType):
        return ("scalar", x.kind)
    if isinstance(x, tuple):  # tuple, ArgList
        return (type(x).__name__,) + tuple(strict_key(a) for a in x)
    if isinstance(x, Slice):
        return ("slice", strict_key(x.start), strict_key(x.stop), strict_key(x.step))
    if isinstance(x, float):
        return ("float", repr(x))
    if isinstance(x, complex):
        return ("complex", repr(x.real), repr(x.imag))
    if isinstance(x, sympy.Basic):
        return ("sympy", sympy.srepr(x))
    if isinstance(x, (torch.dtype, torch.layout, torch.memory_format, torch.device)):
        return (type(x).__name__, str(x))
    assert x is None or x is Ellipsis or type(x) in (bool, int, str), f"unexpected leaf {x!r}"
    return (type(x).__name__, x)


def has_nan(x) -> bool:
    return "'nan'" in repr(strict_key(x))


def assert_round_trip(graph: Graph) -> Graph:
    text = format_graph(graph)
    parsed = parse_graph(text)
    assert strict_key(parsed) == strict_key(graph), text
    if not has_nan(graph):
        assert parsed == graph
    assert format_graph(parsed) == text
    return parsed


# -- golden graphs ---------------------------------------------------------------------------------


def mlp_aten() -> Graph:
    b = GraphBuilder("mlp")
    x = b.input("x", "f32[s0, 64] cpu")
    w1 = b.input("w1", "f32[256, 64] cpu grad")
    b1 = b.input("b1", "f32[256] cpu grad")
    w2 = b.input("w2", "f32[10, 256] cpu grad")
    t = b.op("aten.t.default", w1, out_type="f32[64, 256]{1, 64} cpu grad")
    h = b.op("aten.addmm.default", b1, x, t, out_type="f32[s0, 256] cpu grad", source="model.py:12")
    g = b.op(
        "aten.gelu.default", h, approximate="tanh", out_type="f32[s0, 256] cpu grad", source="model.py:13"
    )
    t2 = b.op("aten.t.default", w2, out_type="f32[256, 10]{1, 256} cpu grad")
    y = b.op("aten.mm.default", g, t2, out_type="f32[s0, 10] cpu grad", source="model.py:14")
    m, i = b.op("aten.max.dim", y, 1, out_type=["f32[s0] cpu grad", "i64[s0] cpu"])
    graph = b.build(y, i)
    return graph.stamped("capture", 0.0012).stamped("autograd_aot", 0.25)


def symbolic_shapes() -> Graph:
    b = GraphBuilder("symbolic")
    x = b.input("x", TensorType.make([s0, 2 * s0 + 1, s1], torch.float32))
    n = b.input("n", SymIntType(s1))
    # A transposed view: non-contiguous symbolic strides.
    xt = b.op(
        "aten.transpose.int",
        x,
        0,
        2,
        out_type=TensorType.make([s1, 2 * s0 + 1, s0], torch.float32, strides=[1, s1, s1 * (2 * s0 + 1)]),
    )
    size0 = b.op("aten.sym_size.int", x, 0, out_type=SymIntType(s0))
    half = b.op("operator.floordiv", size0, 2, out_type=SymIntType(floordiv(s0, 2)))
    rest = b.op("operator.mod", n, 3, out_type=SymIntType(mod(s1, 3)))
    big = b.op("torch.sym_max", size0, n, out_type=SymIntType(sym_max(s0, s1)))
    small = b.op("torch.sym_min", size0, n, out_type=SymIntType(sym_min(s0, s1)))
    v = b.op(
        "aten.view.default",
        xt,
        [s1, (2 * s0 + 1) * s0],
        out_type=TensorType.make([s1, (2 * s0 + 1) * s0], torch.float32, device="cuda:0"),
    )
    narrow = b.op(
        "aten.slice.Tensor",
        v,
        1,
        0,
        half,
        out_type=TensorType.make(
            [s1, floordiv(s0, 2)], torch.float32, device="cuda:0", strides=[(2 * s0 + 1) * s0, 1]
        ),
    )
    e = b.op(
        "aten.new_empty.default",
        narrow,
        [big, small, rest],
        out_type=TensorType.make([sym_max(s0, s1), sym_min(s0, s1), mod(s1, 3)], torch.bfloat16),
    )
    return b.build(narrow, e, half)


def constants() -> Graph:
    b = GraphBuilder("constants")
    x = b.input("x", "f32[4, 8] cpu")
    b.op(
        "test.every_constant",
        None,
        True,
        False,
        0,
        7,
        -3,
        2**70,
        -(2**70),
        out_type=[],
        floats=[0.0, -0.0, 0.1, 1.5, -2.5, 1e-300, 5e-324, 1.7976931348623157e308, 1e16, 3.0],
        specials=(math.inf, -math.inf, math.nan),
        complexes=[complex(1.0, 2.0), complex(-0.0, -1.5), complex(math.inf, math.nan)],
        strings=[
            "",
            "plain",
            'say "hi"',
            "back\\slash",
            "new\nline\ttab",
            "naïve ✓ 日本",
            "\x00\u2028",
            "# not a comment",
        ],
        dtypes=[torch.float32, torch.bfloat16, torch.int64, torch.bool, torch.complex64, torch.float8_e4m3fn],
        devices=(torch.device("cpu"), torch.device("cuda", 1), torch.device("meta")),
        layouts=[torch.strided, torch.sparse_coo, torch.sparse_csr],
        formats=[torch.contiguous_format, torch.channels_last, torch.channels_last_3d, torch.preserve_format],
        slices=(slice(None), slice(1, None, 2), slice(-1, None, None)),
        ellipsis=...,
        nested=[(), [], (1,), [(2,)], ((),), [[1, 2], (3, [4.0, (True,)])]],
        syms=[sympy.Integer(4), s0, 2 * s0 + 1, floordiv(s0, 2), sym_max(s0, s1)],
    )
    f = b.op(
        "torch.full",
        (2, 3),
        1.0,
        dtype=torch.float16,
        layout=torch.strided,
        device=torch.device("cpu"),
        out_type="f16[2, 3] cpu",
    )
    one, one_f, yes = (
        b.op("aten.add.Scalar", x, 1, out_type="f32[4, 8] cpu"),
        b.op("aten.add.Scalar", x, 1.0, out_type="f32[4, 8] cpu"),
        b.op("aten.add.Scalar", x, True, out_type="f32[4, 8] cpu"),
    )
    c = b.op("aten.add.Scalar", x, complex(0.5, -2.0), out_type="c64[4, 8] cpu")
    return b.build(f, one, one_f, yes, c)


def torch_dialect() -> Graph:
    b = GraphBuilder("forward")
    x = b.input("x", "f32[s0, 4, 8] cpu")
    flag = b.input("flag", "bool")
    scale = b.input("scale", "float")
    item = b.input("k", "int")
    nothing = b.input("nothing", "none")
    z = b.input("z", "complex")
    sl = b.op(
        "torch.Tensor.__getitem__",
        x,
        (..., slice(1, None, 2), None),
        out_type="f32[s0, 4, 4, 1]{32, 8, 2, 1} cpu",
        source="model.py:7",
    )
    g = b.op(
        "torch.nn.functional.gelu",
        sl,
        approximate="none",
        out_type="f32[s0, 4, 4, 1] cpu",
        source="model.py:8",
    )
    b.op("torch.Tensor.add_", g, scale, alpha=2, out_type="f32[s0, 4, 4, 1] cpu", source="model.py:9")
    cl = b.op(
        "torch.Tensor.contiguous", x, memory_format=torch.contiguous_format, out_type="f32[s0, 4, 8] cpu"
    )
    size = b.op("torch.Tensor.size", cl, 0, out_type=SymIntType(s0))
    twice = b.op("operator.mul", size, 2, out_type=SymIntType(2 * s0))
    root = b.op("math.sqrt", scale, out_type="float")
    pick = b.op("operator.getitem", [g, cl], item, out_type="f32[s0, 4, 4, 1] cpu")
    b.op("torch._assert", flag, "flag must hold", out_type=[], source="model.py:11")
    b.op("operator.is_", nothing, None, out_type="bool")
    b.op("operator.mul", z, root, out_type="complex")
    return b.build(pick, twice, root)


def odd_names() -> Graph:
    # Names the builder would refuse but other producers (fx, user code) may create.
    x = Value("x", TensorType.make([4], torch.float32))
    spaced = Value("a b", TensorType.make([4], torch.float32))
    digit = Value("0", ScalarType("int"))
    quoted = Value('say "x"', ScalarType("bool"))
    nodes = (
        Node("aten.relu.default", (x,), (), (spaced,), source=""),
        Node("my dialect.op-1", (spaced,), (("key", "value"),), (digit,), source="  padded  "),
        Node("return", (digit,), (), (quoted,), source="line one\nline two"),
        Node("aten.neg.default", (x,), (), (), source='"starts with a quote'),
        Node("aten.abs.default", (x,), (), (), source="file.py:3  # a comment ✓"),
    )
    stamps = (Stamp("min-cut partition", 0.5), Stamp("dce", 0.0), Stamp("x.y", math.inf))
    return Graph("<lambda>", (x,), nodes, (spaced, digit, quoted), stamps)


GOLDEN_GRAPHS = {f.__name__: f for f in (mlp_aten, symbolic_shapes, constants, torch_dialect, odd_names)}


@pytest.mark.parametrize("name", sorted(GOLDEN_GRAPHS))
def test_golden(name):
    graph = GOLDEN_GRAPHS[name]()
    text = format_graph(graph)
    path = GOLDEN_DIR / f"{name}.txt"
    if UPDATE_GOLDEN:
        GOLDEN_DIR.mkdir(exist_ok=True)
        path.write_text(text, encoding="utf-8")
    golden = path.read_text(encoding="utf-8")
    assert text == golden, f"{path} differs; after an intended change rerun with TORCHSMITH_UPDATE_GOLDEN=1"
    parsed = parse_graph(golden)
    assert strict_key(parsed) == strict_key(graph)
    if not has_nan(graph):
        assert parsed == graph


def test_golden_files_have_a_test():
    assert {p.stem for p in GOLDEN_DIR.glob("*.txt")} == set(GOLDEN_GRAPHS)


# -- round trips -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "arg",
    [
        None,
        True,
        False,
        0,
        1,
        -1,
        2**100,
        1.0,
        -0.0,
        0.1,
        1e-300,
        1e300,
        math.inf,
        -math.inf,
        complex(1.0, -2.0),
        "",
        'a"b',
        "x\ny",
        "ünïcødé",
        torch.float64,
        torch.device("cuda:3"),
        torch.sparse_csr,
        torch.channels_last,
        ...,
        Slice(None, 4, None),
        ArgList(),
        (),
        (1,),
        ArgList([1]),
        ((1,),),
        ArgList([ArgList([()])]),
        sympy.Integer(3),
        2 * s0 + 1,
        floordiv(s0, 2),
        mod(s0 + s1, 4),
    ],
    ids=repr,
)
def test_arg_round_trip(arg):
    parsed = parse_arg(format_arg(arg))
    assert strict_key(parsed) == strict_key(arg)


def test_numbers_keep_their_type():
    assert [type(parse_arg(t)) for t in ("1", "1.0", "True", "1e5", "-0", "-0.0")] == [
        int,
        float,
        bool,
        float,
        int,
        float,
    ]
    assert math.copysign(1.0, parse_arg("-0.0")) == -1.0
    assert math.isnan(parse_arg("nan"))
    assert type(parse_arg("[1]")) is ArgList and type(parse_arg("(1,)")) is tuple
    assert type(parse_arg("sym(4)")) is sympy.Integer


def test_every_torch_constant_reads_back():
    kinds = (torch.dtype, torch.layout, torch.memory_format)
    constants = [c for c in vars(torch).values() if isinstance(c, kinds)]
    assert len(constants) > 20
    for c in constants:
        assert parse_arg(format_arg(c)) is c


def test_every_short_dtype_name_round_trips():
    b = GraphBuilder("dtypes")
    for i, dtype in enumerate(DTYPE_BY_NAME.values()):
        b.input(f"x{i}", TensorType.make([2, s0], dtype, device="cuda:1", strides=[1, 2], requires_grad=True))
    assert_round_trip(b.build())


def test_parse_node_reads_one_line():
    x = Value("x", TensorType.make([4], torch.float32))
    node = parse_node("%y: f32[4] cpu = aten.add.Tensor(%x, %x, alpha=2)  # m.py:1", {"x": x})
    assert node == Node("aten.add.Tensor", (x, x), (("alpha", 2),), (Value("y", x.type),), "m.py:1")


def test_comments_and_blank_lines_are_ignored():
    text = """
# a comment before the graph
# stamp capture 1.5

graph g(%x: f32[4] cpu):
  # a comment inside
  %y: f32[4] cpu = aten.relu.default(%x)

  return (%y)
# trailing comment
"""
    graph = parse_graph(text)
    assert graph.stamps == (Stamp("capture", 1.5),) and graph.ops() == ["aten.relu.default"]
    assert parse_graph(text.replace("\n", "\r\n")) == graph
    assert parse_graph("\ufeff" + text) == graph


_DIMS = (1, 4, 0, s0, s1, 2 * s0 + 1, floordiv(s0, 2), sym_max(s0, s1))  # built once: sympy is slow
_STRIDES = (1, 2, s0, s0 * s1)
_SYM_EXPRS = (s0, 2 * s0 + 1, floordiv(s1, 2), 7, floordiv(s0, 2) ** 2, (s0 - s1) * mod(s0, 2) * 2)


def _random_type(rng: random.Random):
    kind = rng.random()
    if kind < 0.15:
        return SymIntType(rng.choice(_SYM_EXPRS))
    if kind < 0.25:
        return ScalarType(rng.choice(["bool", "int", "float", "complex", "none"]))
    dims = [rng.choice(_DIMS) for _ in range(rng.randint(0, 3))]
    strides = None if rng.random() < 0.6 else [rng.choice(_STRIDES) for _ in dims]
    return TensorType.make(
        dims,
        rng.choice(list(DTYPE_BY_NAME.values())),
        device=rng.choice(["cpu", "cuda:0", "meta"]),
        strides=strides,
        requires_grad=rng.random() < 0.2,
    )


_LEAVES = [
    None,
    True,
    False,
    0,
    1,
    -7,
    2**64,
    0.0,
    -0.0,
    0.1,
    1e-300,
    math.inf,
    -math.inf,
    math.nan,
    complex(1, -1.5),
    "",
    'q"uote',
    "new\nline",
    "ü✓\u2028\x7f\ud800😀\u00a0",
    torch.float16,
    torch.device("cuda:0"),
    torch.strided,
    torch.channels_last,
    ...,
    sympy.Integer(2),
    s0 * s1 + 3,
    sym_min(s0, floordiv(s1 + 1, 3) ** 2),
]


def _random_arg(rng: random.Random, values: list, depth: int = 0):
    roll = rng.random()
    if values and roll < 0.35:
        return rng.choice(values)
    if depth < 3 and roll < 0.55:
        items = [_random_arg(rng, values, depth + 1) for _ in range(rng.randint(0, 3))]
        return ArgList(items) if rng.random() < 0.5 else tuple(items)
    if roll < 0.6:
        return Slice(*(rng.choice([None, 1, -2, s0]) for _ in range(3)))
    return rng.choice(_LEAVES)


def text_fuzz_graph(seed: int, num_nodes: int = 30) -> Graph:
    """A random graph stressing the text form (not the ops: they need not type-check)."""
    rng = random.Random(seed)
    b = GraphBuilder(rng.choice(["g", "forward", "<lambda>", "f.resume_0", "naïve"]))
    values = [b.input(f"in{i}", _random_type(rng)) for i in range(rng.randint(0, 3))]
    ops = [
        "aten.add.Tensor",
        "torch.Tensor.__getitem__",
        "torch.nn.functional.gelu",
        "operator.add",
        "prims.x",
        "odd op",
    ]
    for _ in range(num_nodes):
        args = [_random_arg(rng, values) for _ in range(rng.randint(0, 4))]
        kwargs = {
            k: _random_arg(rng, values) for k in rng.sample(["alpha", "dim", "dtype", "keepdim", "value"], 2)
        }
        count = rng.choice([0, 1, 1, 1, 2, 3])
        types = [_random_type(rng) for _ in range(count)]
        source = rng.choice([None, None, "model.py:12", "", " lead", "a\nb", '"quoted', "naïve.py:3 # x"])
        out = b.op(
            rng.choice(ops), *args, out_type=types if count != 1 else types[0], source=source, **kwargs
        )
        values.extend(out if isinstance(out, tuple) else [out])
    graph = b.build(*rng.sample(values, min(len(values), 3)))
    for _ in range(rng.randint(0, 2)):
        graph = graph.stamped(rng.choice(["capture", "min-cut", "a.b"]), rng.choice([0.0, 1e-7, 12.5]))
    return graph


@pytest.mark.parametrize("seed", range(40))
def test_fuzz_round_trip(seed):
    assert_round_trip(text_fuzz_graph(seed))


@pytest.mark.parametrize("seed", range(50))
def test_random_graph_round_trip(seed):
    random_graph = pytest.importorskip("torchsmith.ir.random_graph").random_graph
    assert_round_trip(random_graph(seed, 30))


def test_graph_parse_convenience():
    graph = mlp_aten()
    assert Graph.parse(str(graph)) == graph


# -- errors ----------------------------------------------------------------------------------------

GOOD = """graph g(%x: f32[4] cpu, %n: int):
  %y: f32[4] cpu = aten.add.Tensor(%x, %x, alpha=2)
  return (%y)
"""


@pytest.mark.parametrize(
    "old, new, line, at, message",
    [
        # `at`: the text in the bad line that the error must point at (None: column 1).
        ("aten.add.Tensor(%x, %x", "aten.add.Tensor(%x, %q", 2, "%q", "undefined value %q"),
        ("%y: f32[4] cpu =", "%x: f32[4] cpu =", 2, "%x", "value %x is defined twice"),
        ("%n: int", "%x: int", 1, "%x: int", "value %x is defined twice"),
        ("%y: f32[4] cpu =", "%y: f33[4] cpu =", 2, "f33", "unknown dtype 'f33'"),
        ("%y: f32[4] cpu =", "%y: f32[4] =", 2, "f32", "expected a type"),
        ("%n: int", "%n: integer", 1, "integer", "expected a type"),
        ("alpha=2", 'alpha="oops', 2, '"oops', "unterminated string"),
        ("  return (%y)\n", "", 3, None, "expected 'return (...)'"),
        ("return (%y)", "return (%z)", 3, "%z", "undefined value %z"),
        ("return (%y)\n", "return (%y)\n  %z: int = f()\n", 4, "%z", "expected nothing after the return"),
        ("alpha=2)", "alpha=2, %x)", 2, "%x)", "positional argument cannot follow keyword"),
        ("alpha=2", "alpha=2, alpha=3", 2, "alpha=3", "keyword argument alpha= is given twice"),
        ("alpha=2", "alpha=(2)", 2, "(2)", "trailing comma"),
        ("alpha=2", "alpha=two", 2, "two", "unknown name 'two'"),
        ("alpha=2", "alpha=[1, 2", 2, ")", "expected ',' or ']'"),
        ("alpha=2", "alpha=sym(2 +)", 2, "2 +", "bad symbolic expression"),
        ("alpha=2", 'alpha=device("nope")', 2, '"nope"', "bad device"),
        ("alpha=2", "alpha=slice(1, 2)", 2, "(1, 2)", "takes 3 arguments"),
        ("alpha=2)", "alpha=2) junk", 2, "junk", "expected the end of the line or '# source'"),
        ("graph g(", "grap g(", 1, None, "expected 'graph name(...):'"),
        ("%y: f32[4] cpu = aten", "%y: f32[4] cpu aten", 2, "aten", "expected '=' or ','"),
        ("(%x, %x,", "(%x, %x,,", 2, ",,", "expected an argument"),
        ("(%x, %x", "(%y, %x", 2, "%y,", "undefined value %y"),  # a node cannot read its own output
    ],
)
def test_parse_errors(old, new, line, at, message):
    assert old in GOOD
    text = GOOD.replace(old, new)
    bad_line = text.split("\n")[line - 1]
    column = 1 if at is None else bad_line.index(at) + 1 + (1 if at == ",," else 0)
    with pytest.raises(ParseError) as info:
        parse_graph(text)
    err = info.value
    assert message in str(err)
    assert (err.line, err.column) == (line, column), str(err)
    assert str(err).startswith(f"line {line}, column {column}: ")
    # The message quotes the line and puts a caret under the column.
    quoted, caret = str(err).split("\n")[1:3]
    assert quoted == "    " + bad_line and caret == " " * (column + 3) + "^"


def test_parse_error_on_empty_text():
    with pytest.raises(ParseError, match="expected 'graph name"):
        parse_graph("")


@pytest.mark.parametrize(
    "text, message",
    [
        ("graph g():\n  %a: int = f(sym(s1 % 0))\n  return ()", "bad symbolic expression"),
        ("graph g(%x: f32[s0 % 0] cpu):\n  return ()", "bad type"),
        ("graph g():\n  f(" + "[" * 5000 + "]" * 5000 + ")\n  return ()", "nested too deeply"),
        ("graph g():\n  f(" + "9" * 5000 + ")\n  return ()", "bad integer"),
        ('graph g():\n  f("tab\there")\n  return ()', "control characters must be escaped"),
        ('graph g():\n  f("\\q")\n  return ()', "malformed string"),
        ("graph g():\n  %a: int = f()\n  return (%a)\ngraph h():", "expected nothing after the return"),
    ],
)
def test_more_parse_errors(text, message):
    with pytest.raises(ParseError, match="line 2, column|line 1, column|line 4, column") as info:
        parse_graph(text)
    assert message in str(info.value)


def test_mangled_text_raises_only_parse_errors():
    # Random edits of the golden files must parse or raise ParseError, never anything else.
    texts = [GOLDEN_DIR.joinpath(f"{name}.txt").read_text(encoding="utf-8") for name in sorted(GOLDEN_GRAPHS)]
    rng = random.Random(0)
    alphabet = '()[]{},:=%"#\\ \n.-0123456789aesx_'
    for _ in range(1500):
        text = rng.choice(texts)
        for _ in range(rng.randint(1, 3)):
            k = rng.randrange(len(text))
            text = text[:k] + rng.choice(["", rng.choice(alphabet)]) + text[k + rng.randint(0, 1) :]
        try:
            parse_graph(text)
        except ParseError:
            pass


def test_number_subclasses_print_as_plain_numbers():
    np = pytest.importorskip("numpy")

    class Color(enum.IntEnum):
        RED = 3

    assert format_arg(np.float64(0.1)) == "0.1" and format_arg(Color.RED) == "3"
    assert format_arg(complex(np.float64(1.5), 2)) == "complex(1.5, 2.0)"


def test_with_input_types_retypes_an_input_wherever_it_is_read():
    graph = Graph.parse("graph g(%x: f32[3] cpu, %s: f32[] cpu):\n"
                        "  %y: f32[3] cpu = aten.mul.Tensor(%x, %s)\n  return (%y, %s)\n")
    cuda = graph.inputs[1].type.replace(device="cuda:0")
    retyped = graph.with_input_types({"s": cuda})
    assert retyped.inputs[1].type == cuda and retyped.inputs[0] == graph.inputs[0]
    assert retyped.nodes[0].args[1].type == cuda and retyped.outputs[1].type == cuda
    assert graph.with_input_types({}) is graph
