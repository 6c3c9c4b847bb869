"""A version-neutral instruction list for CPython 3.11, 3.12 and 3.13 bytecode.

The symbolic executor reads only this form, so each interpreter version's quirks are absorbed here:

- `CACHE`, `EXTENDED_ARG`, `PRECALL`, `RESUME` and `NOP` are dropped; `KW_NAMES` is folded into the
  next `CALL` (its `argval` becomes the keyword names tuple);
- every jump is one of `JUMP`, `POP_JUMP_IF_TRUE/FALSE/NONE/NOT_NONE`, `JUMP_IF_TRUE/FALSE_OR_POP`,
  `FOR_ITER`, with `target` an index into the list (3.11's FORWARD/BACKWARD spellings are merged);
- `FOR_ITER` means "on exhaustion pop the iterator and go to `target`" on both versions (3.12's
  `END_FOR` is skipped over);
- 3.12's `LOAD_ATTR` method bit becomes `LOAD_METHOD`, `LOAD_SUPER_ATTR` keeps its two flags in
  `argval` as (name, is_method, two_arg), `LOAD_GLOBAL`'s NULL bit is `(name, push_null)`;
- `BINARY_OP`'s argval is the operator text (`"+"`, `"+="`), `COMPARE_OP`'s the comparison text;
- 3.12's `RETURN_CONST`, `BINARY_SLICE`, `STORE_SLICE`, `LOAD_FAST_CHECK`, `CALL_INTRINSIC_1` are
  rewritten into older, simpler instructions (`LOAD_CONST`+`RETURN_VALUE`, `BUILD_SLICE`+subscript,
  `LOAD_FAST`, `LIST_TO_TUPLE`/`UNARY_POSITIVE`);
- 3.13's fused `LOAD_FAST_LOAD_FAST`, `STORE_FAST_LOAD_FAST` and `STORE_FAST_STORE_FAST` are split
  into two instructions at the same offset, and `CALL_KW` becomes `CALL` with the keyword names
  folded in from the `LOAD_CONST` before it (as `KW_NAMES` is); 3.13's `FOR_ITER` exhaustion skips
  both `END_FOR` and the `POP_TOP` after it;
- the order of a callable and its NULL differs: 3.11/3.12 push `NULL, callable` (LOAD_GLOBAL,
  PUSH_NULL, LOAD_ATTR's method form), 3.13 pushes `callable, NULL` (`NULL_AFTER_CALLABLE`); handlers
  push in the interpreter's order so a resumed stack matches what the bytecode expects;
- each instruction carries the innermost exception-table entry covering it (3.12 inlined
  comprehensions and `with` blocks use these).

Anything else passes through under its own name; an opcode without a handler is a graph break
naming it (the tracer's loop).
"""

import dis
import opcode
import sys
from dataclasses import dataclass
from types import CodeType

from torchsmith.capture.errors import UnsupportedBytecodeError

PY312 = sys.version_info >= (3, 12)
PY313 = sys.version_info >= (3, 13)
NULL_AFTER_CALLABLE = PY313

_DROPPED = frozenset({"CACHE", "EXTENDED_ARG", "PRECALL", "RESUME", "NOP", "KW_NAMES"})

_JUMP_ALIASES = {
    "JUMP_FORWARD": "JUMP",
    "JUMP_BACKWARD": "JUMP",
    "JUMP_BACKWARD_NO_INTERRUPT": "JUMP",
    "JUMP_NO_INTERRUPT": "JUMP",
    "POP_JUMP_FORWARD_IF_TRUE": "POP_JUMP_IF_TRUE",
    "POP_JUMP_BACKWARD_IF_TRUE": "POP_JUMP_IF_TRUE",
    "POP_JUMP_FORWARD_IF_FALSE": "POP_JUMP_IF_FALSE",
    "POP_JUMP_BACKWARD_IF_FALSE": "POP_JUMP_IF_FALSE",
    "POP_JUMP_FORWARD_IF_NONE": "POP_JUMP_IF_NONE",
    "POP_JUMP_BACKWARD_IF_NONE": "POP_JUMP_IF_NONE",
    "POP_JUMP_FORWARD_IF_NOT_NONE": "POP_JUMP_IF_NOT_NONE",
    "POP_JUMP_BACKWARD_IF_NOT_NONE": "POP_JUMP_IF_NOT_NONE",
}

JUMPS = frozenset(
    {
        "JUMP",
        "POP_JUMP_IF_TRUE",
        "POP_JUMP_IF_FALSE",
        "POP_JUMP_IF_NONE",
        "POP_JUMP_IF_NOT_NONE",
        "JUMP_IF_TRUE_OR_POP",
        "JUMP_IF_FALSE_OR_POP",
        "FOR_ITER",
        "SEND",
    }
)

_FUSED_FAST = frozenset({"LOAD_FAST_LOAD_FAST", "STORE_FAST_LOAD_FAST", "STORE_FAST_STORE_FAST"})

# CALL_INTRINSIC_1 operands (3.12, Include/internal/pycore_intrinsics.h).
_INTRINSIC_1 = {5: "UNARY_POSITIVE", 6: "LIST_TO_TUPLE", 3: "STOPITERATION_ERROR"}


@dataclass(frozen=True, slots=True)
class ExceptionEntry:
    """The handler covering an instruction: jump to `target` (an index) with the stack cut to
    `depth`, pushing the offset of the raising instruction first when `lasti`."""

    target: int
    depth: int
    lasti: bool


@dataclass(frozen=True, slots=True)
class Instruction:
    """One normalized instruction. `offset` is the byte offset of the original instruction it
    came from (several normalized instructions may share one); `target` is an index."""

    opname: str
    arg: int | None
    argval: object
    offset: int
    line: int | None
    target: int | None = None
    exception: ExceptionEntry | None = None

    def __str__(self) -> str:
        target = f" -> {self.target}" if self.target is not None else ""
        return f"{self.offset:>4} {self.opname} {self.argval!r}{target}"


def _binary_op_names() -> list[str]:
    # _nb_ops lists (name, symbol) pairs in BINARY_OP operand order on 3.11 and 3.12.
    return [symbol for _, symbol in getattr(dis, "_nb_ops", None) or opcode._nb_ops]


_BINARY_OPS = _binary_op_names()


def _exception_entries(code: CodeType) -> list:
    return list(dis.Bytecode(code).exception_entries)


def normalize(code: CodeType) -> list[Instruction]:
    """The normalized instruction list of `code` (see the module docstring)."""
    raw = list(dis.get_instructions(code))
    pending: list[tuple[str, int | None, object, int, int | None, int | None]] = []
    # pending entries carry jump targets as byte offsets until every index is known
    line = None
    kw_names: tuple = ()
    cell_names = frozenset(code.co_cellvars + code.co_freevars) if PY313 else frozenset()
    for ins in raw:
        starts = getattr(ins, "line_number", None) if sys.version_info >= (3, 13) else ins.starts_line
        if starts is not None:
            line = starts
        name, arg, argval, off = ins.opname, ins.arg, ins.argval, ins.offset
        if name == "KW_NAMES":
            kw_names = code.co_consts[arg]
            continue
        if name == "CALL_KW":
            # the keyword names are the constant loaded just before (3.13)
            last = pending.pop() if pending else None
            if last is None or last[0] != "LOAD_CONST" or not isinstance(last[2], tuple):
                raise UnsupportedBytecodeError("CALL_KW without a constant tuple of names", code, line)
            pending.append(("CALL", arg, last[2], off, line, None))
            continue
        if name in _DROPPED:
            continue
        name = _JUMP_ALIASES.get(name, name)
        emit = lambda n, a=arg, v=argval, t=None: pending.append((n, a, v, off, line, t))  # noqa: B023
        if name in JUMPS:
            emit(name, arg, None, argval)
        elif name == "CALL":
            emit("CALL", arg, kw_names)
            kw_names = ()
        elif name == "LOAD_GLOBAL":
            emit("LOAD_GLOBAL", arg, (argval, bool(arg & 1)))
        elif name == "LOAD_ATTR" and PY312:
            emit("LOAD_METHOD" if arg & 1 else "LOAD_ATTR", arg, argval)
        elif name == "LOAD_SUPER_ATTR":
            emit("LOAD_SUPER_ATTR", arg, (argval, bool(arg & 1), bool(arg & 2)))
        elif name == "BINARY_OP":
            emit("BINARY_OP", arg, _BINARY_OPS[arg])
        elif name == "RETURN_CONST":
            emit("LOAD_CONST", arg, argval)
            emit("RETURN_VALUE", None, None)
        elif name == "BINARY_SLICE":
            emit("BUILD_SLICE", 2, 2)
            emit("BINARY_SUBSCR", None, None)
        elif name == "STORE_SLICE":
            emit("BUILD_SLICE", 2, 2)
            emit("STORE_SUBSCR", None, None)
        elif name in ("LOAD_FAST", "LOAD_FAST_CHECK") and argval in cell_names:
            emit("LOAD_CLOSURE", arg, argval)  # 3.13 spells LOAD_CLOSURE as LOAD_FAST of the cell
        elif name == "LOAD_FAST_CHECK":
            emit("LOAD_FAST", arg, argval)
        elif name in _FUSED_FAST and cell_names.intersection(argval):
            raise UnsupportedBytecodeError(f"{name} of a cell variable", code, line)
        elif name == "LOAD_FAST_LOAD_FAST":
            emit("LOAD_FAST", arg >> 4, argval[0])
            emit("LOAD_FAST", arg & 15, argval[1])
        elif name == "STORE_FAST_LOAD_FAST":
            emit("STORE_FAST", arg >> 4, argval[0])
            emit("LOAD_FAST", arg & 15, argval[1])
        elif name == "STORE_FAST_STORE_FAST":
            emit("STORE_FAST", arg >> 4, argval[0])
            emit("STORE_FAST", arg & 15, argval[1])
        elif name == "CALL_INTRINSIC_1":
            if arg not in _INTRINSIC_1:
                raise UnsupportedBytecodeError(f"CALL_INTRINSIC_1 {arg}", code, line)
            emit(_INTRINSIC_1[arg], None, None)
        elif name == "KW_NAMES":
            continue
        else:
            emit(name, arg, argval)
    index_of_offset = _offset_index(raw, pending)
    entries = _exception_entries(code)
    out = []
    for i, (name, arg, argval, off, ln, target_off) in enumerate(pending):
        target = None
        if target_off is not None:
            target = index_of_offset(target_off)
            if name == "FOR_ITER" and target < len(pending) and pending[target][0] == "END_FOR":
                target += 1  # 3.12: exhaustion skips END_FOR; the iterator is popped like 3.11
                if PY313 and target < len(pending) and pending[target][0] == "POP_TOP":
                    target += 1  # 3.13: END_FOR pops one value, a POP_TOP the other
        exception = None
        for entry in entries:  # the innermost (last listed) covering entry wins
            if entry.start <= off < entry.end:
                exception = ExceptionEntry(index_of_offset(entry.target), entry.depth, entry.lasti)
        out.append(Instruction(name, arg, argval, off, ln, target, exception))
        del i
    return out


def _offset_index(raw, pending):
    """A function mapping a byte offset to the index of the first normalized instruction at or
    after it (dropped instructions such as NOP or EXTENDED_ARG may be jump targets)."""
    first_at: dict[int, int] = {}
    for i, entry in enumerate(pending):
        first_at.setdefault(entry[3], i)
    offsets = sorted({ins.offset for ins in raw} | set(first_at))
    mapping: dict[int, int] = {}
    next_index = len(pending)
    for off in reversed(offsets):
        if off in first_at:
            next_index = first_at[off]
        mapping[off] = next_index
    return lambda off: mapping[off]


def start_of_original(instructions: list[Instruction], index: int) -> int:
    """The index of the first normalized instruction made from the same original instruction as
    `index` (a graph break inside a split instruction resumes at the whole original one)."""
    while index > 0 and instructions[index - 1].offset == instructions[index].offset:
        index -= 1
    return index


def index_of_offset(instructions: list[Instruction], offset: int) -> int:
    """The index of the first instruction at byte `offset` or later."""
    for i, ins in enumerate(instructions):
        if ins.offset >= offset:
            return i
    return len(instructions)


def format_instructions(instructions: list[Instruction]) -> str:
    """A readable listing, one instruction a line with its index."""
    return "\n".join(f"{i:>3} {ins}" for i, ins in enumerate(instructions))
