"""Opcode handlers for loads, stores, stack shuffles and building containers."""

import builtins

from torchsmith.capture.errors import Unsupported
from torchsmith.capture.instructions import NULL_AFTER_CALLABLE
from torchsmith.capture.ops_py313 import Py313Ops
from torchsmith.capture.pysource import subscript
from torchsmith.capture.variables import (
    NULL,
    CellVar,
    ConstVar,
    DictVar,
    ListVar,
    SetVar,
    SymVar,
    TupleVar,
    is_const,
)


def mark_mutated(container) -> None:
    """Record that a list or dict read through a source changed, so the code after the graph
    writes the new contents back (3.12+ comprehensions build into a list or dict on the stack,
    which a resume function receives from its caller)."""
    if container.source is not None:
        container.mutated = True


class StackOps(Py313Ops):
    """Mixin of the Tracer: handlers return None to continue, a tracker to return."""

    # ----------------------------------------------------------------- locals and constants
    def op_LOAD_FAST(self, frame, ins):
        value = frame.locals.get(ins.argval)
        if value is None:
            raise Unsupported(f"local variable {ins.argval!r} referenced before assignment")
        frame.push(value)

    def op_LOAD_FAST_AND_CLEAR(self, frame, ins):
        # 3.12 inlined comprehensions save the outer binding (a cell, for cell variables) this way
        if ins.argval in frame.code.co_cellvars:
            frame.push(frame.cells.pop(ins.argval, NULL))
        else:
            frame.push(frame.locals.pop(ins.argval, NULL))

    def op_STORE_FAST(self, frame, ins):
        value = frame.pop()
        name = ins.argval
        if name in frame.code.co_cellvars and (value is NULL or isinstance(value, CellVar)):
            if value is NULL:  # ... and restore it afterwards
                frame.cells.pop(name, None)
            else:
                frame.cells[name] = value
        elif value is NULL:
            frame.locals.pop(name, None)
        else:
            frame.locals[name] = value

    def op_DELETE_FAST(self, frame, ins):
        if frame.locals.pop(ins.argval, None) is None:
            raise Unsupported(f"local variable {ins.argval!r} deleted before assignment")

    def op_LOAD_CONST(self, frame, ins):
        value = ins.argval
        frame.push(self.wrap_unguarded(value) if isinstance(value, tuple) else ConstVar(value))

    def op_LOAD_GLOBAL(self, frame, ins):
        name, push_null = ins.argval
        if push_null and not NULL_AFTER_CALLABLE:
            frame.push(NULL)
        frame.push(self.load_global(frame, name))
        if push_null and NULL_AFTER_CALLABLE:
            frame.push(NULL)

    def load_global(self, frame, name: str):
        write = self.global_writes.get((id(frame.globals), name))
        if write is not None:
            return write[2]
        if name in frame.globals:
            return self.wrap(frame.globals[name], subscript(frame.globals_source, name))
        if hasattr(builtins, name):
            return ConstVar(getattr(builtins, name))
        raise Unsupported(f"name {name!r} is not defined")

    def op_STORE_GLOBAL(self, frame, ins):
        self.global_writes[(id(frame.globals), ins.argval)] = (
            frame.globals_source,
            frame.globals,
            frame.pop(),
        )

    # ----------------------------------------------------------------- cells
    def op_MAKE_CELL(self, frame, ins):
        # a fresh cell holding the local's value (arguments captured by inner functions), as CPython
        # does at function start and, in 3.12, at the start of an inlined comprehension
        frame.cells[ins.argval] = CellVar(contents=frame.locals.pop(ins.argval, None))

    def op_COPY_FREE_VARS(self, frame, ins):
        return None

    def op_LOAD_CLOSURE(self, frame, ins):
        frame.push(frame.cells[ins.argval])

    def op_LOAD_DEREF(self, frame, ins):
        frame.push(self.cell_contents(frame.cells[ins.argval], ins.argval))

    def op_LOAD_CLASSDEREF(self, frame, ins):
        self.op_LOAD_DEREF(frame, ins)

    def cell_contents(self, cell: CellVar, name: str):
        if cell.contents is None:
            if cell.real is None:
                raise Unsupported(f"free variable {name!r} referenced before assignment")
            try:
                value = cell.real.cell_contents
            except ValueError as e:
                raise Unsupported(f"free variable {name!r} referenced before assignment") from e
            source = f"{cell.source}.cell_contents" if cell.source else None
            cell.contents = self.wrap(value, source)
        return cell.contents

    def op_STORE_DEREF(self, frame, ins):
        cell = frame.cells[ins.argval]
        cell.contents = frame.pop()
        if cell.real is not None and not cell.written:
            cell.written = True
            self.written_cells.append(cell)

    # ----------------------------------------------------------------- stack
    def op_POP_TOP(self, frame, ins):
        frame.pop()

    def op_PUSH_NULL(self, frame, ins):
        frame.push(NULL)

    def op_COPY(self, frame, ins):
        frame.push(frame.stack[-ins.arg])

    def op_SWAP(self, frame, ins):
        stack = frame.stack
        stack[-1], stack[-ins.arg] = stack[-ins.arg], stack[-1]

    def op_END_FOR(self, frame, ins):
        frame.popn(2)

    # ----------------------------------------------------------------- building containers
    def op_BUILD_TUPLE(self, frame, ins):
        frame.push(TupleVar(frame.popn(ins.arg)))

    def op_BUILD_LIST(self, frame, ins):
        frame.push(ListVar(frame.popn(ins.arg)))

    def op_BUILD_SET(self, frame, ins):
        items = frame.popn(ins.arg)
        frame.push(SetVar(self.set_items([], items)))

    def set_items(self, existing: list, new: list) -> list:
        if not is_const(*new):
            raise Unsupported("sets of non-constant values (e.g. tensors) are not supported")
        values = [v.value for v in existing]
        for item in new:
            if item.value not in values:
                values.append(item.value)
                existing = existing + [item]
        return existing

    def op_BUILD_MAP(self, frame, ins):
        flat = frame.popn(2 * ins.arg)
        frame.push(DictVar({self.dict_key(k): v for k, v in zip(flat[::2], flat[1::2])}))

    def op_BUILD_CONST_KEY_MAP(self, frame, ins):
        keys = frame.pop()
        values = frame.popn(ins.arg)
        frame.push(DictVar({self.dict_key(k): v for k, v in zip(keys.items, values)}))

    def dict_key(self, key):
        if not isinstance(key, ConstVar):
            raise Unsupported(f"dict key {key.describe()} is not a constant")
        try:
            hash(key.value)
        except TypeError as e:
            raise Unsupported(f"unhashable dict key {key.value!r}") from e
        return key.value

    def op_BUILD_SLICE(self, frame, ins):
        parts = frame.popn(ins.arg)
        if not all(isinstance(p, SymVar) or is_const(p) for p in parts):
            raise Unsupported("slice bounds must be Python ints (tensor slice bounds are not supported)")
        # sizes stay symbolic in a tensor's slice (`ids[:, :seq_len]`); other uses specialize them
        frame.push(ConstVar(slice(*[p.expr if isinstance(p, SymVar) else p.value for p in parts])))

    def op_LIST_APPEND(self, frame, ins):
        value = frame.pop()
        target = frame.stack[-ins.arg]
        target.items.append(value)
        mark_mutated(target)

    def op_LIST_EXTEND(self, frame, ins):
        value = frame.pop()
        target = frame.stack[-ins.arg]
        target.items.extend(self.sequence_items(value))
        mark_mutated(target)

    def op_SET_ADD(self, frame, ins):
        value = frame.pop()
        target = frame.stack[-ins.arg]
        target.items = self.set_items(target.items, [value])

    def op_SET_UPDATE(self, frame, ins):
        value = frame.pop()
        target = frame.stack[-ins.arg]
        target.items = self.set_items(target.items, self.sequence_items(value))

    def op_MAP_ADD(self, frame, ins):
        value = frame.pop()
        key = frame.pop()
        target = frame.stack[-ins.arg]
        target.items[self.dict_key(key)] = value
        mark_mutated(target)

    def op_DICT_UPDATE(self, frame, ins):
        value = frame.pop()
        frame.stack[-ins.arg].items.update(self.dict_items(value))

    def op_DICT_MERGE(self, frame, ins):
        value = frame.pop()
        target = frame.stack[-ins.arg]
        items = self.dict_items(value)
        for key in items:
            if key in target.items:
                raise Unsupported(f"got multiple values for keyword argument {key!r}")
        target.items.update(items)

    def dict_items(self, value) -> dict:
        if isinstance(value, DictVar):
            return dict(value.items)
        if isinstance(value, ConstVar) and isinstance(value.value, dict):
            return {k: self.wrap_unguarded(v) for k, v in value.value.items()}
        raise Unsupported(f"cannot use {value.describe()} as a mapping")

    def op_LIST_TO_TUPLE(self, frame, ins):
        frame.push(TupleVar(frame.pop().items))

    def op_UNPACK_SEQUENCE(self, frame, ins):
        items = self.sequence_items(frame.pop())
        if len(items) != ins.arg:
            raise Unsupported(f"cannot unpack {len(items)} values into {ins.arg} names")
        for item in reversed(items):
            frame.push(item)

    def op_UNPACK_EX(self, frame, ins):
        before, after = ins.arg & 0xFF, ins.arg >> 8
        items = self.sequence_items(frame.pop())
        if len(items) < before + after:
            raise Unsupported(f"not enough values to unpack (expected at least {before + after})")
        middle = ListVar(items[before : len(items) - after])
        for item in reversed(items[len(items) - after :]):
            frame.push(item)
        frame.push(middle)
        for item in reversed(items[:before]):
            frame.push(item)

    # ----------------------------------------------------------------- strings
    def op_FORMAT_VALUE(self, frame, ins):
        flags = ins.arg
        spec = frame.pop().value if flags & 0x04 else ""
        value = frame.pop()
        if not isinstance(value, ConstVar):
            raise Unsupported(f"formatting {value.describe()} into a string")
        v = value.value
        v = {0: lambda x: x, 1: str, 2: repr, 3: ascii}[flags & 0x03](v)
        frame.push(ConstVar(format(v, spec)))

    def op_BUILD_STRING(self, frame, ins):
        parts = frame.popn(ins.arg)
        frame.push(ConstVar("".join(p.value for p in parts)))
