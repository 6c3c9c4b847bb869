"""Variable trackers: what the symbolic executor knows about each value on its stack and in its locals.

A tracker either stands for a graph value (`TensorVar`), a Python value known at capture time
(`ConstVar`, which also holds functions, classes, modules and user objects), or a container or
callable built during capture whose contents are themselves trackers. `source` is the Python
expression (over `L` = the frame's arguments, `G` = its globals) that reads the value again at run
time; guards check it and generated code reconstructs values through it.
"""

from types import CodeType

import torch

from torchsmith.ir import TensorType, Value


class VariableTracker:
    """Base class; `source` is None for values created during capture."""

    __slots__ = ("source",)

    def __init__(self, source: str | None = None):
        self.source = source

    def describe(self) -> str:
        return type(self).__name__


class NullVar(VariableTracker):
    """The NULL CPython pushes below a callable (PUSH_NULL, LOAD_GLOBAL's low bit)."""

    __slots__ = ()


NULL = NullVar()


class ConstVar(VariableTracker):
    """A Python object fixed for this graph: a constant, or an object guarded by identity/type."""

    __slots__ = ("value",)

    def __init__(self, value, source: str | None = None):
        super().__init__(source)
        self.value = value

    def describe(self) -> str:
        text = repr(self.value)
        return f"ConstVar({text if len(text) < 60 else type(self.value).__name__})"


class TensorVar(VariableTracker):
    """A tensor: an IR value of the graph being built."""

    __slots__ = ("value", "cls")

    def __init__(self, value: Value, source: str | None = None, cls: type = torch.Tensor):
        super().__init__(source)
        self.value = value
        self.cls = cls  # the Python class (nn.Parameter for parameters), for isinstance/type

    @property
    def type(self) -> TensorType:
        return self.value.type

    def describe(self) -> str:
        return f"TensorVar(%{self.value.name}: {self.value.type})"


class SymVar(VariableTracker):
    """A Python int that is a symbolic size (`x.shape[0]` of a dynamic dim): a sympy expression."""

    __slots__ = ("expr",)

    def __init__(self, expr):
        super().__init__(None)
        self.expr = expr

    def describe(self) -> str:
        return f"SymVar({self.expr})"


class ListVar(VariableTracker):
    """A Python list; `items` are trackers and change as the captured code mutates it."""

    __slots__ = ("items", "mutated")

    def __init__(self, items, source: str | None = None):
        super().__init__(source)
        self.items = list(items)
        self.mutated = False


class TupleVar(VariableTracker):
    """A tuple, or a named tuple when `cls` is set (built with `cls(*items)`)."""

    __slots__ = ("items", "cls")

    def __init__(self, items, source: str | None = None, cls: type | None = None):
        super().__init__(source)
        self.items = tuple(items)
        self.cls = cls


class DictVar(VariableTracker):
    """A dict with constant keys; values are trackers."""

    __slots__ = ("items", "mutated", "cls")

    def __init__(self, items: dict, source: str | None = None, cls: type = dict):
        super().__init__(source)
        self.items = dict(items)
        self.mutated = False
        self.cls = cls


class SetVar(VariableTracker):
    """A set of constants (a set holding tensors is a graph break)."""

    __slots__ = ("items", "mutated")

    def __init__(self, items, source: str | None = None):
        super().__init__(source)
        self.items = list(items)
        self.mutated = False


class IteratorVar(VariableTracker):
    """An iterator over a fixed list of trackers (lists, tuples, ranges, zip, enumerate...)."""

    __slots__ = ("items", "position")

    def __init__(self, items):
        super().__init__(None)
        self.items = list(items)
        self.position = 0

    def next(self):
        if self.position >= len(self.items):
            return None
        self.position += 1
        return self.items[self.position - 1]

    def remaining(self) -> list:
        return self.items[self.position :]


class CellVar(VariableTracker):
    """A closure cell. `real` is the runtime cell when the cell exists outside the capture (the
    compiled function's own closure); otherwise the cell was created during capture."""

    __slots__ = ("contents", "real", "written")

    def __init__(self, contents=None, real=None, source: str | None = None):
        super().__init__(source)
        self.contents = contents
        self.real = real
        self.written = False


class FunctionVar(VariableTracker):
    """A function created during capture (MAKE_FUNCTION): inlined when called."""

    __slots__ = ("code", "globals", "globals_source", "defaults", "kwdefaults", "closure", "qualname")

    def __init__(self, code: CodeType, globals_, globals_source, defaults=(), kwdefaults=None, closure=()):
        super().__init__(None)
        self.code = code
        self.globals = globals_
        self.globals_source = globals_source
        self.defaults = tuple(defaults)
        self.kwdefaults = dict(kwdefaults or {})
        self.closure = tuple(closure)
        self.qualname = code.co_qualname


class MethodVar(VariableTracker):
    """`obj.method` for a Python function: calls `func(obj, ...)`."""

    __slots__ = ("func", "obj")

    def __init__(self, func: VariableTracker, obj: VariableTracker, source: str | None = None):
        super().__init__(source)
        self.func = func
        self.obj = obj


class PartialVar(VariableTracker):
    """`functools.partial(func, *args, **kwargs)` built during capture: calling it calls `func` with
    the bound arguments first, as `partial.__call__` does. Rebuilt after the graph from its parts."""

    __slots__ = ("func", "args", "kwargs")

    def __init__(self, func: VariableTracker, args, kwargs: dict, source: str | None = None):
        super().__init__(source)
        self.func = func
        self.args = tuple(args)
        self.kwargs = dict(kwargs)

    def describe(self) -> str:
        return f"PartialVar({self.func.describe()})"


class BuiltinMethodVar(VariableTracker):
    """A method of a tracked container or tensor (`xs.append`, `x.add`), resolved at call time."""

    __slots__ = ("obj", "name")

    def __init__(self, obj: VariableTracker, name: str):
        super().__init__(None)
        self.obj = obj
        self.name = name


class GradModeVar(VariableTracker):
    """`torch.no_grad()` / `enable_grad()` / `set_grad_enabled(b)` used as a context manager."""

    __slots__ = ("enabled", "previous")

    def __init__(self, enabled: bool):
        super().__init__(None)
        self.enabled = enabled
        self.previous = None


class WithExitVar(VariableTracker):
    """The `__exit__` BEFORE_WITH pushed for a grad-mode context (`ctx`), or for a
    `contextlib.nullcontext` (`ctx` None: leaving it changes nothing)."""

    __slots__ = ("ctx",)

    def __init__(self, ctx: GradModeVar | None):
        super().__init__(None)
        self.ctx = ctx


class RestoreGradMode:
    """The `__exit__` a resume function receives for a grad-mode `with` block that a graph break
    interrupted: called at the end of the block, it restores the grad mode from before the block
    (`previous` None: the block was a nullcontext's, and nothing is restored)."""

    __slots__ = ("previous",)

    def __init__(self, previous: bool | None):
        self.previous = previous

    def __call__(self, *exc_info) -> bool:
        if self.previous is not None:
            torch._C._set_grad_enabled(self.previous)
        return False  # never swallow an exception

    def __reduce__(self):
        return (RestoreGradMode, (self.previous,))


class SuperVar(VariableTracker):
    """`super(cls, obj)`: attribute reads resolve along the MRO after `cls`."""

    __slots__ = ("cls", "obj")

    def __init__(self, cls: type, obj: VariableTracker):
        super().__init__(None)
        self.cls = cls
        self.obj = obj


def tuple_fields(cls) -> tuple:
    """Field names of a named tuple or a structseq (`torch.return_types.max`)."""
    return tuple(getattr(cls, "_fields", None) or getattr(cls, "__match_args__", ()))


def make_tuple(cls, items):
    """An instance of the tuple subclass `cls` holding `items`."""
    if cls is None or cls is tuple:
        return tuple(items)
    return cls._make(items) if hasattr(cls, "_make") else cls(tuple(items))


def is_const(*trackers) -> bool:
    """Whether every tracker is a ConstVar."""
    return all(isinstance(t, ConstVar) for t in trackers)


class DataclassVar(VariableTracker):
    """An instance of a dataclass created inside the compiled code: the trackers of its fields, in
    field order. After the graph it is rebuilt by calling the class with them, so `__post_init__`
    runs as it did in eager. `dict_like` marks transformers' ModelOutput (an OrderedDict whose items
    are the fields that are not None)."""

    __slots__ = ("cls", "fields", "dict_like")

    def __init__(self, cls: type, fields: dict, dict_like: bool):
        super().__init__(None)
        self.cls = cls
        self.fields = dict(fields)
        self.dict_like = dict_like

    def describe(self) -> str:
        return f"{self.cls.__qualname__} instance"


class ObjectVar(VariableTracker):
    """An instance of a plain user class created inside the compiled code (`DynamicCache()`):
    its class and the trackers of its instance attributes, which change as the captured code
    stores them. Nothing outside the capture can see it until it escapes, so it needs no guards;
    an escaping instance is rebuilt after the graph without calling `__init__` (user_objects.py)."""

    __slots__ = ("cls", "attrs")

    def __init__(self, cls: type, attrs: dict | None = None):
        super().__init__(None)
        self.cls = cls
        self.attrs = dict(attrs or {})

    def describe(self) -> str:
        return f"new {self.cls.__qualname__} instance"
