"""The one place where text from a graph (names, sources, origins, symbols) becomes generated code.

Every code generator (the C++ and Triton emitters, the Python code of the interpreter and of guards)
builds its source from these pieces only, so no user string lands in source as it is:

- `cpp_comment(text)` / `python_comment(text)`: the body of a one-line comment; newlines, line
  splices and every other character that could end the comment or change the line are escaped.
- `cpp_string(text)` / `python_string(text)`: a complete string literal (quotes included).
- `identifier(text)`: a valid C/C++/Python identifier that is not a keyword.
- `IdentifierNamer`: unique identifiers for a scope: two different texts never share a name.

    >>> cpp_comment('f.py\\nsystem("x")')
    'f.py\\\\x0asystem("x")'
    >>> IdentifierNamer().name("a.b"), IdentifierNamer().name("a_b")
    ('a_b', 'a_b')
"""

import keyword
import re

# Printable ASCII except the backslash (escaped so that a comment can never end in a line splice).
_SAFE_COMMENT = re.compile(r"[ -\[\]-~]*")

_CPP_KEYWORDS = frozenset(
    """alignas alignof and and_eq asm auto bitand bitor bool break case catch char char8_t char16_t
    char32_t class compl concept const consteval constexpr constinit const_cast continue co_await
    co_return co_yield decltype default delete do double dynamic_cast else enum explicit export extern
    false float for friend goto if inline int long mutable namespace new noexcept not not_eq nullptr
    operator or or_eq private protected public register reinterpret_cast requires return short signed
    sizeof static static_assert static_cast struct switch template this thread_local throw true try
    typedef typeid typename union unsigned using virtual void volatile wchar_t while xor xor_eq
    restrict main""".split()
)

# Longest comment text kept: a comment names an origin, not a document.
MAX_COMMENT_CHARS = 400


def _escape_char(char: str) -> str:
    code = ord(char)
    if code < 0x100:
        return f"\\x{code:02x}"
    if code < 0x10000:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"


def _comment_text(text: str) -> str:
    text = str(text)
    if len(text) > MAX_COMMENT_CHARS:
        text = text[:MAX_COMMENT_CHARS] + "..."
    if _SAFE_COMMENT.fullmatch(text):
        return text
    return "".join(c if _SAFE_COMMENT.fullmatch(c) else _escape_char(c) for c in text)


def cpp_comment(text: str) -> str:
    """`text` made safe to follow `//` on one line of C++ (and inside `/* */`): non-printable and
    non-ASCII characters and backslashes become `\\xNN` escapes, `*/` and trigraph `??` are broken."""
    return _comment_text(text).replace("*/", "*\\x2f").replace("??", "?\\x3f")


def python_comment(text: str) -> str:
    """`text` made safe to follow `#` on one line of Python or Triton source."""
    return _comment_text(text)


def cpp_string(text: str) -> str:
    """A C++ string literal (quotes included) whose value is `text` as UTF-8 bytes."""
    out = ['"']
    for byte in str(text).encode("utf-8", "surrogatepass"):
        char = chr(byte)
        if char in '"\\?' or not 0x20 <= byte < 0x7F:
            out.append(f"\\{byte:03o}")  # three octal digits: never runs into the next character
        else:
            out.append(char)
    out.append('"')
    return "".join(out)


def python_string(text: str) -> str:
    """A Python string literal (quotes included) whose value is `text`, in ASCII only."""
    return ascii(str(text))


def identifier(text: str, prefix: str = "v") -> str:
    """A valid identifier in C, C++ and Python made from `text`: other characters become `_`, a
    leading digit or an empty result gets `prefix`, keywords and names starting with `__` (reserved
    in C++) get `prefix` too."""
    clean = "".join(c if c.isascii() and (c.isalnum() or c == "_") else "_" for c in str(text))
    if not clean or clean[0].isdigit() or clean.startswith("__") or _reserved(clean):
        clean = f"{prefix}_{clean}"
    return clean


def _reserved(name: str) -> bool:
    return keyword.iskeyword(name) or keyword.issoftkeyword(name) or name in _CPP_KEYWORDS or (
        len(name) > 1 and name[0] == "_" and name[1].isupper()
    )


class IdentifierNamer:
    """Hands out identifiers for one scope: each distinct text gets its own valid name, stable for
    repeated requests; names given as `taken` are never handed out."""

    __slots__ = ("_by_text", "_used")

    def __init__(self, taken=()):
        self._by_text: dict[str, str] = {}
        self._used: set[str] = set(taken)

    def name(self, text: str, prefix: str = "v") -> str:
        """The identifier of `text` in this scope."""
        known = self._by_text.get(text)
        if known is not None:
            return known
        base = identifier(text, prefix)
        candidate, n = base, 1
        while candidate in self._used:
            n += 1
            candidate = f"{base}_{n}"
        self._used.add(candidate)
        self._by_text[text] = candidate
        return candidate
