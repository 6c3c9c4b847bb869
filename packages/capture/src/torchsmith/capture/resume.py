"""Resume functions: a copy of a code object that starts in the middle.

After a graph break the rest of the function must run from the instruction after the break, with
the values that were on the stack and in the locals at that point. We build a new code object:

    [COPY_FREE_VARS n]  RESUME 0                      the usual function prologue
    LOAD_FAST ___stack0 | PUSH_NULL  [GET_ITER] ...    rebuild the value stack from arguments
    EXTENDED_ARG hi  JUMP_FORWARD lo                  jump to the break point
    <the original bytecode, unchanged>

The original bytes stay where they were relative to each other, so every relative jump inside
still works; only the exception table (shifted), the line table (prefixed with "no location"
entries) and the closure-variable operands (their slots move) change. All original locals become
positional arguments, then the cell variables (passed as the cell objects, so inner functions made
before the break keep sharing them), then one argument per stack slot. This
works the same on CPython 3.11, 3.12 and 3.13 (the same prologue opcodes and table formats; 3.13
loads a cell object with `LOAD_FAST` of the cell's slot, whose operand moves like the DEREF ones).
"""

import dis
import re
import types

from torchsmith.capture.errors import Unsupported

_DEREF_OPS = frozenset(
    {
        "LOAD_DEREF",
        "STORE_DEREF",
        "DELETE_DEREF",
        "LOAD_CLOSURE",
        "LOAD_CLASSDEREF",
        "MAKE_CELL",
        "LOAD_FROM_DICT_OR_DEREF",
    }
)
_FUSED_FAST = frozenset({"LOAD_FAST_LOAD_FAST", "STORE_FAST_LOAD_FAST", "STORE_FAST_STORE_FAST"})
_CACHE: dict[tuple, types.CodeType] = {}


def resume_code(code: types.CodeType, offset: int, slot_kinds: tuple[str, ...]) -> types.CodeType:
    """A code object running `code` from byte `offset`. Its arguments: `code`'s locals (in
    `co_varnames` order), its other cell variables (as cell objects), then one per stack slot.
    `slot_kinds` items: "value", "null" (a NULL is pushed, the argument is ignored) or "iter" (the
    argument is a list; its iterator is pushed)."""
    key = (code, offset, slot_kinds)
    cached = _CACHE.get(key)
    if cached is None:
        cached = _CACHE[key] = _build(code, offset, slot_kinds)
    return cached


def _build(code: types.CodeType, offset: int, slot_kinds: tuple[str, ...]) -> types.CodeType:
    if code.co_flags & (0x20 | 0x80 | 0x100 | 0x200):
        raise Unsupported("graph break in a generator or coroutine")
    op = dis.opmap
    # Cell variables become arguments too: the caller passes the cell objects themselves, which sit
    # in their slots as MAKE_CELL would have left them (the jump skips the original MAKE_CELLs).
    extra_cells = tuple(c for c in code.co_cellvars if c not in code.co_varnames)
    nvars = len(code.co_varnames) + len(extra_cells)
    nslots = len(slot_kinds)
    prologue: list[tuple[int, int]] = []
    if code.co_freevars:
        prologue.append((op["COPY_FREE_VARS"], len(code.co_freevars)))
    prologue.append((op["RESUME"], 0))
    for i, kind in enumerate(slot_kinds):
        if kind == "null":
            prologue.append((op["PUSH_NULL"], 0))
            continue
        if nvars + i > 255:
            raise Unsupported("too many locals to build a resume function")
        prologue.append((op["LOAD_FAST"], nvars + i))
        if kind == "iter":
            prologue.append((op["GET_ITER"], 0))
    delta = offset // 2  # JUMP_FORWARD counts code units from the end of the prologue
    if delta > 0xFFFF:
        raise Unsupported("function too long to build a resume function")
    prologue.append((op["EXTENDED_ARG"], delta >> 8))
    prologue.append((op["JUMP_FORWARD"], delta & 0xFF))
    head = bytes(b for pair in prologue for b in pair)
    units = len(prologue)

    names = tuple(code.co_varnames) + extra_cells + tuple(f"___stack{i}" for i in range(nslots))
    new_slots = {name: i for i, name in enumerate(names + code.co_freevars)}
    body = bytearray(code.co_code)
    cell_names = frozenset(code.co_cellvars + code.co_freevars)
    for ins in dis.get_instructions(code):
        if ins.opname in _FUSED_FAST and cell_names.intersection(ins.argval):
            raise Unsupported(f"{ins.opname} of a closure variable in a resume function")
        # 3.13 loads a cell itself (LOAD_CLOSURE before) with LOAD_FAST of its slot
        reads_cell = ins.opname in ("LOAD_FAST", "LOAD_FAST_CHECK") and ins.argval in cell_names
        if ins.opname in _DEREF_OPS or reads_cell:  # operands index the locals-plus array, which moved
            slot = new_slots[ins.argval]
            if ins.arg > 255 or slot > 255:
                raise Unsupported("too many closure variables to build a resume function")
            body[ins.offset + 1] = slot

    base = re.sub(r"^torchsmith_resume_in_(.*)_at_\d+$", r"\1", code.co_name)
    name = f"torchsmith_resume_in_{base}_at_{offset}"
    return code.replace(
        co_code=head + bytes(body),
        co_varnames=names,
        co_nlocals=len(names),
        co_argcount=len(names),
        co_posonlyargcount=0,
        co_kwonlyargcount=0,
        co_flags=code.co_flags & ~(0x04 | 0x08),
        co_stacksize=code.co_stacksize + nslots + 2,
        co_linetable=_no_location(units) + code.co_linetable,
        co_exceptiontable=_shift_exception_table(code, units),
        co_name=name,
        co_qualname=name,
    )


def _no_location(units: int) -> bytes:
    """Line-table entries saying the first `units` code units have no source location."""
    out = bytearray()
    while units > 0:
        n = min(units, 8)
        out.append(0x80 | (15 << 3) | (n - 1))
        units -= n
    return bytes(out)


def _varint(value: int, start: bool = False) -> bytes:
    chunks = [value & 63]
    value >>= 6
    while value:
        chunks.append(value & 63)
        value >>= 6
    chunks.reverse()
    out = [c | 0x40 for c in chunks[:-1]] + [chunks[-1]]
    if start:
        out[0] |= 0x80
    return bytes(out)


def _shift_exception_table(code: types.CodeType, units: int) -> bytes:
    out = bytearray()
    for entry in dis.Bytecode(code).exception_entries:
        start = entry.start // 2 + units
        length = (entry.end - entry.start) // 2
        target = entry.target // 2 + units
        out += _varint(start, start=True) + _varint(length) + _varint(target)
        out += _varint((entry.depth << 1) | int(entry.lasti))
    return bytes(out)
