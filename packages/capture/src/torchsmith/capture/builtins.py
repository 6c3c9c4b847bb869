"""Builtin functions and methods of Python containers, applied to trackers."""

import builtins
import functools
from types import FunctionType

import torch

from torchsmith.capture.autograd_function import apply_without_grad, is_autograd_function_apply
from torchsmith.capture.errors import Unsupported
from torchsmith.capture.logging_calls import is_logger_call, logger_call
from torchsmith.capture.numpy_values import NumpyVar
from torchsmith.capture.pysource import subscript
from torchsmith.capture.variables import (
    ConstVar,
    DataclassVar,
    DictVar,
    FunctionVar,
    IteratorVar,
    ListVar,
    MethodVar,
    ObjectVar,
    PartialVar,
    SetVar,
    SuperVar,
    SymVar,
    TensorVar,
    TupleVar,
    make_tuple,
    tuple_fields,
)


class _Example:
    """Stand-ins for new user objects, made by `object.__new__` (classes capture builds have no
    `__new__` of their own), never initialized: only their type is used."""

    @staticmethod
    def of(cls: type):
        return object.__new__(cls)


class BuiltinOps:
    """Mixin of the Tracer: `builtin_handler(fn)` returns a handler `(args, kwargs) -> tracker`."""

    def builtin_handler(self, fn):
        if is_autograd_function_apply(fn):
            return functools.partial(apply_without_grad, self)
        if is_logger_call(fn):
            return functools.partial(logger_call, self, fn)
        try:
            name = _HANDLED.get(fn)
        except TypeError:  # unhashable callables
            return None
        if name is None:
            return None
        return getattr(self, "builtin_" + name)

    # ----------------------------------------------------------------- sizes and types
    def builtin_len(self, args, kwargs):
        (obj,) = args
        if isinstance(obj, TensorVar):
            return self.call_tensor_method(obj, "__len__", [], {})
        if isinstance(obj, ConstVar) and isinstance(obj.value, torch.nn.Module):
            return ConstVar(len(self.sequence_items(obj)))
        if isinstance(obj, ConstVar) and isinstance(getattr(type(obj.value), "__len__", None), FunctionType):
            return self.call(self.getattr(obj, "__len__"), [], {})  # a user __len__ is inlined
        if isinstance(obj, ConstVar):
            return self.call_pure(len, args, kwargs)
        if isinstance(obj, ObjectVar):
            return self.user_object_dunder(obj, "__len__", [])
        return ConstVar(len(self.sequence_items(obj)))

    def builtin_isinstance(self, args, kwargs):
        obj, classes = args
        classes = self.as_python(classes)
        if isinstance(obj, (TensorVar, ObjectVar)):
            return ConstVar(issubclass(obj.cls, classes))
        return ConstVar(isinstance(self.example_of(obj), classes))

    def example_of(self, tracker):
        """A stand-in Python object with the tracker's type (for isinstance/type)."""
        if isinstance(tracker, ConstVar):
            return tracker.value
        if isinstance(tracker, ListVar):
            return []
        if isinstance(tracker, TupleVar):
            return make_tuple(tracker.cls, [None] * len(tuple_fields(tracker.cls))) if tracker.cls else ()
        if isinstance(tracker, DictVar):
            return tracker.cls()
        if isinstance(tracker, SetVar):
            return set()
        if isinstance(tracker, (FunctionVar,)):
            return lambda: None
        if isinstance(tracker, MethodVar):
            return self.example_method
        if isinstance(tracker, PartialVar):
            return functools.partial(self.example_method)
        if isinstance(tracker, DataclassVar):
            return tracker.cls.__new__(tracker.cls)  # not initialized: only its type is used
        if isinstance(tracker, ObjectVar):
            return _Example.of(tracker.cls)
        if isinstance(tracker, SymVar):  # a symbolic size is a Python int
            return 0
        if isinstance(tracker, NumpyVar):  # its type is guarded; its contents are not read
            return tracker.example
        raise Unsupported(f"type of {tracker.describe()}")

    def example_method(self):  # pragma: no cover - only its type is used
        return None

    def builtin_type(self, args, kwargs):
        (obj,) = args
        if isinstance(obj, (TensorVar, ObjectVar)):
            return ConstVar(obj.cls)
        return ConstVar(type(self.example_of(obj)))

    def builtin_callable(self, args, kwargs):
        (obj,) = args
        return ConstVar(self.is_callable(obj))

    def is_callable(self, tracker) -> bool:
        """Whether `callable()` of the value `tracker` stands for is true."""
        if isinstance(tracker, ConstVar):
            return callable(tracker.value)
        return isinstance(tracker, (FunctionVar, MethodVar, PartialVar)) or (
            type(tracker).__name__ == "BuiltinMethodVar"
        )

    def attribute_name(self, fn_name: str, tracker) -> str:
        """The attribute name a getattr/hasattr/setattr call passes, as a plain str."""
        name = self.as_python(tracker)
        if not isinstance(name, str):
            raise Unsupported(f"{fn_name}() with an attribute name of type {type(name).__name__}")
        return str.__str__(name)

    def builtin_getattr(self, args, kwargs):
        obj, name = args[0], self.attribute_name("getattr", args[1])
        if len(args) == 3:
            try:
                return self.getattr(obj, name)
            except Unsupported as e:
                if "AttributeError" not in e.reason and "has no attribute" not in e.reason:
                    raise
                return args[2]  # the attribute's absence is guarded where the read failed
        return self.getattr(obj, name)

    def builtin_hasattr(self, args, kwargs):
        obj, name = args[0], self.attribute_name("hasattr", args[1])
        if isinstance(obj, TensorVar):
            return ConstVar(hasattr(torch.Tensor, name) or name in ("shape", "dtype", "device"))
        if isinstance(obj, ConstVar):
            if (id(obj.value), name) in self.attr_writes:
                return ConstVar(True)
            present = hasattr(obj.value, name)
            root = self.attribute_root(obj)
            if root is not None:  # an attribute added or deleted between calls recompiles
                self.guards.has_attribute(root, name, present, obj.value)
            return ConstVar(present)
        if isinstance(obj, ObjectVar):
            try:
                self.getattr(obj, name)
            except Unsupported as e:
                if not e.reason.startswith("AttributeError"):
                    raise
                return ConstVar(False)
            return ConstVar(True)
        return ConstVar(hasattr(self.example_of(obj), name))

    def builtin_setattr(self, args, kwargs):
        obj, name, value = args
        self.setattr(obj, self.attribute_name("setattr", name), value)
        return ConstVar(None)

    def builtin_delattr(self, args, kwargs):
        obj, name = args
        name = self.attribute_name("delattr", name)
        if isinstance(obj, ConstVar) and self.is_private(obj.value):
            delattr(obj.value, name)  # a copy only this capture sees (copies.py)
            return ConstVar(None)
        raise Unsupported(
            f"delattr({obj.describe()}, {name!r}) (capture deletes attributes of its own copies only)"
        )

    def builtin_super(self, args, kwargs):
        if not args:
            frame = self._current_frame
            code = frame.code
            if (
                "__class__" not in frame.cells
                or not code.co_argcount
                or code.co_varnames[0] not in frame.locals
            ):
                raise Unsupported("super() without arguments outside a method")
            cls = self.cell_contents(frame.cells["__class__"], "__class__")
            return SuperVar(self.as_python(cls), frame.locals[code.co_varnames[0]])
        if len(args) != 2:
            raise Unsupported("super() with one argument")
        return SuperVar(self.as_python(args[0]), args[1])

    # ----------------------------------------------------------------- iteration
    def builtin_range(self, args, kwargs):
        return self.call_pure(range, args, kwargs)

    def builtin_iter(self, args, kwargs):
        return IteratorVar(self.sequence_items(args[0]))

    def builtin_next(self, args, kwargs):
        iterator = args[0]
        if not isinstance(iterator, IteratorVar):
            raise Unsupported(f"next() on {iterator.describe()}")
        item = iterator.next()
        if item is None:
            if len(args) > 1:
                return args[1]
            raise Unsupported("StopIteration from next()")
        return item

    def builtin_enumerate(self, args, kwargs):
        start = self.as_python(args[1]) if len(args) > 1 else self.as_python(kwargs.get("start", ConstVar(0)))
        items = self.sequence_items(args[0])
        return IteratorVar([TupleVar([ConstVar(start + i), item]) for i, item in enumerate(items)])

    def builtin_zip(self, args, kwargs):
        if kwargs.get("strict") is not None and self.as_python(kwargs["strict"]):
            lists = [self.sequence_items(a) for a in args]
            if len({len(x) for x in lists}) > 1:
                raise Unsupported("zip(strict=True) on sequences of different lengths")
        lists = [self.sequence_items(a) for a in args]
        return IteratorVar([TupleVar(group) for group in zip(*lists)])

    def builtin_reversed(self, args, kwargs):
        return IteratorVar(list(reversed(self.sequence_items(args[0]))))

    def builtin_map(self, args, kwargs):
        fn, *iterables = args
        lists = [self.sequence_items(a) for a in iterables]
        return IteratorVar([self.call(fn, list(group), {}) for group in zip(*lists)])

    def builtin_filter(self, args, kwargs):
        fn, iterable = args
        items = self.sequence_items(iterable)
        keep = []
        for item in items:
            verdict = item if isinstance(fn, ConstVar) and fn.value is None else self.call(fn, [item], {})
            if self.truth(verdict):
                keep.append(item)
        return IteratorVar(keep)

    def builtin_list(self, args, kwargs):
        return ListVar(self.sequence_items(args[0]) if args else [])

    def builtin_tuple(self, args, kwargs):
        return TupleVar(self.sequence_items(args[0]) if args else [])

    def builtin_dict(self, args, kwargs):
        items = {}
        if args:
            source = args[0]
            if isinstance(source, DictVar):
                items.update(source.items)
            else:
                for pair in self.sequence_items(source):
                    key, value = self.sequence_items(pair)
                    items[self.dict_key(key)] = value
        items.update(kwargs)
        return DictVar(items)

    def builtin_set(self, args, kwargs):
        return SetVar(self.set_items([], self.sequence_items(args[0]) if args else []))

    def builtin_sorted(self, args, kwargs):
        items = self.sequence_items(args[0])
        key = kwargs.get("key")
        reverse = bool(self.as_python(kwargs.get("reverse", ConstVar(False))))
        if key is not None and not (isinstance(key, ConstVar) and key.value is None):
            keys = [self.as_python(self.call(key, [item], {})) for item in items]
        else:
            keys = [self.sort_key(item) for item in items]
        try:
            order = sorted(range(len(items)), key=keys.__getitem__, reverse=reverse)
        except TypeError as e:
            raise Unsupported(f"sorted() raised TypeError: {e}") from e
        return ListVar([items[i] for i in order])

    def sort_key(self, item):
        """The value sorting compares; for (key, tensor) pairs with distinct keys, the key."""
        if isinstance(item, TupleVar) and item.items and not self.is_pythonic(item):
            return (self.as_python(item.items[0]),)
        return self.as_python(item)

    def builtin_any(self, args, kwargs):
        return ConstVar(any(self.truth(v) for v in self.sequence_items(args[0])))

    def builtin_all(self, args, kwargs):
        return ConstVar(all(self.truth(v) for v in self.sequence_items(args[0])))

    # ----------------------------------------------------------------- arithmetic
    def builtin_sum(self, args, kwargs):
        items = self.sequence_items(args[0])
        total = args[1] if len(args) > 1 else kwargs.get("start", ConstVar(0))
        for item in items:
            total = self.binary("+", total, item)
        return total

    def _minmax(self, fn, args, kwargs):
        items = self.sequence_items(args[0]) if len(args) == 1 else list(args)
        if any(isinstance(i, TensorVar) for i in items):
            raise Unsupported(f"{fn.__name__}() over tensors compares tensor values")
        if not kwargs and self.is_size_list(items):
            return self.symbolic_min_max(fn is max, items)
        return self.call_pure(fn, [ListVar(items)], kwargs)

    def builtin_min(self, args, kwargs):
        return self._minmax(min, args, kwargs)

    def builtin_max(self, args, kwargs):
        return self._minmax(max, args, kwargs)

    def builtin_abs(self, args, kwargs):
        if isinstance(args[0], TensorVar):
            return self.call_tensor_method(args[0], "__abs__", [], {})
        return self.call_pure(abs, args, kwargs)

    def builtin_pow(self, args, kwargs):
        return self.binary("**", args[0], args[1]) if len(args) == 2 else self.call_pure(pow, args, kwargs)

    def builtin_print(self, args, kwargs):
        raise Unsupported("print() (a Python side effect; it runs eagerly)")

    def container_method(self, obj, name: str, args, kwargs):
        if isinstance(obj, ConstVar) and isinstance(obj.value, torch.nn.Module):
            return self.module_iterator(obj, name, args, kwargs)
        if isinstance(obj, ListVar):
            return self.list_method(obj, name, args, kwargs)
        if isinstance(obj, DictVar):
            return self.dict_method(obj, name, args, kwargs)
        if isinstance(obj, DataclassVar):
            return self.dataclass_method(obj, name, args, kwargs)
        if isinstance(obj, TupleVar) and name in ("index", "count"):
            return self.call_pure(getattr(tuple, name), [ConstVar(tuple(self.as_python(obj))), *args], kwargs)
        if isinstance(obj, SetVar) and name in ("add", "update"):
            new = [args[0]] if name == "add" else self.sequence_items(args[0])
            obj.items = self.set_items(obj.items, new)
            obj.mutated = True
            return ConstVar(None)
        raise Unsupported(f"method {name!r} of {obj.describe()}")

    def module_iterator(self, obj: ConstVar, name: str, args, kwargs):
        """`module.parameters()` and friends: an iterator over the live module's members, each
        read through a source such as `L['self'].get_parameter('fc.weight')`."""
        module, src = obj.value, obj.source
        # which members there are is read from this instance, not guarded through a path
        self.specialize_module(obj)
        values = [self.as_python(a) for a in args]
        options = {k: self.as_python(v) for k, v in kwargs.items()}
        members = list(getattr(module, name)(*values, **options))
        getter = {
            "parameters": "get_parameter",
            "named_parameters": "get_parameter",
            "buffers": "get_buffer",
            "named_buffers": "get_buffer",
        }.get(name, "get_submodule")
        named = name.startswith("named_")
        if not named:
            members = list(zip(_member_names(module, name, values, options), members))
        items = []
        for member_name, member in members:
            source = _member_source(src, getter, member_name) if src else None
            tracker = self.wrap(member, source)
            items.append(TupleVar([ConstVar(member_name), tracker]) if named else tracker)
        return IteratorVar(items)

    def list_method(self, obj: ListVar, name, args, kwargs):
        items = obj.items
        if name == "append":
            items.append(args[0])
        elif name == "extend":
            items.extend(self.sequence_items(args[0]))
        elif name == "insert":
            items.insert(self.as_python(args[0]), args[1])
        elif name == "pop":
            if not items:
                raise Unsupported("pop from empty list")
            obj.mutated = True
            return items.pop(self.as_python(args[0]) if args else -1)
        elif name == "clear":
            items.clear()
        elif name == "reverse":
            items.reverse()
        elif name in ("index", "count"):
            return self.call_pure(getattr(list, name), [ConstVar(self.as_python(obj)), *args], kwargs)
        elif name == "copy":
            return ListVar(items)
        elif name == "sort":
            values = sorted(self.as_python(obj), **{k: self.as_python(v) for k, v in kwargs.items()})
            items[:] = [ConstVar(v) for v in values]
        else:
            raise Unsupported(f"list.{name}")
        obj.mutated = True
        return ConstVar(None)

    def dict_method(self, obj: DictVar, name, args, kwargs):
        items = obj.items
        if name == "items":
            return ListVar([TupleVar([ConstVar(k), v]) for k, v in items.items()])
        if name == "keys":
            return ListVar([ConstVar(k) for k in items])
        if name == "values":
            return ListVar(list(items.values()))
        if name == "get":
            key = self.as_python(args[0])
            return items.get(key, args[1] if len(args) > 1 else ConstVar(None))
        if name == "copy":
            return DictVar(items, cls=obj.cls)
        obj.mutated = True
        if name == "update":
            items.update(self.dict_items(args[0]) if args else {})
            items.update(kwargs)
        elif name == "pop":
            key = self.as_python(args[0])
            if key in items:
                return items.pop(key)
            if len(args) > 1:
                return args[1]
            raise Unsupported(f"KeyError: {key!r}")
        elif name == "setdefault":
            key = self.as_python(args[0])
            if key not in items:
                items[key] = args[1] if len(args) > 1 else ConstVar(None)
            return items[key]
        elif name == "clear":
            items.clear()
        else:
            raise Unsupported(f"dict.{name}")
        return ConstVar(None)


_MEMBER_DICTS = {"get_parameter": "_parameters", "get_buffer": "_buffers"}


def _member_source(src: str, getter: str, member_name: str) -> str:
    """Where a guard reads a module's member: through the modules' own dicts
    (`._modules['a']._parameters['w']` for 'a.w'), which guards share among members and read
    without `get_parameter`'s string walk, which costs every call of a module with many members."""
    *modules, last = member_name.split(".") if member_name else [""]
    path = src
    for m in modules:
        path = subscript(f"{path}._modules", m)
    if getter == "get_submodule":
        return subscript(f"{path}._modules", last) if last else path
    return subscript(f"{path}.{_MEMBER_DICTS[getter]}", last)


def _member_names(module, name: str, args, kwargs) -> list[str]:
    named = getattr(module, "named_" + name)(*args, **kwargs)
    return [member_name for member_name, _ in named]


_HANDLED = {
    builtins.len: "len",
    builtins.isinstance: "isinstance",
    builtins.type: "type",
    builtins.callable: "callable",
    builtins.getattr: "getattr",
    builtins.hasattr: "hasattr",
    builtins.setattr: "setattr",
    builtins.delattr: "delattr",
    builtins.super: "super",
    builtins.range: "range",
    builtins.iter: "iter",
    builtins.next: "next",
    builtins.enumerate: "enumerate",
    builtins.zip: "zip",
    builtins.reversed: "reversed",
    builtins.map: "map",
    builtins.filter: "filter",
    builtins.list: "list",
    builtins.tuple: "tuple",
    builtins.dict: "dict",
    builtins.set: "set",
    builtins.sorted: "sorted",
    builtins.any: "any",
    builtins.all: "all",
    builtins.sum: "sum",
    builtins.min: "min",
    builtins.max: "max",
    builtins.abs: "abs",
    builtins.pow: "pow",
    builtins.print: "print",
    builtins.id: "id",
    builtins.__build_class__: "build_class",  # a class statement (class_statement.py)
}
for _fn in (
    builtins.int,
    builtins.float,
    builtins.bool,
    builtins.str,
    builtins.round,
    builtins.divmod,
    builtins.repr,
    builtins.chr,
    builtins.ord,
    builtins.hash,
    builtins.complex,
    builtins.format,
):
    _HANDLED[_fn] = "plain_" + _fn.__name__


def _make_plain(fn):
    def handler(self, args, kwargs):
        if any(isinstance(a, TensorVar) for a in args):
            raise Unsupported(f"{fn.__name__}() of a tensor reads its data (data-dependent)")
        if fn is builtins.int and len(args) == 1 and not kwargs and isinstance(args[0], SymVar):
            return args[0]  # a size is an int already: int() keeps it symbolic
        return self.call_pure(fn, args, kwargs)

    return handler


for _fn, _name in list(_HANDLED.items()):
    if _name.startswith("plain_"):
        setattr(BuiltinOps, "builtin_" + _name, _make_plain(_fn))
