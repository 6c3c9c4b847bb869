"""The symbolic executor: frames, the instruction loop, inlining, and turning values into trackers.

Opcode handlers live in the mixins (ops_stack, ops_control, ops_python, calls); this file holds the
state they share. One `Tracer` captures one entry of the cache: it runs the root code object from its
first instruction, inlining every user call, until it returns or reaches the instruction where a
graph break was decided (`break_at`).
"""

import enum
import types
from dataclasses import dataclass, field

import sympy
import torch

from torchsmith.capture.calls import CallOps
from torchsmith.capture.class_statement import ClassStatementOps
from torchsmith.capture.copies import CopyOps
from torchsmith.capture.dynamic_shapes import ShapeEnv, infer_symbolic
from torchsmith.capture.errors import Unsupported
from torchsmith.capture.guards import GuardSet, Namespace, plain_constants
from torchsmith.capture.instructions import Instruction, normalize, start_of_original
from torchsmith.capture.numpy_values import NumpyVar, is_numpy_value
from torchsmith.capture.objects import DataclassOps
from torchsmith.capture.ops_attr import AttributeOps
from torchsmith.capture.ops_control import ControlOps
from torchsmith.capture.ops_python import PythonOps
from torchsmith.capture.ops_stack import StackOps
from torchsmith.capture.pysource import identifier, subscript
from torchsmith.capture.tensors import flatten_types, infer_result, rebuild, to_graph_arg
from torchsmith.capture.user_objects import UserObjectOps
from torchsmith.capture.variables import (
    CellVar,
    ConstVar,
    DictVar,
    ListVar,
    RestoreGradMode,
    SymVar,
    TensorVar,
    TupleVar,
    VariableTracker,
)
from torchsmith.ir import GraphBuilder, ScalarType, TensorType, Value
from torchsmith.ir.graph import iter_values

MAX_INLINE_DEPTH = 32
_CODE_CACHE: dict[types.CodeType, list[Instruction]] = {}

# Library modules: their Python functions are guarded by identity (user functions by their code).
_TRUSTED_MODULE_PREFIXES = (
    "torch",
    "math",
    "operator",
    "builtins",
    "functools",
    "itertools",
    "collections",
    "typing",
    "numbers",
    "dataclasses",
    "enum",
)


def instructions_of(code: types.CodeType) -> list[Instruction]:
    cached = _CODE_CACHE.get(code)
    if cached is None:
        cached = _CODE_CACHE[code] = normalize(code)
    return cached


@dataclass
class Frame:
    """One executing code object: its stack, locals, cells and position."""

    code: types.CodeType
    instructions: list[Instruction]
    locals: dict[str, VariableTracker]
    cells: dict[str, CellVar]
    globals: dict
    globals_source: str
    depth: int
    stack: list = field(default_factory=list)
    ip: int = 0
    yields: list | None = None
    current: Instruction | None = None

    def push(self, v):
        self.stack.append(v)

    def pop(self):
        return self.stack.pop()

    def popn(self, n: int) -> list:
        if n == 0:
            return []
        items = self.stack[-n:]
        del self.stack[-n:]
        return items

    @property
    def line(self) -> int | None:
        return self.current.line if self.current else None


class BreakReached(Exception):
    """Internal: the root frame reached the instruction chosen for the graph break."""


class Tracer(
    StackOps, ControlOps, PythonOps, AttributeOps, DataclassOps, UserObjectOps, ClassStatementOps, CopyOps,
    CallOps,
):
    """Captures one function call into a graph plus the Python left around it."""

    def __init__(
        self, code, L: dict, G: dict, closure, *, name: str, break_at: int | None = None, dynamic_dims=None
    ):
        self.root_code = code
        self.L = L
        self.G = G
        self.closure = closure
        self.builder = GraphBuilder(name)
        self.ns = Namespace()
        self.guards = GuardSet(self.ns)
        self.input_sources: list[str] = []
        self.example_inputs: list = []
        self.tensors_by_id: dict[int, tuple[str, TensorVar]] = {}
        self.attr_writes: dict[tuple[int, str], tuple[VariableTracker, str, VariableTracker]] = {}
        self.global_writes: dict[tuple[int, str], tuple[str, dict, VariableTracker]] = {}
        self.written_cells: list[CellVar] = []
        self.cells_by_id: dict[int, CellVar] = {}
        # id(module) -> (module, class, args, kwargs) of stateless modules built during capture
        self.created_modules: dict[int, tuple] = {}
        # classes built by class statements during capture (class_statement.py): id -> class, and
        # the runtime cells their methods close over, which `cells_by_id` maps to capture's cells
        self.classes_built: dict[int, type] = {}
        self.fresh_cells: dict[int, object] = {}
        self.private_objects: dict[int, object] = {}  # copies only this capture sees (copies.py)
        self.private_reads: dict[tuple[int, str], tuple] = {}  # (id, attribute) -> (list/dict, tracker)
        self.copied_states: dict[str, list] = {}  # source -> states guarded for its deepcopies (copies.py)
        self.mutables_by_id: dict[int, tuple] = {}  # id(list or dict) -> (its tracker, the object)
        self.mutable_sources: list[VariableTracker] = []
        self.objects_by_id: dict[int, tuple[str, object]] = {}  # id(object) -> (first source, object)
        # id(module, function or plain object) -> (its tracker, the object): read again through
        # another path, such an object is guarded once, `path is first_path`, and its first tracker
        # is used, so what is read from it is guarded through one path only
        self.shared_by_id: dict[int, tuple] = {}
        self.new_objects: list = []  # the ObjectVars of user objects created during capture
        self.initial_grad = torch.is_grad_enabled()
        self.grad_enabled = self.initial_grad
        self.guards.grad_mode(self.initial_grad)
        self.guards.global_state()
        self.break_at = break_at
        self.shape_env = ShapeEnv(self.guards, self.ns)
        self.tensor_sizes: dict[str, tuple] = {}
        self.dynamic_dims = dynamic_dims or (lambda source, tensor: set())
        self.root: Frame | None = None
        self.return_value: VariableTracker | None = None

    # ----------------------------------------------------------------- the loop
    def run(self) -> VariableTracker | None:
        """Run the root frame; returns its return value, or None after stopping at `break_at`."""
        code = self.root_code
        # a resume function receives its cell variables as the cell objects themselves
        passed_cells = set()
        if code.co_name.startswith("torchsmith_resume_in_"):
            passed_cells = {n for n in code.co_cellvars if isinstance(self.L.get(n), types.CellType)}
        frame_locals = {}
        for name, value in self.L.items():
            if name == "__closure__" or name in passed_cells:
                continue
            frame_locals[name] = self.wrap(value, subscript("L", name))
        cells = {}
        for i, name in enumerate(code.co_freevars):
            cells[name] = self.real_cell(self.closure[i], f"L['__closure__'][{i}]")
        for name in code.co_cellvars:
            if name in passed_cells:
                cells[name] = self.real_cell(self.L[name], subscript("L", name))
            else:
                cells[name] = CellVar(contents=frame_locals.get(name))
        self.root = Frame(code, instructions_of(code), frame_locals, cells, self.G, "G", 0)
        try:
            self.return_value = self.run_frame(self.root)
        except BreakReached:
            return None
        finally:
            torch._C._set_grad_enabled(self.initial_grad)
        return self.return_value

    def run_frame(self, frame: Frame) -> VariableTracker:
        instructions = frame.instructions
        while True:
            if frame.ip >= len(instructions):
                raise Unsupported("fell off the end of the bytecode").located(
                    frame.code.co_filename, frame.line
                )
            index = frame.ip
            if frame.depth == 0 and index == self.break_at:
                raise BreakReached()
            ins = instructions[index]
            frame.current = ins
            self._current_frame = frame
            frame.ip += 1
            handler = getattr(self, "op_" + ins.opname, None)
            try:
                if handler is None:
                    raise Unsupported(f"bytecode {ins.opname} is not supported")
                done = handler(frame, ins)
            except Unsupported as e:
                e.located(frame.code.co_filename, ins.line)
                if frame.depth == 0 and getattr(e, "root_index", None) is None:
                    e.root_index = start_of_original(instructions, index)
                raise
            except RecursionError as e:
                raise Unsupported("recursion too deep while capturing").located(
                    frame.code.co_filename, ins.line
                ) from e
            if done is not None:
                return done

    def real_cell(self, cell, source: str | None) -> CellVar:
        """The one tracker of a runtime cell object (closures sharing a cell share the tracker,
        so a write through one is seen through the others)."""
        tracker = self.cells_by_id.get(id(cell))
        if tracker is None:
            tracker = self.cells_by_id[id(cell)] = CellVar(real=cell, source=source or self.ns.name_of(cell))
        return tracker

    # ----------------------------------------------------------------- inlining
    def inline(
        self,
        code,
        globals_,
        globals_source,
        closure: tuple,
        args: list,
        kwargs: dict,
        defaults=(),
        kwdefaults=None,
        parent_depth: int = 0,
    ) -> VariableTracker:
        """Run a user function's code with these argument trackers; returns the return tracker."""
        if parent_depth + 1 > MAX_INLINE_DEPTH:
            raise Unsupported(f"inlining deeper than {MAX_INLINE_DEPTH} calls ({code.co_name})")
        if code.co_flags & (0x80 | 0x100 | 0x200):
            raise Unsupported(f"calling coroutine or async generator {code.co_qualname}")
        frame_locals = bind_arguments(code, args, kwargs, defaults, kwdefaults or {})
        cells = {}
        for name in code.co_cellvars:
            cells[name] = CellVar(contents=frame_locals.get(name))
        for name, cell in zip(code.co_freevars, closure):
            cells[name] = cell
        frame = Frame(
            code, instructions_of(code), frame_locals, cells, globals_, globals_source, parent_depth + 1
        )
        if code.co_flags & 0x20:  # generator: run to completion, collecting what it yields
            frame.yields = []
        return self.run_frame(frame)

    # ----------------------------------------------------------------- values
    def wrap(self, value, source: str | None) -> VariableTracker:
        """A tracker for a runtime value read through `source`, installing the guards it needs."""
        g = self.guards
        if isinstance(value, torch.Tensor):
            return self.wrap_tensor(value, source)
        if source is None:
            return self.wrap_unguarded(value)
        seen = self.mutables_by_id.get(id(value))
        if seen is not None and seen[1] is value:
            # the same list/dict read again (or through another path): one tracker, so mutations
            # made through one read are seen by the others
            if seen[0].source != source:
                g.add(f"{source} is {seen[0].source}")
            return seen[0]
        shared = self.shared_by_id.get(id(value))
        if shared is not None and shared[1] is value:
            if shared[0].source != source:
                g.add(f"{source} is {shared[0].source}")
            return shared[0]
        if is_numpy_value(value):  # opaque: NumPy code runs eagerly (numpy_values.py)
            g.type_is(source, value)
            tracker = NumpyVar(value, source)
            self.mutables_by_id[id(value)] = (tracker, value)
            return tracker
        if isinstance(value, enum.Enum) and isinstance(value, (int, float, str)):
            # a member of an int or str enum is its enum's only object of its value: one identity
            # check says what its class and value checks say
            g.identity(source, value)
            return ConstVar(value, source)
        if value is None or isinstance(value, (bool, int, float, str, complex, bytes, torch.dtype)):
            g.equals(source, value)
            return ConstVar(value, source)
        if isinstance(value, (torch.device, torch.Size, range, slice, type(Ellipsis))):
            g.type_is(source, value)
            g.add(f"{source} == {self.ns.name_of(value)}")
            return ConstVar(value, source)
        if type(value) is list:
            g.type_is(source, value)
            g.add(f"len({source}) == {len(value)}")
            tracker = ListVar([], source)
            self.mutables_by_id[id(value)] = (tracker, value)
            tracker.items = [self.wrap(v, f"{source}[{i}]") for i, v in enumerate(value)]
            self.mutable_sources.append(tracker)
            return tracker
        if type(value) is tuple and plain_constants(value):
            g.constant_tuple(source, value)
            return _constant_tuple_var(value, source)
        if isinstance(value, tuple) and (type(value) is tuple or hasattr(value, "_fields")):
            g.type_is(source, value)
            g.add(f"len({source}) == {len(value)}")
            items = [self.wrap(v, f"{source}[{i}]") for i, v in enumerate(value)]
            return TupleVar(items, source, cls=None if type(value) is tuple else type(value))
        if type(value) is dict or type(value).__name__ == "OrderedDict" and isinstance(value, dict):
            keys = list(value.keys())
            if all(_is_constant_key(k) for k in keys):
                g.type_is(source, value)
                g.add(f"list({source}.keys()) == {self.ns.name_of(keys)}")
                tracker = DictVar({}, source, type(value))
                self.mutables_by_id[id(value)] = (tracker, value)
                tracker.items = {k: self.wrap(value[k], f"{source}[{self.ns.literal(k)}]") for k in keys}
                self.mutable_sources.append(tracker)
                return tracker
        if type(value) in (set, frozenset) and all(_is_constant_key(k) for k in value):
            g.type_is(source, value)
            g.add(f"{source} == {self.ns.name_of(frozenset(value))}")
            return ConstVar(frozenset(value) if type(value) is frozenset else set(value), source)
        if isinstance(value, torch.nn.Module):
            # by class, not identity: every read from the module (parameters as graph inputs,
            # submodules, flags) is guarded through its path, so the instances of one class that
            # agree on what the code reads share the entry (the blocks of a model, each entered
            # alone after a break or under FSDP's hooks). Reads that cannot be guarded by path
            # pin the module to this instance (`specialize_module`).
            g.type_is(source, value)
            g.module_training(source, value)
            return self._shared(ConstVar(value, source), value)
        if isinstance(value, types.FunctionType) and not _trusted(value) and _simple_defaults(value):
            # a function is guarded by its code, not its identity, so a closure or lambda made
            # anew on every call reuses the graph; cells are guarded where they are read
            g.function_is(source, value)
            return self._shared(ConstVar(value, source), value)
        owner = getattr(value, "__self__", None)
        if isinstance(value, types.BuiltinMethodType) and owner is not None and not isinstance(
            owner, (types.ModuleType, type)
        ):
            # a bound builtin method (`name.upper`) is a new object on every read: guard its owner
            self.wrap(owner, f"{source}.__self__")
            return ConstVar(value, source)
        if isinstance(value, (types.FunctionType, types.BuiltinFunctionType, type, types.ModuleType)):
            # by identity, torch's own functions too: `F.gelu = torch.sigmoid` or a global bound to
            # another function between calls must recompile. A library module is not: what is read
            # from it is guarded through its path (`G['torch'].nn.functional.gelu is K3`).
            if not (isinstance(value, types.ModuleType) and _trusted(value)):
                g.identity(source, value)
            return ConstVar(value, source)
        if isinstance(value, types.MethodType):
            return self.wrap_method(value, source)
        if callable(value) and type(value).__module__.split(".")[0] in ("builtins", "torch"):
            # method descriptors (`torch.Tensor.add`), torch ops: nothing read from them is guarded
            g.identity(source, value)
            return ConstVar(value, source)
        g.type_is(source, value)
        if isinstance(value, RestoreGradMode):
            g.add(f"{source}.previous is {value.previous!r}")
        first = self.objects_by_id.setdefault(id(value), (source, value))
        if first[1] is value and first[0] != source:
            # one object reached through two paths: attribute writes through one are read through
            # the other, so a later call must pass one object there too
            g.add(f"{source} is {first[0]}")
        return self._shared(ConstVar(value, source), value)

    def specialize_module(self, tracker: VariableTracker) -> None:
        """Pin a module read through a source to this very instance (an identity guard): for reads
        whose result capture cannot guard through a path (a slice of a ModuleList, the hooks it
        inlines, `id()`, `parameters()`)."""
        if isinstance(tracker, ConstVar) and tracker.source is not None:
            self.guards.identity(tracker.source, tracker.value)

    def _shared(self, tracker: VariableTracker, value) -> VariableTracker:
        """`tracker`, remembered as the one for `value` when read through any other path."""
        self.shared_by_id[id(value)] = (tracker, value)
        return tracker

    def wrap_method(self, method: types.MethodType, source: str | None) -> VariableTracker:
        from torchsmith.capture.variables import MethodVar

        owner = self.wrap(method.__self__, f"{source}.__self__" if source else None)
        if source is not None:  # which function it binds: its owner may be guarded by class only
            self.guards.identity(f"{source}.__func__", method.__func__)
        return MethodVar(ConstVar(method.__func__), owner, source)

    def wrap_unguarded(self, value) -> VariableTracker:
        """A tracker for a value created or fixed at capture time (no source, no guards)."""
        if isinstance(value, torch.Tensor):
            raise Unsupported("a tensor reached through an unguarded path (e.g. a class attribute)")
        if type(value) is list:
            return ListVar([self.wrap_unguarded(v) for v in value])
        if type(value) is tuple:
            return TupleVar([self.wrap_unguarded(v) for v in value])
        if type(value) is dict:
            return DictVar({k: self.wrap_unguarded(v) for k, v in value.items()})
        if isinstance(value, types.MethodType):
            return self.wrap_method(value, None)
        return ConstVar(value)

    def wrap_tensor(self, tensor: torch.Tensor, source: str | None) -> TensorVar:
        if source is None:
            source = self.ns.name_of(tensor)
        seen = self.tensors_by_id.get(id(tensor))
        if seen is not None:
            first_source, tracker = seen
            if first_source != source:
                self.guards.add(f"{source} is {first_source}")
            return tracker
        if type(tensor) not in (torch.Tensor, torch.nn.Parameter) or tensor.is_sparse:
            raise Unsupported(f"tensor subclass or layout {type(tensor).__name__} is not supported")
        self.tensor_sizes[source] = tuple(tensor.shape)
        dims = self.dynamic_dims(source, tensor) if tensor.is_contiguous() else set()
        self.guards.tensor(source, tensor, frozenset(dims))
        t = self.shape_env.input_type(tensor, source, dims) if dims else TensorType.of(tensor)
        value = self.builder.input(self.builder.fresh_name(_name_from_source(source)), t)
        tracker = TensorVar(value, source, type(tensor))
        self.tensors_by_id[id(tensor)] = (source, tracker)
        self.input_sources.append(source)
        self.example_inputs.append(tensor)
        return tracker

    # ----------------------------------------------------------------- graph recording
    def record(self, op: str, fn, args: list, kwargs: dict) -> VariableTracker:
        """Append `op(*args, **kwargs)` to the graph; returns the tracker of its result."""
        graph_args = tuple(to_graph_arg(a, op) for a in args)
        graph_kwargs = {k: to_graph_arg(v, op) for k, v in kwargs.items()}
        structure = infer_symbolic(
            self.shape_env,
            lambda a, k: infer_result(op, fn, a, k, self.grad_enabled),
            graph_args,
            graph_kwargs,
        )
        source = self.current_location()
        if isinstance(structure, TensorType):
            value = self.builder.op(op, *graph_args, out_type=structure, source=source, **graph_kwargs)
            return TensorVar(value)
        types_ = flatten_types(structure)
        if not types_ or not all(isinstance(t, TensorType) or t == ScalarType("none") for t in types_):
            if not types_ or structure == ScalarType("none"):
                self.builder.op(op, *graph_args, out_type=[], source=source, **graph_kwargs)
                return ConstVar(None)
            raise Unsupported(
                f"{op} returns a Python value ({structure}); capture keeps only tensors in graphs"
            )
        if structure == ScalarType("none"):
            self.builder.op(op, *graph_args, out_type=[], source=source, **graph_kwargs)
            return ConstVar(None)
        values = list(self.builder.op(op, *graph_args, out_type=types_, source=source, **graph_kwargs))
        return rebuild(structure, values, TensorVar)

    def set_grad_mode(self, enabled: bool) -> None:
        """Switch grad mode inside the graph (and for the rest of capture's type inference)."""
        if enabled == self.grad_enabled:
            return
        self.builder.op("torch._C._set_grad_enabled", enabled, out_type=[], source=self.current_location())
        self.grad_enabled = enabled
        torch._C._set_grad_enabled(enabled)

    def size_var(self, dim) -> VariableTracker:
        """A Python int for a (possibly symbolic) size."""
        if isinstance(dim, sympy.Expr) and not dim.is_Integer:
            return SymVar(dim)
        return ConstVar(int(dim))

    def shape_var(self, dims) -> VariableTracker:
        """`torch.Size(dims)`, or a tuple of size trackers when some are symbolic."""
        if all(isinstance(d, int) or d.is_Integer for d in dims):
            return ConstVar(torch.Size([int(d) for d in dims]))
        return TupleVar([self.size_var(d) for d in dims], cls=torch.Size)

    def hint_type(self, t: TensorType) -> TensorType:
        """`t` at the sizes seen in this capture."""
        return self.shape_env.substitute(Value("t", t)).type

    def finish_guards(self) -> None:
        """Guards that need the whole capture: distinct tensor inputs must stay distinct objects
        (an aliased call would change what in-place ops do)."""
        n = len(self.input_sources)
        if n > 1:
            ids = ", ".join(f"id({s})" for s in self.input_sources)
            self.guards.add(f"len({{{ids}}}) == {n}")
        # objects whose attributes the graph writes must stay distinct (writes through one would
        # otherwise be read through the other)
        written = {id(obj.value) for obj, _, _ in self.attr_writes.values()}
        sources = [source for key, (source, _) in self.objects_by_id.items() if key in written]
        if len(sources) > 1:
            ids = ", ".join(f"id({s})" for s in sources)
            self.guards.add(f"len({{{ids}}}) == {len(sources)}")

    def current_location(self) -> str | None:
        frame = self._current_frame
        if frame is None or frame.current is None:
            return None
        return f"{frame.code.co_filename}:{frame.current.line}"

    _current_frame: Frame | None = None

    def graph_has_work(self) -> bool:
        return bool(self.builder._nodes)

    def values_used(self):
        return iter_values(tuple(n.args for n in self.builder._nodes))


def _constant_tuple_var(value: tuple, source: str) -> "TupleVar":
    """The tracker of a tuple of plain constants, guarded whole (`GuardSet.constant_tuple`)."""
    items = [
        _constant_tuple_var(v, f"{source}[{i}]") if type(v) is tuple else ConstVar(v, f"{source}[{i}]")
        for i, v in enumerate(value)
    ]
    return TupleVar(items, source)


def _simple_defaults(fn) -> bool:
    """Whether a function's defaults can be compared by value (so its code can stand for it)."""
    values = list(fn.__defaults__ or ()) + list((fn.__kwdefaults__ or {}).values())
    return all(_is_constant_key(v) for v in values) and not hasattr(fn, "_torchsmith_disabled")


def _is_constant_key(key) -> bool:
    if isinstance(key, tuple):
        return all(_is_constant_key(k) for k in key)
    return key is None or type(key) in (str, int, float, bool, bytes) or isinstance(key, torch.dtype)


def _trusted(value) -> bool:
    module = value.__name__ if isinstance(value, types.ModuleType) else getattr(value, "__module__", None)
    return isinstance(module, str) and module.split(".")[0] in _TRUSTED_MODULE_PREFIXES


def _name_from_source(source: str) -> str:
    """The name of the graph input read through `source` (`L['self']._modules['fc']` -> `self_modules_fc`)."""
    text = source.replace("L[", "").replace("G[", "").replace("]", "").replace("'", "")
    return identifier(text.replace(".", "_").replace("[", "_"), fallback="arg")


def bind_arguments(code, args: list, kwargs: dict, defaults: tuple, kwdefaults: dict) -> dict:
    """Bind argument trackers to the parameter names of `code` the way CPython does."""
    names = code.co_varnames
    nargs, nkw, nposonly = code.co_argcount, code.co_kwonlyargcount, code.co_posonlyargcount
    has_varargs, has_varkw = bool(code.co_flags & 0x04), bool(code.co_flags & 0x08)
    positional = names[:nargs]
    kwonly = names[nargs : nargs + nkw]
    bound: dict[str, VariableTracker] = {}
    for name, arg in zip(positional, args):
        bound[name] = arg
    extra = args[nargs:]
    position = nargs + nkw
    if has_varargs:
        bound[names[position]] = TupleVar(extra)
        position += 1
    elif extra:
        raise Unsupported(
            f"{code.co_qualname}() takes {nargs} positional arguments but {len(args)} were given"
        )
    varkw = {}
    for key, value in kwargs.items():
        if key in positional[nposonly:] or key in kwonly:
            if key in bound:
                raise Unsupported(f"{code.co_qualname}() got multiple values for argument {key!r}")
            bound[key] = value
        elif has_varkw:
            varkw[key] = value
        else:
            raise Unsupported(f"{code.co_qualname}() got an unexpected keyword argument {key!r}")
    if has_varkw:
        bound[names[position]] = DictVar(varkw)
    first_default = nargs - len(defaults)
    for i, name in enumerate(positional):
        if name not in bound:
            if i >= first_default:
                default = defaults[i - first_default]
                bound[name] = default if isinstance(default, VariableTracker) else ConstVar(default)
            else:
                raise Unsupported(f"{code.co_qualname}() missing required argument {name!r}")
    for name in kwonly:
        if name not in bound:
            if name not in kwdefaults:
                raise Unsupported(f"{code.co_qualname}() missing keyword-only argument {name!r}")
            default = kwdefaults[name]
            bound[name] = default if isinstance(default, VariableTracker) else ConstVar(default)
    return bound
