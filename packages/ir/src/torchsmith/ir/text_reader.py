"""The cursor that reads one line of the text form: names, %values, types and arguments.

Lines are read with a position and a few compiled patterns rather than a token list: most of a
line is read once, by one `re.match` per piece. Every mistake becomes a `ParseError` that names
the line and column and says what was expected (`LineReader.error`).
"""

import contextlib
import json
import re
import warnings

import sympy
import torch

from torchsmith.ir.errors import ParseError, SymbolicError, TypeParseError
from torchsmith.ir.graph import ArgList, Slice, Value
from torchsmith.ir.symbolic import parse_dim
from torchsmith.ir.types import Type, parse_type

_BLANKS = (" ", "\t")
_SPACES = re.compile(r"[ \t]*")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*")
_VALUE_NAME = re.compile(r"[A-Za-z0-9_]+")
_KWARG = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)[ \t]*=(?!=)[ \t]*")
_NUMBER = re.compile(r"-?[0-9]+(\.[0-9]*)?([eE][+-]?[0-9]+)?")
_STRING = re.compile(r'"(?:[^"\\\x00-\x1f]|\\.)*"')
_LOOSE_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
_TENSOR_TYPE = re.compile(r"[a-z0-9]+\[[^\]]*\](?:\{[^}]*\})?[ \t]+[a-z]+(?::\d+)?(?:[ \t]+grad)?")
_SCALAR_TYPE = re.compile(r"(?:bool|int|float|complex|none)(?![A-Za-z0-9_])")
_SPECIAL_FLOATS = {"inf": float("inf"), "-inf": float("-inf"), "nan": float("nan")}
_WORD_CONSTANTS = {"None": None, "True": True, "False": False, "inf": float("inf"), "nan": float("nan")}
# `torch.float32`, `torch.strided`, `torch.channels_last`, ...: every dtype, layout and memory
# format torch exposes, under each of its names (the printer writes `str(x)`, also one of them).
_TORCH_CONSTANTS = {
    f"torch.{name}": value
    for name, value in vars(torch).items()
    if isinstance(value, (torch.dtype, torch.layout, torch.memory_format))
}
_TYPE_EXAMPLES = "a type such as 'f32[s0, 64] cpu', 'f32[4, 8]{1, 4} cuda:0 grad', 'sym(s0)' or 'int'"


@contextlib.contextmanager
def _quiet_syntax_warnings():
    """Dims are read with `ast.parse`, which warns about text like `1s0` before failing; the
    failure becomes a ParseError, so the warning is only noise."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SyntaxWarning)
        yield


class LineReader:
    """A cursor over one line of text, with the values defined so far (name -> Value).

    Reads the pieces a line is made of: names, %values, types and arguments; `parser.py`
    builds statements (graph header, nodes, return) from them."""

    __slots__ = ("line", "lineno", "pos", "values", "types")

    def __init__(self, line: str, lineno: int, values: dict[str, Value], types: dict | None = None):
        self.line = line
        self.lineno = lineno
        self.pos = 0
        self.values = values
        # Types already read in this text, by their spelling: a graph repeats a few types many
        # times, and this dict has no size limit, unlike parse_type's cache.
        self.types = {} if types is None else types

    # -- low level -------------------------------------------------------------------------------

    def error(self, message: str, pos: int | None = None) -> ParseError:
        pos = self.pos if pos is None else pos
        where = f"line {self.lineno}, column {pos + 1}"
        # A window of the line around the spot: a hostile line may be megabytes long.
        start = max(0, pos - 60)
        tail = "..." if pos + 60 < len(self.line) else ""
        shown = ("..." if start else "") + self.line[start : pos + 60] + tail
        caret = pos - start + (3 if start else 0)
        err = ParseError(f"{where}: {message}\n    {shown}\n    {' ' * caret}^")
        err.line, err.column = self.lineno, pos + 1
        return err

    def found(self) -> str:
        rest = self.line[self.pos :]
        if not rest.strip():
            return "the end of the line"
        return repr(rest[:12] + ("..." if len(rest) > 12 else ""))

    def skip(self) -> None:
        # The parser's most frequent call: usually the cursor is not on a space at all.
        if self.line[self.pos : self.pos + 1] in _BLANKS:
            self.pos = _SPACES.match(self.line, self.pos).end()

    def peek(self) -> str:
        return self.line[self.pos : self.pos + 1]

    def expect(self, char: str, what: str) -> None:
        """Consume `char` (after spaces) or fail saying `what` was expected."""
        self.skip()
        if self.line.startswith(char, self.pos):
            self.pos += len(char)
            self.skip()
        else:
            raise self.error(f"expected {what}, found {self.found()}")

    def at_end(self) -> bool:
        self.skip()
        return self.pos >= len(self.line)

    def expect_end(self, after: str) -> None:
        if not self.at_end():
            raise self.error(f"expected the end of the line after {after}, found {self.found()}")

    def string(self) -> str:
        """A JSON string starting at the cursor."""
        match = _STRING.match(self.line, self.pos)
        if match is None:
            if _LOOSE_STRING.match(self.line, self.pos) is None:
                raise self.error("unterminated string: expected a closing '\"' on this line")
            raise self.error("malformed string: control characters must be escaped, as in JSON (\\t, \\n)")
        try:
            text = json.loads(match.group())
        except json.JSONDecodeError as e:
            raise self.error(f"malformed string: {e.msg}", self.pos + e.pos) from None
        self.pos = match.end()
        return text

    def name(self, what: str) -> str:
        """A graph, op or pass name: a dotted identifier or a JSON string."""
        if self.peek() == '"':
            return self.string()
        match = _NAME.match(self.line, self.pos)
        if match is None:
            raise self.error(f"expected {what}, found {self.found()}")
        self.pos = match.end()
        return match.group()

    def balanced(self, what: str) -> str:
        """The text between the '(' at the cursor and its matching ')'; the cursor ends after it."""
        start = self.pos + 1
        depth = 0
        for i in range(self.pos, len(self.line)):
            char = self.line[i]
            if char == "(":
                depth += 1
            elif char == ")":
                depth -= 1
                if depth == 0:
                    self.pos = i + 1
                    return self.line[start:i]
        raise self.error(f"unclosed '(' in {what}: expected a matching ')' on this line")

    # -- values and types ------------------------------------------------------------------------

    def value_name(self) -> str:
        """The name after a '%' at the cursor."""
        self.pos += 1
        if self.peek() == '"':
            return self.string()
        match = _VALUE_NAME.match(self.line, self.pos)
        if match is None:
            raise self.error(f"expected a value name after '%', found {self.found()}")
        self.pos = match.end()
        return match.group()

    def value_ref(self) -> Value:
        """`%x`, which must already be defined."""
        start = self.pos
        name = self.value_name()
        value = self.values.get(name)
        if value is None:
            raise self.error(f"undefined value %{name}: every value must be defined before it is used", start)
        return value

    def value_type(self) -> Type:
        start = self.pos
        if self.line.startswith("sym(", start):
            self.pos += 3
            self.balanced("a sym(...) type")
        else:
            match = _TENSOR_TYPE.match(self.line, start) or _SCALAR_TYPE.match(self.line, start)
            if match is None:
                raise self.error(f"expected {_TYPE_EXAMPLES}, found {self.found()}")
            self.pos = match.end()
        text = self.line[start : self.pos]
        t = self.types.get(text)
        if t is None:
            try:
                with _quiet_syntax_warnings():
                    t = self.types[text] = parse_type(text)
            except (TypeParseError, ArithmeticError) as e:  # `s0 % 0` fails inside sympy
                raise self.error(f"bad type: {e}", start) from None
        return t

    def declaration(self, defined_here: dict[str, Value]) -> Value:
        """`%x: f32[4] cpu`, a new value; its name must be new in the graph."""
        start = self.pos
        if self.peek() != "%":
            raise self.error(f"expected a value declaration such as '%x: f32[4] cpu', found {self.found()}")
        name = self.value_name()
        if name in self.values or name in defined_here:
            raise self.error(f"value %{name} is defined twice; every value name must be unique", start)
        self.expect(":", f"':' and a type after %{name}")
        value = Value(name, self.value_type())
        defined_here[name] = value
        return value

    # -- arguments -------------------------------------------------------------------------------

    def arg(self):
        """One argument: a %value, a constant, a list `[...]` or a tuple `(...)`."""
        line, pos = self.line, self.pos
        char = line[pos : pos + 1]
        if char == "%":
            return self.value_ref()
        if char == '"':
            return self.string()
        if char == "[":
            return ArgList(self.sequence("]", "list"))
        if char == "(":
            return self.tuple_arg()
        if char == "-" or "0" <= char <= "9":
            return self.number()
        if line.startswith("...", pos):
            self.pos += 3
            return Ellipsis
        match = _NAME.match(line, pos)
        if match is None:
            expected = "an argument (a %value, a constant, [list] or (tuple))"
            raise self.error(f"expected {expected}, found {self.found()}")
        word = match.group()
        self.pos = match.end()
        if word in _WORD_CONSTANTS:
            return _WORD_CONSTANTS[word]
        if word in _TORCH_CONSTANTS:
            return _TORCH_CONSTANTS[word]
        if self.peek() == "(":
            if word == "sym":
                return self.sym_arg()
            if word == "slice":
                return self.slice_arg()
            if word == "complex":
                return self.complex_arg()
            if word == "device":
                return self.device_arg()
        raise self.error(
            f"unknown name {word!r}: expected None, True, False, inf, nan, a torch dtype, layout or memory "
            "format, or one of sym(...), slice(...), complex(...), device(...)",
            pos,
        )

    def number(self):
        line = self.line
        if line.startswith(("-inf", "inf", "nan"), self.pos):
            for text, value in _SPECIAL_FLOATS.items():
                if line.startswith(text, self.pos) and not _VALUE_NAME.match(line, self.pos + len(text)):
                    self.pos += len(text)
                    return value
        match = _NUMBER.match(self.line, self.pos)
        if match is None:
            raise self.error(f"expected a number, found {self.found()}")
        self.pos = match.end()
        text = match.group()
        # Ints and floats stay distinct: `1` is an int, `1.0` and `1e-05` are floats.
        if match.group(1) is not None or match.group(2) is not None:
            return float(text)
        try:
            return int(text)
        except ValueError as e:  # more digits than Python converts (sys.get_int_max_str_digits)
            raise self.error(f"bad integer: {e}", match.start()) from None

    def sequence(self, close: str, what: str) -> list:
        """Comma-separated arguments after the opening bracket at the cursor, up to `close`."""
        self.pos += 1
        self.skip()
        items = []
        line = self.line
        while line[self.pos : self.pos + 1] != close:
            items.append(self.arg())
            self.skip()
            char = line[self.pos : self.pos + 1]
            if char == ",":
                self.pos += 1
                self.skip()
            elif char != close:
                raise self.error(f"expected ',' or '{close}' in {what}, found {self.found()}")
        self.pos += 1
        return items

    def tuple_arg(self) -> tuple:
        start = self.pos
        items = self.sequence(")", "tuple")
        # `(a)` is not a tuple in Python; the printer writes a 1-tuple as `(a,)`.
        if len(items) == 1 and self.line[start + 1 : self.pos - 1].rstrip()[-1:] != ",":
            raise self.error("a tuple of one element needs a trailing comma: write (x,)", start)
        return tuple(items)

    def call_args(self, what: str, count: int) -> list:
        start = self.pos
        items = self.sequence(")", what)
        if len(items) != count:
            raise self.error(f"{what} takes {count} arguments, found {len(items)}", start)
        return items

    def sym_arg(self) -> sympy.Basic:
        start = self.pos + 1
        text = self.balanced("sym(...)")
        try:
            with _quiet_syntax_warnings():
                value = parse_dim(text)
        except (SymbolicError, ArithmeticError) as e:  # `s0 % 0` fails inside sympy
            raise self.error(f"bad symbolic expression: {e}", start) from None
        # A constant `sym(4)` is a sympy Integer, not the int 4; the printer kept them apart.
        return value if isinstance(value, sympy.Basic) else sympy.sympify(value)

    def slice_arg(self) -> Slice:
        return Slice(*self.call_args("slice(start, stop, step)", 3))

    def complex_arg(self) -> complex:
        start = self.pos
        real, imag = self.call_args("complex(real, imag)", 2)
        if not all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in (real, imag)):
            raise self.error("complex(real, imag) takes two numbers", start)
        return complex(float(real), float(imag))

    def device_arg(self) -> torch.device:
        self.expect("(", "'('")
        start = self.pos
        if self.peek() != '"':
            raise self.error(f'expected a device string such as "cuda:0", found {self.found()}')
        text = self.string()
        try:
            device = torch.device(text)
        except RuntimeError as e:
            raise self.error(f"bad device {text!r}: {e}", start) from None
        self.expect(")", "')' after the device string")
        return device

    def call(self) -> tuple[str, tuple, tuple]:
        """`op.name(args, key=value)`: the op name, args and kwargs."""
        op = self.name("an op name such as aten.add.Tensor")
        if self.peek() != "(":
            raise self.error(f"expected '(' after the op name {op}, found {self.found()}")
        self.pos += 1
        args: list = []
        kwargs: list[tuple[str, object]] = []
        self.skip()
        line = self.line
        while line[self.pos : self.pos + 1] != ")":
            kwarg = _KWARG.match(line, self.pos)
            if kwarg is not None:
                key = kwarg.group(1)
                if any(k == key for k, _ in kwargs):
                    raise self.error(f"keyword argument {key}= is given twice")
                self.pos = kwarg.end()
                kwargs.append((key, self.arg()))
            elif kwargs:
                raise self.error("a positional argument cannot follow keyword arguments")
            else:
                args.append(self.arg())
            self.skip()
            char = line[self.pos : self.pos + 1]
            if char == ",":
                self.pos += 1
                self.skip()
            elif char != ")":
                raise self.error(f"expected ',' or ')' after an argument of {op}, found {self.found()}")
        self.pos += 1
        return op, tuple(args), tuple(kwargs)
