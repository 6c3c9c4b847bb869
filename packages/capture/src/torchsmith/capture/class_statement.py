"""Class statements inside compiled code (`LOAD_BUILD_CLASS`).

`torch.masked`'s reductions define a `torch.autograd.Function` subclass in their body on every call,
then use it only for `MaskedTensor` inputs. Breaking the graph at the class statement would run
every masked op eagerly, so capture builds the class itself, at capture time:

- the class body is a function capture made with MAKE_FUNCTION; it becomes a real function whose
  closure holds fresh runtime cells, one per cell of the body's closure, and `builtins.__build_class__`
  runs it natively, as the statement would;
- each fresh cell is registered as the runtime object of the capture's cell (`Tracer.real_cell`),
  so a method of the class inlined later reads the capture's contents (a function defined in the
  compiled code, a traced tensor) and never the empty runtime cell;
- the class is a constant of the graph that nothing may see after it: an escaping class (returned,
  stored, passed on at a graph break) would have methods reading the empty cells, so rebuilding it
  is refused (`Codegen.expr`) and the function runs eagerly with that reason.

The body runs once per capture, not once per call, so it may only define methods: a body that reads
any name but `__name__` and the decorators `staticmethod`, `classmethod`, `property`, or runs
anything but name bindings and function definitions, is a graph break naming the class and line.
"""

import builtins
import dis
import types

from torchsmith.capture.errors import Unsupported
from torchsmith.capture.variables import CellVar, ConstVar, FunctionVar

# Instructions a class body may run: name bindings, constants, function definitions and calls, and
# the `__classcell__` of methods calling `super()`. Cell reads and writes (`LOAD_CLASSDEREF`,
# `LOAD_FROM_DICT_OR_DEREF`, `STORE_DEREF`) are absent: the fresh runtime cells are empty while the
# body runs, and a write would miss capture's cell.
_BODY_OPS = frozenset(
    {
        "RESUME", "NOP", "CACHE", "COPY_FREE_VARS", "MAKE_CELL", "LOAD_NAME", "STORE_NAME", "LOAD_CONST",
        "LOAD_CLOSURE", "MAKE_FUNCTION", "SET_FUNCTION_ATTRIBUTE", "BUILD_TUPLE", "PRECALL",
        "CALL", "PUSH_NULL", "POP_TOP", "RETURN_VALUE", "RETURN_CONST", "LOAD_FAST", "COPY",
    }
)
# The names a class body may read: with no other name in reach, its only calls are these decorators.
_BODY_NAMES = {
    "__name__": None, "staticmethod": staticmethod, "classmethod": classmethod, "property": property,
}
_ONLY_METHODS = "capture runs only class bodies that define methods"


def body_problem(code: types.CodeType, globals_: dict) -> str | None:
    """Why running the class body `code` once at capture time could differ from eager, or None."""
    for ins in dis.get_instructions(code):
        line = ins.positions.lineno if ins.positions else "?"
        if ins.opname not in _BODY_OPS:
            return f"its body runs {ins.opname} (line {line}); {_ONLY_METHODS}"
        if ins.opname == "LOAD_NAME" and ins.argval not in _BODY_NAMES:
            return f"its body reads {ins.argval!r} (line {line}); {_ONLY_METHODS}"
        if ins.opname == "LOAD_FAST" and ins.argval not in code.co_cellvars + code.co_freevars:
            return f"its body reads the local {ins.argval!r} (line {line})"
    for name, builtin in _BODY_NAMES.items():
        if builtin is not None and name in globals_:
            return f"its module defines its own {name!r}"
    return None


class ClassStatementOps:
    """Mixin of the Tracer."""

    def op_LOAD_BUILD_CLASS(self, frame, ins):
        frame.push(ConstVar(builtins.__build_class__))

    def builtin_build_class(self, args, kwargs):
        """`__build_class__(body, name, *bases, **keywords)`: the class, built now (module docstring)."""
        if len(args) < 2 or not isinstance(args[0], FunctionVar):
            raise Unsupported("a class statement whose body is not a function made in the compiled code")
        body, name = args[0], self.as_python(args[1])
        bases = [self.as_python(b) for b in args[2:]]
        keywords = {k: self.as_python(v) for k, v in kwargs.items()}
        problem = body_problem(body.code, body.globals)
        if problem is not None:
            raise Unsupported(f"class statement {name!r} inside the compiled function: {problem}")
        cells = []
        for tracker in body.closure:
            if not isinstance(tracker, CellVar):
                raise Unsupported(f"class statement {name!r}: its closure is not made of cells")
            cells.append(self.runtime_cell_of(tracker))
        function = types.FunctionType(body.code, body.globals, body.code.co_name, None, tuple(cells))
        try:
            cls = builtins.__build_class__(function, name, *bases, **keywords)
        except Exception as e:
            raise Unsupported(f"class statement {name!r} raised {type(e).__name__}: {e} while built") from e
        self.classes_built[id(cls)] = cls
        return ConstVar(cls)

    def runtime_cell_of(self, tracker: CellVar):
        """The runtime cell standing for `tracker` in a function built now: its own when it has one,
        else a fresh empty cell that `real_cell` maps back to `tracker`."""
        if tracker.real is not None:
            return tracker.real
        for cell_id, known in self.cells_by_id.items():
            if known is tracker:
                return self.fresh_cells[cell_id]
        cell = types.CellType()
        self.fresh_cells[id(cell)] = cell  # kept alive so its id stays its own
        self.cells_by_id[id(cell)] = tracker
        return cell
