"""Dataclass instances created inside compiled code (transformers' ModelOutput among them).

Eager code builds result objects such as `BaseModelOutput(last_hidden_state=h)` in every forward;
breaking the graph there would split a model at each layer's return. Capture keeps such an
instance as a `DataclassVar` of field trackers, answers reads from them, and rebuilds the object
after the graph by calling the class, so the real constructor (and `__post_init__`) runs.

Only classes whose `__init__` is the one `dataclasses` generated qualify, and a `__post_init__` only
for transformers' ModelOutput, whose contract is known: its items are the non-None fields.
"""

import collections
import dataclasses
import inspect

from torchsmith.capture.errors import Unsupported
from torchsmith.capture.variables import BuiltinMethodVar, ConstVar, DataclassVar, MethodVar, TupleVar

_DICT_METHODS = ("keys", "values", "items", "get", "to_tuple", "__getitem__", "__contains__")


def _generated_init(cls: type) -> bool:
    init = cls.__dict__.get("__init__")
    if init is None:
        return False
    # transformers wraps the generated __init__ (functools.wraps) to rename old keyword names
    code = getattr(inspect.unwrap(init), "__code__", None)
    return code is not None and code.co_filename.startswith("<")


def _is_model_output(cls: type) -> bool:
    return issubclass(cls, collections.OrderedDict) and any(
        k.__name__ == "ModelOutput" and k.__module__.startswith("transformers.") for k in cls.__mro__
    )


def traceable_dataclass(cls: type) -> bool:
    """Whether capture can build instances of `cls` itself (see the module docstring)."""
    if not dataclasses.is_dataclass(cls) or not _generated_init(cls):
        return False
    if _is_model_output(cls):
        return True
    return not hasattr(cls, "__post_init__") and not issubclass(cls, dict)


class DataclassOps:
    """Mixin of the Tracer."""

    def construct_stateless_module(self, cls: type, args, kwargs) -> ConstVar | None:
        """`nn.CrossEntropyLoss()` and other torch.nn modules without parameters or buffers, built
        with constant arguments inside the compiled code: built now and inlined when called. After
        the graph it is built again from the same arguments, so each call gets its own, as in eager."""
        if not cls.__module__.startswith("torch.nn.modules."):
            return None
        try:
            values = [self.as_python(a) for a in args]
            kw = {k: self.as_python(v) for k, v in kwargs.items()}
        except Unsupported:
            return None
        module = cls(*values, **kw)
        if any(True for _ in module.parameters()) or any(True for _ in module.buffers()):
            return None
        self.created_modules[id(module)] = (module, cls, values, kw)
        return ConstVar(module)

    def construct_dataclass(self, cls: type, args, kwargs) -> DataclassVar:
        params = inspect.signature(cls).parameters
        try:
            bound = inspect.Signature(list(params.values())).bind(*args, **kwargs)
        except TypeError as e:
            raise Unsupported(f"{cls.__qualname__}(...) raised TypeError: {e}") from e
        fields = {}
        for field in dataclasses.fields(cls):
            if field.name in bound.arguments:
                fields[field.name] = bound.arguments[field.name]
            elif field.default is not dataclasses.MISSING:
                fields[field.name] = self.wrap_unguarded(field.default)
            else:
                raise Unsupported(f"field {field.name!r} of {cls.__qualname__} has a default factory")
        return DataclassVar(cls, fields, _is_model_output(cls))

    def dataclass_items(self, obj: DataclassVar) -> dict:
        """The (key -> tracker) items a ModelOutput holds: its fields that are not None."""
        return {k: v for k, v in obj.fields.items() if not (isinstance(v, ConstVar) and v.value is None)}

    def dataclass_attribute(self, obj: DataclassVar, name: str):
        if name in obj.fields:
            return obj.fields[name]
        if obj.dict_like and name in _DICT_METHODS:
            return BuiltinMethodVar(obj, name)
        if name == "__class__":
            return ConstVar(obj.cls)
        attr = inspect.getattr_static(obj.cls, name, None)
        if isinstance(attr, property) and attr.fget is not None:
            return self.call(ConstVar(attr.fget), [obj], {})
        if inspect.isfunction(attr):
            return MethodVar(ConstVar(attr), obj)
        if attr is None or isinstance(attr, (staticmethod, classmethod)):
            raise Unsupported(f"attribute {name!r} of {obj.describe()}")
        return self.wrap_unguarded(attr)

    def dataclass_setattr(self, obj: DataclassVar, name: str, value) -> None:
        if name not in obj.fields or obj.cls.__dataclass_params__.frozen:
            raise Unsupported(f"setting attribute {name!r} on {obj.describe()}")
        if obj.dict_like:
            was_none = isinstance(obj.fields[name], ConstVar) and obj.fields[name].value is None
            if was_none:  # ModelOutput adds the item only when the key existed: keep it simple
                raise Unsupported(f"setting field {name!r} of {obj.describe()} that was None")
        obj.fields[name] = value

    def dataclass_method(self, obj: DataclassVar, name: str, args, kwargs):
        """The dict methods of a ModelOutput, answered from its items."""
        items = self.dataclass_items(obj)
        if name == "keys":
            return TupleVar([ConstVar(k) for k in items])
        if name == "values" or name == "to_tuple":
            return TupleVar(list(items.values()))
        if name == "items":
            return TupleVar([TupleVar([ConstVar(k), v]) for k, v in items.items()])
        if name == "__contains__":
            return ConstVar(self.as_python(args[0]) in items)
        if name == "get":
            key = self.as_python(args[0])
            return items.get(key, args[1] if len(args) > 1 else ConstVar(None))
        if name == "__getitem__":
            return self.dataclass_subscript(obj, args[0])
        raise Unsupported(f"method {name!r} of {obj.describe()}")

    def dataclass_subscript(self, obj: DataclassVar, key):
        if not obj.dict_like:
            raise Unsupported(f"indexing {obj.describe()}")
        k = self.as_python(key)
        items = self.dataclass_items(obj)
        if isinstance(k, str):
            if k not in items:
                raise Unsupported(f"KeyError: {k!r}")
            return items[k]
        picked = list(items.values())[k]
        return TupleVar(picked) if isinstance(k, slice) else picked
