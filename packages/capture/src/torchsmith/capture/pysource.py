"""Spelling user strings in generated Python: the one escaper and the one identifier sanitizer.

Guards and the code around graphs are Python source built from sources such as
`L['self']._modules['fc'].scale`. Attribute names, dict keys, global and parameter names come from
the user's program and may hold anything (`setattr(m, "a'] or f() or G['", 2.0)` is legal), so they
reach source only through these functions:

- `string_literal(text)`: a Python string literal that evaluates to `text`. Beyond what `repr()`
  escapes, every character other than ASCII letters, digits, `_` and space is written as an escape
  (`'layers\\x2e0'`), so a literal never holds the brackets, quotes, dots or parentheses that the
  guard rewriter (guards.py) reads as the structure of a source path.
- `attribute(source, name)`: `source.name` where `name` is a plain ASCII identifier, else
  `getattr(source, '...')`.
- `identifier(text)`: a valid Python identifier made from any text (for names of values).
"""

import keyword
import re

_PLAIN = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_ ")
_NOT_IDENTIFIER_CHAR = re.compile(r"[^A-Za-z0-9_]")


def string_literal(text: str) -> str:
    """A single-quoted Python literal equal to `text` (a `str` subclass is read as plain str);
    `string_literal("w'q")` is `'w\\x27q'`."""
    text = str.__str__(text)
    out = []
    for ch in text:
        if ch in _PLAIN:
            out.append(ch)
            continue
        code = ord(ch)
        if code < 0x100:
            out.append(f"\\x{code:02x}")
        elif code < 0x10000:
            out.append(f"\\u{code:04x}")
        else:
            out.append(f"\\U{code:08x}")
    return "'" + "".join(out) + "'"


def is_plain_name(name) -> bool:
    """Whether `name` may be written as is after a dot or as a keyword argument: an ASCII
    identifier that is not a keyword (non-ASCII identifiers are NFKC-normalized by the parser, so
    `x.ﬁ` would read attribute `fi`)."""
    return type(name) is str and name.isascii() and name.isidentifier() and not keyword.iskeyword(name)


def attribute(source: str, name: str) -> str:
    """Source reading attribute `name` of the object `source` evaluates to."""
    if is_plain_name(name):
        return f"{source}.{name}"
    return f"getattr({source}, {string_literal(name)})"


def set_attribute(source: str, name: str, value: str) -> str:
    """A statement setting attribute `name` of the object `source` evaluates to."""
    if is_plain_name(name):
        return f"{source}.{name} = {value}"
    return f"setattr({source}, {string_literal(name)}, {value})"


def subscript(source: str, key: str) -> str:
    """Source reading string key `key` of the mapping `source` evaluates to."""
    return f"{source}[{string_literal(key)}]"


def keyword_arguments(pairs) -> list[str]:
    """Call arguments for (name, value source) pairs: `name=value`, or `**{'name': value}` for a
    name that is not a plain identifier (a keyword passed through `**kwargs`)."""
    pairs = list(pairs)
    plain = [f"{name}={value}" for name, value in pairs if is_plain_name(name)]
    odd = [f"{string_literal(name)}: {value}" for name, value in pairs if not is_plain_name(name)]
    return plain + (["**{" + ", ".join(odd) + "}"] if odd else [])


def identifier(text: str, fallback: str = "v") -> str:
    """A valid ASCII Python identifier made from `text`: other characters become `_`, a leading
    digit gets a `t` before it, a keyword a `_` after it (callers make it unique)."""
    name = _NOT_IDENTIFIER_CHAR.sub("_", str(text)).strip("_") or fallback
    if name[0].isdigit():
        name = "t" + name
    if keyword.iskeyword(name):
        name += "_"
    return name
