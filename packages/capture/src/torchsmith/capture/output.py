"""Turning a finished capture into a graph plus the Python code that runs around it.

The generated code is plain Python source (printed by the `output_code` log), for example

    def run(L, G):
        __in = (L['x'], L['self'].fc.weight)
        __outs = __graph(*__in)
        L['xs'][:] = [__outs[0], 3]               # replayed Python side effects
        return (__outs[1], __in[0])

and, after a graph break, it ends by running the construct natively and continuing in a resume
function:

        __r = K3(__outs[0])                        # e.g. print(y)
        return __resume(K4, G, L.get('__closure__'), (None, __outs[1], __r))
"""

import copy
import dataclasses
import functools
import operator
import types
from dataclasses import dataclass, field

import torch

from torchsmith.capture.calls import callable_and_args
from torchsmith.capture.errors import Unsupported
from torchsmith.capture.guards import bind_shared_paths, compile_function
from torchsmith.capture.numpy_values import NumpyVar
from torchsmith.capture.ops_python import BINARY, COMPARE
from torchsmith.capture.pysource import keyword_arguments, set_attribute, string_literal, subscript
from torchsmith.capture.resume import resume_code
from torchsmith.capture.user_objects import new_instance
from torchsmith.capture.variables import (
    NULL,
    BuiltinMethodVar,
    CellVar,
    ConstVar,
    DataclassVar,
    DictVar,
    FunctionVar,
    IteratorVar,
    ListVar,
    MethodVar,
    ObjectVar,
    PartialVar,
    RestoreGradMode,
    SetVar,
    SymVar,
    TensorVar,
    TupleVar,
    WithExitVar,
)
from torchsmith.ir import Graph


@dataclass
class Output:
    """What one capture produced: the graph (None when it recorded no op), the run source, the
    names its code refers to, and the break (None when the function returned)."""

    graph: Graph | None
    example_inputs: list
    source: str
    namespace: dict
    break_reason: Unsupported | None = None
    resumes: list = field(default_factory=list)


# Instructions that run natively at a graph break, each on its own, with capture resuming after it.
NATIVE_ONE_INSTRUCTION = frozenset({"BINARY_OP", "COMPARE_OP", "BINARY_SUBSCR", "STORE_SUBSCR"})


class Codegen:
    def __init__(self, tracer):
        self.t = tracer
        self.ns = tracer.ns
        self.inputs = {v.name: i for i, v in enumerate(tracer.builder._inputs)}
        self.outputs: list = []
        self.output_index: dict[str, int] = {}
        self.lines: list[str] = []
        self.cell_names: dict[int, str] = {}  # root-frame cells, rebuilt as real cells at a break
        self.object_names: dict[int, str] = {}  # id(ObjectVar) -> the local its rebuilt instance is in
        # lists and dicts made during capture that a new object holds: built once into a local, so
        # the object and any other reference share them as in eager (id -> local, None until built)
        self.shared_containers: dict[int, str | None] = {
            id(value): None
            for obj in getattr(tracer, "new_objects", ())
            for value in obj.attrs.values()
            if isinstance(value, (ListVar, DictVar)) and value.source is None
        }

    # ----------------------------------------------------------------- expressions
    def expr(self, v) -> str:
        if isinstance(v, TensorVar):
            name = v.value.name
            if name in self.inputs:
                return f"__in[{self.inputs[name]}]"
            if name not in self.output_index:
                self.output_index[name] = len(self.outputs)
                self.outputs.append(v.value)
            return f"__outs[{self.output_index[name]}]"
        if isinstance(v, ConstVar) and v.source is None and id(v.value) in self.t.created_modules:
            module, cls, args, kwargs = self.t.created_modules[id(v.value)]
            if module is v.value:
                call = [self.ns.literal(a) for a in args]
                call += keyword_arguments((k, self.ns.literal(x)) for k, x in kwargs.items())
                return f"{self.ns.name_of(cls)}({', '.join(call)})"
        if isinstance(v, ConstVar) and v.source is None and id(v.value) in self.t.classes_built:
            raise Unsupported(
                f"the class {v.value.__qualname__}, defined by a class statement inside the compiled "
                "function, is used after the graph (its methods close over cells only capture fills)"
            )
        if isinstance(v, ConstVar) and v.source is None and self.t.is_private(v.value):
            return self.private_copy_expr(v.value)
        if isinstance(v, ConstVar):
            # simple constants read through a source are guarded equal (Tracer.wrap): write them as
            # literals, since the source may no longer hold them after the side effects (dict.pop)
            if v.source and type(v.value) not in (type(None), bool, int, str):
                return v.source
            return self.ns.literal(v.value)
        if isinstance(v, SymVar):
            return self.t.shape_env.python_expr(v.expr)
        if isinstance(v, NumpyVar):  # read again at run time: the very object, never a copy
            return v.source
        if id(v) in self.shared_containers and isinstance(v, (ListVar, DictVar)):
            return self.shared_container_expr(v)
        if isinstance(v, ListVar):
            if v.source:
                return v.source
            return "[" + ", ".join(self.expr(i) for i in v.items) + "]"
        if isinstance(v, TupleVar):
            if v.source:
                return v.source
            items = ", ".join(self.expr(i) for i in v.items)
            if v.cls is not None:
                ctor = v.cls._make if hasattr(v.cls, "_make") else v.cls
                return f"{self.ns.name_of(ctor)}(({items}{',' if len(v.items) == 1 else ''}))"
            return f"({items},)" if len(v.items) == 1 else f"({items})"
        if isinstance(v, DictVar):
            if v.source:
                return v.source
            body = "{" + ", ".join(f"{self.ns.literal(k)}: {self.expr(x)}" for k, x in v.items.items()) + "}"
            return body if v.cls is dict else f"{self.ns.name_of(v.cls)}({body})"
        if isinstance(v, DataclassVar):
            init = [f for f in dataclasses.fields(v.cls) if f.init]
            body = ", ".join(keyword_arguments((f.name, self.expr(v.fields[f.name])) for f in init))
            return f"{self.ns.name_of(v.cls)}({body})"
        if isinstance(v, ObjectVar):
            return self.object_expr(v)
        if isinstance(v, SetVar):
            return "{" + ", ".join(self.expr(i) for i in v.items) + "}" if v.items else "set()"
        if isinstance(v, IteratorVar):
            return "iter([" + ", ".join(self.expr(i) for i in v.remaining()) + "])"
        if isinstance(v, MethodVar):
            return v.source or f"{self.ns.name_of(types.MethodType)}({self.expr(v.func)}, {self.expr(v.obj)})"
        if isinstance(v, BuiltinMethodVar):
            return f"{self.expr(v.obj)}.{v.name}"
        if isinstance(v, PartialVar):  # keywords go through ** so any string key rebuilds
            parts = [self.expr(v.func), *(self.expr(a) for a in v.args)]
            if v.kwargs:
                body = ", ".join(f"{self.ns.literal(k)}: {self.expr(x)}" for k, x in v.kwargs.items())
                parts.append(f"**{{{body}}}")
            return f"{self.ns.name_of(functools.partial)}({', '.join(parts)})"
        if isinstance(v, CellVar) and v.real is not None:
            return v.source or self.ns.name_of(v.real)
        if isinstance(v, CellVar) and id(v) in self.cell_names:
            return self.cell_names[id(v)]
        if isinstance(v, WithExitVar):
            return f"{self.ns.name_of(RestoreGradMode)}({None if v.ctx is None else v.ctx.previous!r})"
        if isinstance(v, FunctionVar) and not v.kwdefaults:
            defaults = "(" + "".join(self.expr(d) + ", " for d in v.defaults) + ")"
            closure = "(" + "".join(self.expr(c) + ", " for c in v.closure) + ")" if v.closure else "None"
            return (
                f"{self.ns.name_of(types.FunctionType)}({self.ns.name_of(v.code)}, {v.globals_source}, "
                f"{string_literal(v.code.co_name)}, {defaults}, {closure})"
            )
        raise Unsupported(f"cannot rebuild {v.describe()} after the graph")

    def shared_container_expr(self, v) -> str:
        """A list or dict held by a new object, built into a local on first use (the name is bound
        before its items are filled, so a container holding an object that holds it is one object)."""
        name = self.shared_containers[id(v)]
        if name is not None:
            return name
        built = sum(n is not None for n in self.shared_containers.values())
        name = self.shared_containers[id(v)] = f"__c{built}"
        empty = "[]" if isinstance(v, ListVar) else "{}" if v.cls is dict else f"{self.ns.name_of(v.cls)}()"
        self.lines.append(f"{name} = {empty}")
        if isinstance(v, ListVar):
            items = ", ".join(self.expr(i) for i in v.items)
            self.lines.append(f"{name}.extend([{items}])")
        else:
            body = ", ".join(f"{self.ns.literal(k)}: {self.expr(x)}" for k, x in v.items.items())
            self.lines.append(f"{name}.update({{{body}}})")
        return name

    def private_copy_expr(self, value) -> str:
        """The local holding a new copy of an object `copy.deepcopy` made during capture (copies.py):
        copied again from its state at the end of the capture, once per run, so each call gets its
        own object as in eager."""
        name = self.object_names.get(id(value))
        if name is None:
            self.t.check_private_containers(value, "used after the graph")
            name = self.object_names[id(value)] = f"__o{len(self.object_names)}"
            self.lines.append(f"{name} = {self.ns.name_of(copy.deepcopy)}({self.ns.name_of(value)})")
        return name

    def object_expr(self, v: ObjectVar) -> str:
        """The local holding the rebuilt instance of a new user object, built on first use: allocated
        without `__init__` (capture already ran it), then its attributes set. The name is bound
        before the attributes are written, so an instance reachable from itself is one object."""
        name = self.object_names.get(id(v))
        if name is not None:
            return name
        name = self.object_names[id(v)] = f"__o{len(self.object_names)}"
        self.lines.append(f"{name} = {self.ns.name_of(new_instance)}({self.ns.name_of(v.cls)})")
        if v.attrs:
            body = ", ".join(f"{self.ns.literal(k)}: {self.expr(x)}" for k, x in v.attrs.items())
            self.lines.append(f"{name}.__dict__.update({{{body}}})")
        return name

    # ----------------------------------------------------------------- side effects
    def side_effects(self) -> None:
        t = self.t
        for obj, name, value in t.attr_writes.values():
            self.lines.append(set_attribute(self.expr(obj), name, self.expr(value)))
        for (_, name), (globals_source, _, value) in t.global_writes.items():
            self.lines.append(f"{subscript(globals_source, name)} = {self.expr(value)}")
        for cell in t.written_cells:
            self.lines.append(f"{self.expr(cell)}.cell_contents = {self.expr(cell.contents)}")
        for tracker in t.mutable_sources:
            if getattr(tracker, "mutated", False):
                if isinstance(tracker, ListVar):
                    items = ", ".join(self.expr(i) for i in tracker.items)
                    self.lines.append(f"{tracker.source}[:] = [{items}]")
                else:
                    body = ", ".join(
                        f"{self.ns.literal(k)}: {self.expr(x)}" for k, x in tracker.items.items()
                    )
                    # the new items are read before clearing: they may be read from this very dict
                    self.lines.append(f"__d = {tracker.source}; __v = {{{body}}}")
                    self.lines.append("__d.clear(); __d.update(__v)")
        if t.grad_enabled != t.initial_grad:
            self.lines.append(f"{self.ns.name_of(torch._C._set_grad_enabled)}({t.grad_enabled!r})")

    # ----------------------------------------------------------------- endings
    def finish_return(self, value) -> Output:
        self.side_effects()
        self.lines.append(f"return {self.expr(value)}")
        return self.assemble()

    def finish_break(self, reason: Unsupported, resume_dispatch) -> Output:
        """End at the root frame's current instruction (`break_at`), which runs natively."""
        t = self.t
        frame = t.root
        index = t.break_at
        ins = frame.instructions[index]
        # Inside try/with blocks the resume function keeps the exception table (shifted), and the
        # stack is rebuilt with the same layout, so handlers still find what they expect.
        if index > 0 and frame.instructions[index - 1].offset == ins.offset:
            raise Unsupported(f"{reason.reason}, in the middle of a rewritten instruction")
        self.side_effects()
        self.make_cells(frame)
        stack = list(frame.stack)
        resumes = []
        if ins.opname == "CALL":
            nargs = ins.arg
            operands = stack[len(stack) - nargs - 2 :]
            stack = stack[: len(stack) - nargs - 2]
            first, second, *args = operands
            fn, args = callable_and_args(first, second, args)
            kwnames = ins.argval or ()
            positional = args[: len(args) - len(kwnames)]
            keywords = dict(zip(kwnames, args[len(args) - len(kwnames) :]))
            call_args = ", ".join(
                [self.expr(a) for a in positional]
                + keyword_arguments((k, self.expr(v)) for k, v in keywords.items())
            )
            self.lines.append(
                f"__r = __call({self.expr(fn)}, {call_args})"
                if call_args
                else f"__r = __call({self.expr(fn)})"
            )
            stack.append("__r")
            resumes.append(self.resume_call(frame, index + 1, stack, captured=True, dispatch=resume_dispatch))
        elif ins.opname == "CALL_FUNCTION_EX":
            # f(*args, **kwargs) (3.11/3.12 layout: [NULL,] fn, args[, kwargs]): called through the
            # dispatcher like CALL, so the callee gets its own captured frame
            kw = stack.pop() if ins.arg & 1 else None
            posargs = stack.pop()
            fn = stack.pop()
            if fn is NULL:  # 3.13: fn, NULL, args[, kwargs]
                fn = stack.pop()
            elif stack and stack[-1] is NULL:
                stack.pop()
            star = f", **{self.expr(kw)}" if kw is not None else ""
            self.lines.append(f"__r = __call({self.expr(fn)}, *{self.expr(posargs)}{star})")
            stack.append("__r")
            resumes.append(self.resume_call(frame, index + 1, stack, captured=True, dispatch=resume_dispatch))
        elif ins.opname in (
            "POP_JUMP_IF_TRUE",
            "POP_JUMP_IF_FALSE",
            "JUMP_IF_TRUE_OR_POP",
            "JUMP_IF_FALSE_OR_POP",
        ):
            cond = stack.pop()
            jump_if = "TRUE" in ins.opname
            keep = "OR_POP" in ins.opname
            taken_stack = stack + [cond] if keep else stack
            taken = self.resume_call(frame, ins.target, taken_stack, captured=True, dispatch=resume_dispatch)
            fallthrough = self.resume_call(frame, index + 1, stack, captured=True, dispatch=resume_dispatch)
            self.lines.append(f"if {'' if jump_if else 'not '}{self.expr(cond)}:")
            self.lines.append(f"    return {taken}")
            resumes.append(fallthrough)
        elif ins.opname in NATIVE_ONE_INSTRUCTION and ins.exception is None:
            # an operator or subscript capture cannot trace (NumPy arrays, unknown objects) runs
            # natively on its own, and the code after it is captured again (inside a try block
            # it runs in the resume function, whose exception table catches what it raises)
            stack = self.native_instruction(ins, stack)
            resumes.append(self.resume_call(frame, index + 1, stack, captured=True, dispatch=resume_dispatch))
        elif self.is_split_slice(frame.instructions, index):
            # 3.12+'s BINARY_SLICE/STORE_SLICE, split into BUILD_SLICE + subscript: the slice is built
            # and the subscript runs natively, and the code after the original instruction is captured
            *stack, container, start, stop = stack
            part = f"{self.expr(container)}[{self.ns.name_of(slice)}({self.expr(start)}, {self.expr(stop)})]"
            if frame.instructions[index + 1].opname == "STORE_SUBSCR":
                value = stack.pop()
                self.lines.append(f"{part} = {self.expr(value)}")
            else:
                self.lines.append(f"__r = {part}")
                stack.append("__r")
            resumes.append(self.resume_call(frame, index + 2, stack, captured=True, dispatch=resume_dispatch))
        else:
            resumes.append(self.resume_call(frame, index, stack, captured=False, dispatch=resume_dispatch))
        self.lines.append(f"return {resumes[-1]}")
        out = self.assemble()
        out.break_reason = reason
        return out

    def make_cells(self, frame) -> None:
        """Real cells for the root frame's cell variables (inner functions made before the break
        and the resume function must share them): created empty first, then filled, since their
        contents may be functions closing over them."""
        cell_type = self.ns.name_of(types.CellType)
        cells = [(name, frame.cells[name]) for name in frame.code.co_cellvars]
        for i, (_, cell) in enumerate(cells):
            self.cell_names[id(cell)] = f"__cell{i}"
            # a resume function's cells are passed in, maybe already filled (a second break): the
            # same cell object goes on, shared with the inner functions that close over it
            made = self.expr(cell) if cell.real is not None else f"{cell_type}()"
            self.lines.append(f"__cell{i} = {made}")
        for i, (_, cell) in enumerate(cells):
            if cell.contents is not None:
                self.lines.append(f"__cell{i}.cell_contents = {self.expr(cell.contents)}")

    @staticmethod
    def is_split_slice(instructions, index: int) -> bool:
        """Whether `index` starts a BINARY_SLICE/STORE_SLICE that normalization split in two."""
        ins = instructions[index]
        following = instructions[index + 1] if index + 1 < len(instructions) else None
        return (
            ins.opname == "BUILD_SLICE"
            and ins.arg == 2
            and following is not None
            and following.offset == ins.offset
            and following.opname in ("BINARY_SUBSCR", "STORE_SUBSCR")
            and following.exception is None
        )

    def native_instruction(self, ins, stack: list) -> list:
        """Code running `ins` (one of NATIVE_ONE_INSTRUCTION) on the values of `stack`; returns the
        stack after it."""
        if ins.opname == "STORE_SUBSCR":  # TOS1[TOS] = TOS2
            *stack, value, container, key = stack
            self.lines.append(f"{self.expr(container)}[{self.expr(key)}] = {self.expr(value)}")
            return stack
        *stack, left, right = stack
        if ins.opname == "BINARY_SUBSCR":
            self.lines.append(f"__r = {self.expr(left)}[{self.expr(right)}]")
            return [*stack, "__r"]
        symbol = ins.argval
        if ins.opname == "COMPARE_OP":
            fn = COMPARE[symbol][1]
        elif symbol.endswith("=") and symbol[:-1] in BINARY:  # x += y: the in-place protocol
            fn = getattr(operator, "i" + BINARY[symbol[:-1]][0])
        else:
            fn = BINARY[symbol][1]
        self.lines.append(f"__r = {self.ns.name_of(fn)}({self.expr(left)}, {self.expr(right)})")
        return [*stack, "__r"]

    def resume_call(self, frame, index: int, stack: list, *, captured: bool, dispatch) -> str:
        """Code calling the resume function that continues `frame` at instruction `index`."""
        ins = frame.instructions[index]
        kinds, args = [], []
        for item in stack:
            if item is NULL:
                kinds.append("null")
                args.append("None")
            elif isinstance(item, IteratorVar):
                kinds.append("iter")
                args.append("[" + ", ".join(self.expr(i) for i in item.remaining()) + "]")
            else:
                kinds.append("value")
                args.append(item if isinstance(item, str) else self.expr(item))
        local_args = []
        code = frame.code
        for name in code.co_varnames + tuple(c for c in code.co_cellvars if c not in code.co_varnames):
            if name in code.co_cellvars:
                local_args.append(self.cell_names[id(frame.cells[name])])
                continue
            value = frame.locals.get(name)
            local_args.append("None" if value is None else self.expr(value))
        code = resume_code(frame.code, ins.offset, tuple(kinds))
        fn = self.ns.name_of(dispatch if captured else _run_native)
        all_args = ", ".join(local_args + args)
        return (
            f"{fn}({self.ns.name_of(code)}, G, L.get('__closure__'), ({all_args}{',' if all_args else ''}))"
        )

    def assemble(self) -> Output:
        t = self.t
        graph = None
        head = []
        if t.builder._inputs:
            # parameters share long paths (`L['self']._modules['h']._modules['0']...`): each shared
            # part is evaluated once, into a local, as in the guard
            sources = bind_shared_paths(list(t.input_sources))
            head.append(f"__in = ({''.join(s + ', ' for s in sources)})")
        if t.graph_has_work() or self.outputs:
            needs_graph = t.graph_has_work()
            if needs_graph:
                graph = t.builder.build(*self.outputs)
                head.append("__outs = __graph(*__in)" if t.builder._inputs else "__outs = __graph()")
        body = head + self.lines
        source = "def run(L, G):\n" + "".join(f"    {line}\n" for line in body)
        return Output(graph, list(t.example_inputs), source, dict(self.ns.values))


def _run_native(code, globals_, closure, args):
    """Run a resume function without capturing it."""
    return types.FunctionType(code, globals_, code.co_name, None, closure)(*args)


def compile_run(output: Output, compiled_graph, call_fn):
    """The runnable `run(L, G)` of an Output, given the backend's callable for its graph."""
    namespace = dict(output.namespace)
    namespace["__graph"] = compiled_graph
    namespace["__call"] = call_fn
    return compile_function(output.source, "run", namespace, "<torchsmith run>")
