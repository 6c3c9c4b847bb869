"""Instances of plain user classes created inside compiled code (transformers' `DynamicCache`).

Decoder models build a cache object in every `forward` (`DynamicCache(config=...)`), fill it layer
by layer (`cache.update(k, v, i)` concatenates onto tensors it holds) and return it. Breaking the
graph at the constructor would split the model at every layer, so capture builds the instance
itself as an `ObjectVar`:

- allocation is `object.__new__(cls)`; `__init__` (and the `super().__init__` chain) is inlined;
- attribute stores land in the tracker's attribute dict (a new object is seen by nobody else, so
  it needs no guards); properties run their getter or setter, methods and dunders are inlined;
- an instance that escapes (returned, stored on an existing object, passed to a resume function)
  is rebuilt after the graph by `Codegen.object_expr`: allocated again without `__init__`, its
  attributes set from graph outputs and constants, nested new instances first.

A class capture cannot reproduce this way (a C base, `__slots__`, its own `__new__`, a metaclass
`__call__`, attribute hooks) is a graph break whose reason names the class.
"""

import collections.abc

from torchsmith.capture.errors import Unsupported
from torchsmith.capture.pysource import string_literal
from torchsmith.capture.variables import ConstVar, IteratorVar, MethodVar, ObjectVar

_HEAP_TYPE = 1 << 9  # Py_TPFLAGS_HEAPTYPE: the class was made by a class statement
# Hooks that change what storing or reading an attribute does (capture's attribute dict would not),
# and a finalizer, which eager runs for an instance capture never allocates.
_ATTRIBUTE_HOOKS = ("__setattr__", "__getattribute__", "__delattr__", "__getattr__", "__del__")


# collections.abc.Sequence's mixin methods that walk the items until __getitem__ raises IndexError
_SEQUENCE_WALKS = (collections.abc.Sequence.__iter__, collections.abc.Sequence.__reversed__)


def new_instance(cls: type):
    """An instance of `cls` whose `__init__` has not run (the generated code fills its `__dict__`)."""
    return object.__new__(cls)


def untraceable_reason(cls: type) -> str | None:
    """Why capture cannot build instances of `cls` itself, or None when it can."""
    name = cls.__qualname__
    if type(cls).__call__ is not type.__call__:
        return f"{name} has a metaclass ({type(cls).__qualname__}) with its own __call__"
    if cls.__mro__[-1] is not object:
        return f"{name} does not derive from object"
    for klass in cls.__mro__[:-1]:
        if not klass.__flags__ & _HEAP_TYPE:
            return f"{name} derives from {klass.__qualname__}, a class implemented in C"
        if (klass.__module__ or "").split(".")[0] == "torch":
            return f"{name} derives from the torch class {klass.__qualname__}"
        if "__new__" in klass.__dict__:
            return f"{name} defines its own __new__ (in {klass.__qualname__})"
        if klass.__dict__.get("__slots__"):
            return f"{name} declares __slots__ (in {klass.__qualname__})"
        for hook in _ATTRIBUTE_HOOKS:
            if hook in klass.__dict__:
                return f"{name} defines {hook} (in {klass.__qualname__})"
    if getattr(cls, "__abstractmethods__", None):
        return f"{name} is abstract (its methods {sorted(cls.__abstractmethods__)} have no body)"
    return None


class UserObjectOps:
    """Mixin of the Tracer."""

    def construct_user_object(self, cls: type, args, kwargs) -> ObjectVar:
        """`cls(*args, **kwargs)`: a new ObjectVar with `__init__` inlined on it."""
        reason = untraceable_reason(cls)
        if reason is not None:
            raise Unsupported(
                f"creating an instance of {cls.__qualname__} inside the compiled function: {reason}"
            )
        obj = ObjectVar(cls)
        self.new_objects.append(obj)
        init_owner = next(k for k in cls.__mro__ if "__init__" in k.__dict__)
        init = init_owner.__dict__["__init__"]
        if init_owner is object:
            if args or kwargs:
                raise Unsupported(f"TypeError: {cls.__qualname__}() takes no arguments")
            return obj
        if not callable(init) or not hasattr(init, "__code__"):
            raise Unsupported(f"{cls.__qualname__}.__init__ is not a Python function")
        self.guard_class_member(init_owner, "__init__", init)
        result = self.call(MethodVar(ConstVar(init), obj), list(args), dict(kwargs))
        if not (isinstance(result, ConstVar) and result.value is None):
            raise Unsupported(f"TypeError: {cls.__qualname__}.__init__() should return None")
        return obj

    def user_object_attribute(self, obj: ObjectVar, name: str):
        """`obj.name` as Python finds it: data descriptors, the instance dict, then the class."""
        found = self.class_member(obj.cls, name)
        if found is not None:
            klass, member = found
            if isinstance(member, property):
                if member.fget is None:
                    raise Unsupported(f"AttributeError: property {name!r} of {obj.describe()} has no getter")
                self.guard_class_member(klass, name, member)
                return self.call(ConstVar(member.fget), [obj], {})
        if name in obj.attrs:
            return obj.attrs[name]
        if name == "__class__":
            return ConstVar(obj.cls)
        if found is None:
            raise Unsupported(f"AttributeError: {obj.cls.__qualname__!r} object has no attribute {name!r}")
        klass, member = found
        if type(member).__name__ == "function":
            self.guard_class_member(klass, name, member)
            return MethodVar(ConstVar(member), obj)
        if isinstance(member, staticmethod):
            self.guard_class_member(klass, name, member)
            return ConstVar(member.__func__)
        if isinstance(member, classmethod):
            self.guard_class_member(klass, name, member)
            return MethodVar(ConstVar(member.__func__), ConstVar(obj.cls))
        if hasattr(type(member), "__get__") and not isinstance(member, type):
            kind = type(member).__name__
            raise Unsupported(f"attribute {name!r} of {obj.describe()} is a {kind} descriptor")
        # a plain class attribute, read through the class so a change between calls recompiles
        return self.wrap(member, f"{self.ns.name_of(klass)}.__dict__[{string_literal(name)}]")

    def user_object_setattr(self, obj: ObjectVar, name: str, value) -> None:
        found = self.class_member(obj.cls, name)
        if found is not None:
            klass, member = found
            if isinstance(member, property):
                if member.fset is None:
                    raise Unsupported(f"AttributeError: property {name!r} of {obj.describe()} has no setter")
                self.guard_class_member(klass, name, member)
                self.call(ConstVar(member.fset), [obj, value], {})
                return
            if hasattr(type(member), "__set__"):
                kind = type(member).__name__
                raise Unsupported(f"setting {name!r} of {obj.describe()}, a {kind} descriptor")
        obj.attrs[name] = value

    def user_object_dunder(self, obj: ObjectVar, name: str, args, kwargs=None):
        """Call the special method `name` of `obj`'s class (looked up on the class, as Python does)."""
        found = self.class_member(obj.cls, name)
        if found is None:
            raise Unsupported(f"TypeError: {obj.describe()} has no {name}")
        klass, member = found
        if type(member).__name__ != "function":
            raise Unsupported(f"{obj.cls.__qualname__}.{name} is not a Python function")
        self.guard_class_member(klass, name, member)
        if member in _SEQUENCE_WALKS and self.class_member(obj.cls, "__len__") is not None:
            return self.walk_sequence(obj, reverse=member is collections.abc.Sequence.__reversed__)
        return self.call(ConstVar(member), [obj, *args], dict(kwargs or {}))

    def walk_sequence(self, obj: ObjectVar, reverse: bool) -> IteratorVar:
        """`iter()` of a `collections.abc.Sequence` subclass: its items 0 .. len-1. The mixin's
        `__iter__` stops at the IndexError `__getitem__` raises, an except clause capture does not
        trace; a Sequence's contract is that this happens at `len(obj)`, so the length stands for it."""
        length = self.as_python(self.user_object_dunder(obj, "__len__", []))
        indices = range(length - 1, -1, -1) if reverse else range(length)
        return IteratorVar([self.user_object_dunder(obj, "__getitem__", [ConstVar(i)]) for i in indices])

    def user_object_truth(self, obj: ObjectVar) -> bool:
        for dunder in ("__bool__", "__len__"):
            if self.class_member(obj.cls, dunder) is not None:
                result = self.user_object_dunder(obj, dunder, [])
                return self.truth(result)
        return True

    @staticmethod
    def class_member(cls: type, name: str):
        """(the class along the MRO whose `__dict__` holds `name`, the member), or None."""
        for klass in cls.__mro__:
            if name in klass.__dict__:
                return klass, klass.__dict__[name]
        return None
