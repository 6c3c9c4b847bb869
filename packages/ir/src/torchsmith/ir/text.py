"""The text form of graphs: a printer whose output reads like a short program.

    # stamp capture 0.0012
    graph mlp(%x: f32[s0, 64] cpu, %w: f32[256, 64] cpu):
      %t: f32[64, 256]{1, 64} cpu = aten.t.default(%w)
      %y: f32[s0, 256] cpu = aten.mm.default(%x, %t)  # model.py:12
      %m: f32[s0] cpu, %i: i64[s0] cpu = aten.max.dim(%y, 1)
      return (%y, %m)

Constants: `None True False`, ints, floats by `repr` (`inf`, `-inf`, `nan`), complex `complex(1.0, 2.0)`,
strings as JSON strings (printable non-ASCII kept: `"naïve"`), `torch.float32`, `device("cuda:0")`,
`torch.strided`, `torch.contiguous_format`, `slice(1, None, 2)`, `...`, lists `[...]`, tuples
`(a, b)` / `(a,)`, symbolic ints `sym(2*s0 + 1)`.

Names that are not plain identifiers (a graph called `<lambda>`, a pass called `min-cut`, a value
called `a b`) are written as JSON strings (`graph "<lambda>"(...)`, `%"a b"`) so that every graph
reads back; so is a source that would not survive as the rest of a line (`# "two\\nlines"`).
`parse_graph` (in `torchsmith.ir.parser`) reads the text back.
"""

import json
import math
import re

import sympy
import torch

from torchsmith.ir.errors import IRError
from torchsmith.ir.graph import ArgList, Graph, Node, Slice, Value
from torchsmith.ir.parser import parse_graph as parse_graph  # re-exported: text.parse_graph
from torchsmith.ir.symbolic import format_dim
from torchsmith.ir.types import format_type

# What may be written bare; anything else is quoted. Must match the parser's patterns.
_BARE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*\Z")
_BARE_VALUE_NAME = re.compile(r"[A-Za-z0-9_]+\Z")


def _escape_unprintable(char: str) -> str:
    if char.isprintable():
        return char
    code = ord(char)
    if code < 0x10000:
        return f"\\u{code:04x}"
    code -= 0x10000  # JSON spells characters beyond the BMP as a surrogate pair
    return f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}"


def format_string(text: str) -> str:
    """A JSON string that keeps printable non-ASCII characters as they are (`"naïve ✓"`) and
    escapes everything else (line breaks, control and invisible characters, lone surrogates)."""
    quoted = json.dumps(text, ensure_ascii=False)
    if quoted.isascii() and quoted.isprintable():
        return quoted
    return "".join(_escape_unprintable(c) for c in quoted)


def format_name(name: str) -> str:
    """A graph, op or pass name: bare when it is a (dotted) identifier, else a JSON string."""
    return name if _BARE_NAME.match(name) else format_string(name)


def format_value_ref(value: Value) -> str:
    """`%x`, or `%"a b"` for a name that is not made of identifier characters."""
    name = value.name
    return f"%{name}" if _BARE_VALUE_NAME.match(name) else f"%{format_string(name)}"


def format_source(source: str) -> str:
    """A node's source as the rest of its line; quoted when it would not read back as written
    (empty, surrounding spaces, a line break or other unprintable character, a leading quote)."""
    if source and source.isprintable() and source == source.strip() and not source.startswith('"'):
        return source
    return format_string(source)


def format_float(x: float) -> str:
    if math.isnan(x):
        return "nan"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return float.__repr__(x)  # not repr(): numpy's float64 subclasses float and prints np.float64(...)


def format_arg(arg) -> str:
    """The text of one stored argument."""
    if isinstance(arg, Value):
        return format_value_ref(arg)
    if arg is None or isinstance(arg, bool):
        return str(arg)
    if isinstance(arg, int):
        return int.__repr__(arg)  # an IntEnum member prints as its number
    if isinstance(arg, float):
        return format_float(arg)
    if isinstance(arg, complex):
        return f"complex({format_float(arg.real)}, {format_float(arg.imag)})"
    if isinstance(arg, str):
        return format_string(arg)
    if isinstance(arg, (torch.dtype, torch.layout, torch.memory_format)):
        return str(arg)  # `torch.float32`, `torch.strided`, `torch.channels_last`
    if isinstance(arg, torch.device):
        return f'device("{arg}")'
    if arg is Ellipsis:
        return "..."
    if isinstance(arg, Slice):
        return f"slice({format_arg(arg.start)}, {format_arg(arg.stop)}, {format_arg(arg.step)})"
    if isinstance(arg, ArgList):
        return "[" + ", ".join(format_arg(a) for a in arg) + "]"
    if isinstance(arg, tuple):
        if len(arg) == 1:
            return f"({format_arg(arg[0])},)"
        return "(" + ", ".join(format_arg(a) for a in arg) + ")"
    if isinstance(arg, sympy.Basic):
        return f"sym({format_dim(arg)})"
    raise IRError(f"cannot print argument {arg!r} of type {type(arg).__name__}")


def format_value_decl(value: Value) -> str:
    return f"{format_value_ref(value)}: {format_type(value.type)}"


def format_node(node: Node) -> str:
    """One node as a line of text (without indentation)."""
    call_args = [format_arg(a) for a in node.args] + [f"{k}={format_arg(v)}" for k, v in node.kwargs]
    op = format_name(node.op) if node.op != "return" else '"return"'  # not the return statement
    call = f"{op}({', '.join(call_args)})"
    lhs = ", ".join(format_value_decl(v) for v in node.outputs)
    text = f"{lhs} = {call}" if node.outputs else call
    if node.source is not None:
        text += f"  # {format_source(node.source)}"
    return text


def format_graph(graph: Graph) -> str:
    """The whole graph as text; `parse_graph(format_graph(g)) == g`."""
    lines = [f"# stamp {format_name(s.pass_name)} {format_float(s.seconds)}" for s in graph.stamps]
    inputs = ", ".join(format_value_decl(v) for v in graph.inputs)
    lines.append(f"graph {format_name(graph.name)}({inputs}):")
    lines.extend("  " + format_node(node) for node in graph.nodes)
    lines.append("  return (" + ", ".join(format_value_ref(v) for v in graph.outputs) + ")")
    return "\n".join(lines) + "\n"
