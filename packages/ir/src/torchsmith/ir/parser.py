"""Reads the text form of a graph back: `parse_graph(format_graph(g)) == g`.

    >>> g = parse_graph('''
    ... graph f(%x: f32[s0, 4] cpu):
    ...   %y: f32[s0, 4] cpu = aten.relu.default(%x)  # model.py:3
    ...   return (%y)
    ... ''')
    >>> g.nodes[0].source
    'model.py:3'

The text is line based (one statement a line; strings are JSON-escaped so never span lines), so
each line is read with a cursor (`text_reader.LineReader`) and a few compiled patterns, and values,
types and constants are built as they are read. Types and `sym(...)` expressions are handed to
`parse_type` / `parse_dim`. A mistake raises `ParseError` naming the line and column and what was
expected, with the line and a caret under the spot; the error also carries `.line` and `.column`.
"""

import re

from torchsmith.ir.graph import Graph, Node, Stamp, Value
from torchsmith.ir.text_reader import LineReader

_GRAPH_KEYWORD = re.compile(r"graph[ \t]+")
_RETURN_KEYWORD = re.compile(r"return(?=[ \t(])[ \t]*")
_STAMP = re.compile(r"#[ \t]*stamp[ \t]+")


class _StatementReader(LineReader):
    """Reads the statements of the text form: the graph header, nodes, return and stamps."""

    __slots__ = ()

    def source(self) -> str | None:
        """The trailing `# file.py:12` of a node line, if any (the rest of the line, or a JSON string)."""
        if self.at_end():
            return None
        if self.peek() != "#":
            raise self.error(f"expected the end of the line or '# source', found {self.found()}")
        self.pos += 1
        if self.peek() == " ":
            self.pos += 1
        if self.peek() == '"':
            text = self.string()
            self.expect_end("the quoted source")
            return text
        text = self.line[self.pos :].rstrip()
        self.pos = len(self.line)
        return text

    def node(self) -> Node:
        """`%a: T, %b: T = op(args)  # source`, or `op(args)` for a node without outputs."""
        defined_here: dict[str, Value] = {}
        outputs = []
        if self.peek() == "%":
            while True:
                outputs.append(self.declaration(defined_here))
                self.skip()
                if self.peek() != ",":
                    break
                self.pos += 1
                self.skip()
            self.expect("=", "'=' or ',' after the node's outputs")
        op, args, kwargs = self.call()
        source = self.source()
        # Outputs become visible only now: a node may not read its own results.
        self.values.update(defined_here)
        return Node(op, args, kwargs, tuple(outputs), source)

    def returns(self) -> tuple[Value, ...]:
        """`return (%a, %b)` after the `return` keyword."""
        self.expect("(", "'(' after return")
        outputs = []
        while self.peek() != ")":
            if self.peek() != "%":
                raise self.error(f"expected a %value in the return list, found {self.found()}")
            outputs.append(self.value_ref())
            self.skip()
            if self.peek() == ",":
                self.pos += 1
                self.skip()
            elif self.peek() != ")":
                raise self.error(f"expected ',' or ')' in the return list, found {self.found()}")
        self.pos += 1
        self.expect_end("the return list")
        return tuple(outputs)

    def header(self) -> tuple[str, tuple[Value, ...]]:
        """`graph name(%x: T, ...):`"""
        match = _GRAPH_KEYWORD.match(self.line, self.pos)
        if match is None:
            raise self.error(f"expected 'graph name(...):' to start the graph, found {self.found()}")
        self.pos = match.end()
        name = self.name("the graph's name")
        self.expect("(", f"'(' and the inputs of graph {name}")
        defined_here: dict[str, Value] = {}
        inputs = []
        while self.peek() != ")":
            inputs.append(self.declaration(defined_here))
            self.skip()
            if self.peek() == ",":
                self.pos += 1
                self.skip()
            elif self.peek() != ")":
                raise self.error(f"expected ',' or ')' after a graph input, found {self.found()}")
        self.pos += 1
        self.expect(":", "':' after the graph's inputs")
        self.expect_end("the graph header")
        self.values.update(defined_here)
        return name, tuple(inputs)

    def stamp(self) -> Stamp:
        """`# stamp pass_name seconds` (the cursor is after `# stamp `)."""
        name = self.name("a pass name after '# stamp'")
        self.skip()
        seconds = self.number()
        self.expect_end("the stamp's seconds")
        return Stamp(name, float(seconds))


def _is_blank_or_comment(line: str) -> bool:
    stripped = line.lstrip()
    return not stripped or stripped.startswith("#")


def parse_graph(text: str) -> Graph:
    """Read a graph from the text that `format_graph` writes.

    Blank lines and `#` comment lines are allowed anywhere; `# stamp <pass> <seconds>` lines
    before the `graph` line are the graph's stamps. Raises `ParseError` (with line and column).
    """
    lines = text.removeprefix("\ufeff").split("\n")  # a byte order mark from an editor is not text
    values: dict[str, Value] = {}
    stamps: list[Stamp] = []
    index = 0
    # Preamble: stamps and comments up to the `graph` line.
    while index < len(lines) and _is_blank_or_comment(lines[index]):
        reader = _StatementReader(lines[index].rstrip("\r"), index + 1, values)
        reader.skip()
        stamp = _STAMP.match(reader.line, reader.pos)
        if stamp is not None:
            reader.pos = stamp.end()
            stamps.append(reader.stamp())
        index += 1
    if index == len(lines):
        end = _StatementReader(lines[-1], len(lines), values)
        raise end.error("expected 'graph name(...):', found the end of the text")
    types: dict = {}
    reader = _StatementReader(lines[index].rstrip("\r"), index + 1, values, types)
    reader.skip()
    name, inputs = reader.header()
    nodes = []
    outputs = None
    for lineno in range(index + 2, len(lines) + 1):
        line = lines[lineno - 1].rstrip("\r")
        if _is_blank_or_comment(line):
            continue
        reader = _StatementReader(line, lineno, values, types)
        reader.skip()
        if outputs is not None:
            raise reader.error(f"expected nothing after the return of graph {name}, found {reader.found()}")
        keyword = _RETURN_KEYWORD.match(line, reader.pos)
        try:
            if keyword is not None:
                reader.pos = keyword.end()
                outputs = reader.returns()
            else:
                nodes.append(reader.node())
        except RecursionError:
            raise reader.error("lists or tuples nested too deeply to read") from None
    if outputs is None:
        raise _StatementReader(lines[-1], len(lines), values).error(
            f"expected 'return (...)' to end graph {name}, found the end of the text", len(lines[-1])
        )
    return Graph(name, inputs, tuple(nodes), outputs, tuple(stamps))


def parse_node(text: str, values: dict[str, Value] | None = None) -> Node:
    """Read one node line, e.g. `%y: f32[4] cpu = aten.relu.default(%x)`; `values` maps the names
    it may read to their Values (it is not changed)."""
    reader = _StatementReader(text.strip(), 1, dict(values or {}))
    return reader.node()


def parse_arg(text: str, values: dict[str, Value] | None = None):
    """Read one argument, e.g. `[1, (2,), "x", torch.float32]`, as the printer writes it."""
    reader = _StatementReader(text.strip(), 1, dict(values or {}))
    try:
        arg = reader.arg()
    except RecursionError:
        raise reader.error("lists or tuples nested too deeply to read") from None
    reader.expect_end("the argument")
    return arg
