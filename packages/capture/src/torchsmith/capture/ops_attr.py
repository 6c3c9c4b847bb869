"""Opcode handlers and helpers for attribute access: objects, modules, tensors, super()."""

import types

import torch

from torchsmith.capture.errors import Unsupported
from torchsmith.capture.instructions import NULL_AFTER_CALLABLE
from torchsmith.capture.pysource import attribute, string_literal, subscript
from torchsmith.capture.tensors import METADATA_ATTRIBUTES
from torchsmith.capture.variables import (
    NULL,
    BuiltinMethodVar,
    ConstVar,
    DataclassVar,
    DictVar,
    FunctionVar,
    ListVar,
    MethodVar,
    ObjectVar,
    PartialVar,
    SetVar,
    SuperVar,
    TensorVar,
    TupleVar,
    tuple_fields,
)

# nn.Module methods that iterate over its state, answered from the live module (see builtins.py).
MODULE_ITERATORS = frozenset(
    {
        "parameters",
        "named_parameters",
        "buffers",
        "named_buffers",
        "children",
        "named_children",
        "modules",
        "named_modules",
    }
)


def push_callable_and_null(frame, callable_) -> None:
    """Push a callable with the NULL that stands for "no self", in the interpreter's order."""
    if NULL_AFTER_CALLABLE:
        frame.push(callable_)
        frame.push(NULL)
    else:
        frame.push(NULL)
        frame.push(callable_)


class AttributeOps:
    """Mixin of the Tracer."""

    # ----------------------------------------------------------------- attributes
    def op_LOAD_ATTR(self, frame, ins):
        frame.push(self.getattr(frame.pop(), ins.argval))

    def op_LOAD_METHOD(self, frame, ins):
        obj = frame.pop()
        push_callable_and_null(frame, self.getattr(obj, ins.argval))

    def op_STORE_ATTR(self, frame, ins):
        obj = frame.pop()
        value = frame.pop()
        self.setattr(obj, ins.argval, value)

    def op_DELETE_ATTR(self, frame, ins):
        self.builtin_delattr([frame.pop(), ConstVar(ins.argval)], {})

    def op_LOAD_SUPER_ATTR(self, frame, ins):
        name, is_method, two_arg = ins.argval
        obj = frame.pop()
        cls = frame.pop()
        frame.pop()  # the global `super`
        del two_arg
        attr = self.getattr(SuperVar(self.as_python(cls), obj), name)
        if is_method:
            push_callable_and_null(frame, attr)
        else:
            frame.push(attr)

    def setattr(self, obj, name: str, value) -> None:
        if isinstance(obj, ConstVar) and self.is_private(obj.value):
            return self.private_setattr(obj, name, value)
        if isinstance(obj, ConstVar) and not isinstance(obj.value, type):
            if isinstance(obj.value, torch.nn.Module) and isinstance(value, TensorVar):
                current = getattr(obj.value, name, None)
                if isinstance(current, torch.nn.Parameter):
                    raise Unsupported(f"assigning a tensor to parameter {name!r} of a module")
            self.attr_writes[(id(obj.value), name)] = (obj, name, value)
            return
        if isinstance(obj, DataclassVar):
            return self.dataclass_setattr(obj, name, value)
        if isinstance(obj, ObjectVar):
            return self.user_object_setattr(obj, name, value)
        raise Unsupported(f"setting attribute {name!r} on {obj.describe()}")

    def getattr(self, obj, name: str):
        if isinstance(obj, TensorVar):
            return self.tensor_attribute(obj, name)
        if isinstance(obj, SuperVar):
            return self.super_attribute(obj, name)
        if isinstance(obj, (ListVar, TupleVar, DictVar, SetVar)):
            if isinstance(obj, TupleVar) and obj.cls is not None and name in tuple_fields(obj.cls):
                return obj.items[tuple_fields(obj.cls).index(name)]
            return BuiltinMethodVar(obj, name)
        if isinstance(obj, FunctionVar):
            if name in ("__name__", "__qualname__"):
                return ConstVar(obj.code.co_name if name == "__name__" else obj.qualname)
            raise Unsupported(f"attribute {name!r} of a function created inside the compiled code")
        if isinstance(obj, MethodVar):
            if name == "__self__":
                return obj.obj
            if name == "__func__":
                return obj.func
            raise Unsupported(f"attribute {name!r} of a bound method")
        if isinstance(obj, PartialVar):
            if name == "func":
                return obj.func
            if name == "args":
                return TupleVar(obj.args)
            if name == "keywords":
                return DictVar(obj.kwargs)
            raise Unsupported(f"attribute {name!r} of a functools.partial created inside the compiled code")
        if isinstance(obj, ConstVar):
            return self.object_attribute(obj, name)
        if isinstance(obj, DataclassVar):
            return self.dataclass_attribute(obj, name)
        if isinstance(obj, ObjectVar):
            return self.user_object_attribute(obj, name)
        raise Unsupported(f"attribute {name!r} of {obj.describe()}")

    def object_attribute(self, obj: ConstVar, name: str):
        value = obj.value
        write = self.attr_writes.get((id(value), name))
        if write is not None:
            return write[2]
        root = self.attribute_root(obj)
        if isinstance(value, type) or not hasattr(type(value), "__mro__"):
            return self._plain_attribute(obj, name, root)
        if isinstance(value, torch.nn.Module) and name in MODULE_ITERATORS and name not in value.__dict__:
            return BuiltinMethodVar(obj, name)
        for klass in type(value).__mro__:
            if name in klass.__dict__:
                descriptor = klass.__dict__[name]
                if isinstance(descriptor, property):
                    self.guard_class_member(klass, name, descriptor)
                    return self.call(ConstVar(descriptor.fget), [obj], {})
                shadowed = name in getattr(value, "__dict__", {})
                if not shadowed and isinstance(descriptor, (types.FunctionType, staticmethod, classmethod)):
                    self.guard_class_member(klass, name, descriptor)
                    if isinstance(value, torch.nn.Module) and root is not None:
                        # modules are guarded by class: another instance may shadow the method
                        self.guards.add(f"{string_literal(name)} not in {root}.__dict__")
                    if isinstance(descriptor, staticmethod):
                        return ConstVar(descriptor.__func__)
                    if isinstance(descriptor, classmethod):
                        return MethodVar(ConstVar(descriptor.__func__), ConstVar(type(value)))
                    return MethodVar(ConstVar(descriptor), obj)
                break
        return self._plain_attribute(obj, name, root)

    def attribute_root(self, obj: ConstVar) -> str | None:
        """Where guards read `obj` from to check the attributes read from it: its source, or for
        an object without one (a class from `type(self)`, a function's default argument) the
        object itself, held by the guard's namespace, so a class attribute or an attribute of a
        default changed between calls recompiles."""
        if obj.source is not None:
            return obj.source
        value = obj.value
        if self.is_private(value):
            return None
        if isinstance(value, (type, types.ModuleType)) or hasattr(value, "__dict__"):
            return self.ns.name_of(value)
        return None

    def guard_class_member(self, klass: type, name: str, member) -> None:
        """A method, property or static/class method found in `klass.__dict__` must stay the same
        object (a method patched on the class between calls recompiles)."""
        self.guards.add(
            f"{self.ns.name_of(klass)}.__dict__.get({string_literal(name)}) is {self.ns.name_of(member)}"
        )

    def _plain_attribute(self, obj: ConstVar, name: str, root):
        value = obj.value
        source = attribute(root, name) if root is not None else None
        if root is not None and isinstance(value, torch.nn.Module) and name not in value.__dict__:
            # what nn.Module.__getattr__ would find, read through a plain dict lookup (guards are faster)
            for table in ("_parameters", "_buffers", "_modules"):
                if name in value.__dict__.get(table, ()):
                    source = subscript(f"{root}.{table}", name)
                    break
        if root is not None:
            self.guards.note_attribute_read(root, value)
        try:
            result = getattr(value, name)
        except AttributeError as e:
            if root is not None:
                self.guards.has_attribute(root, name, False, value)
            raise Unsupported(f"AttributeError: {e}") from e
        if source is None:
            if self.is_private(value):
                return self.private_attribute(value, name, result)
            if not isinstance(result, torch.Tensor):
                return self.wrap_unguarded(result)
            return self.wrap(result, None)
        return self.wrap(result, source)

    def super_attribute(self, sup: SuperVar, name: str):
        if isinstance(sup.obj, ObjectVar):
            obj_cls = sup.obj.cls
        else:
            obj_cls = type(sup.obj.value) if isinstance(sup.obj, ConstVar) else None
        mro = obj_cls.__mro__ if obj_cls is not None else ()
        start = mro.index(sup.cls) + 1 if sup.cls in mro else len(mro)
        for klass in mro[start:]:
            if name in klass.__dict__:
                descriptor = klass.__dict__[name]
                if isinstance(descriptor, staticmethod):
                    return ConstVar(descriptor.__func__)
                if isinstance(descriptor, classmethod):
                    return MethodVar(ConstVar(descriptor.__func__), ConstVar(obj_cls))
                if callable(descriptor):
                    return MethodVar(ConstVar(descriptor), sup.obj)
                if isinstance(descriptor, property):
                    return self.call(ConstVar(descriptor.fget), [sup.obj], {})
                return self.wrap_unguarded(descriptor)
        raise Unsupported(f"super() has no attribute {name!r}")

    def tensor_attribute(self, tensor: TensorVar, name: str):
        t = tensor.type
        if name in METADATA_ATTRIBUTES:
            if name == "shape":
                return self.shape_var(t.shape)
            if name == "ndim":
                return ConstVar(len(t.shape))
            if name == "is_leaf":
                raise Unsupported("Tensor.is_leaf depends on autograd history")
            h = self.hint_type(t)
            meta = torch.empty_strided(h.shape, h.strides, dtype=t.dtype, device="meta")
            if name == "device":
                return ConstVar(torch.device(t.device))
            if name == "requires_grad":
                return ConstVar(t.requires_grad)
            if name == "is_cuda":
                return ConstVar(t.device.startswith("cuda"))
            return ConstVar(getattr(meta, name))
        if name in ("T", "mT", "H", "mH", "real", "imag"):
            if name == "T":
                return self.call_tensor_method(
                    tensor, "permute", [ConstVar(tuple(reversed(range(len(t.shape)))))], {}
                )
            if name in ("real", "imag"):
                return self.record(f"torch.{name}", getattr(torch, name), [tensor], {})
            if name == "H" and len(t.shape) not in (0, 2):
                raise Unsupported(f"Tensor.H of a {len(t.shape)}-d tensor (eager raises: it takes matrices)")
            if name == "mT" or name == "mH":
                view = self.call_tensor_method(tensor, "transpose", [ConstVar(-2), ConstVar(-1)], {})
            else:  # H: the transpose of a matrix (a 0-d tensor is itself)
                view = self.call_tensor_method(
                    tensor, "permute", [ConstVar(tuple(reversed(range(len(t.shape)))))], {}
                )
            if name == "mT" or not t.dtype.is_complex:  # the conjugate transposes of real tensors
                return view
            return self.call_tensor_method(view, "conj", [], {})
        if name == "data":
            return self.call_tensor_method(tensor, "detach", [], {})
        if name in ("grad", "grad_fn", "_version", "_base"):
            raise Unsupported(f"Tensor.{name} is autograd state that capture does not track")
        if callable(getattr(torch.Tensor, name, None)):
            return BuiltinMethodVar(tensor, name)
        if name.startswith("is_"):  # layout/kind flags (is_nested, is_sparse, is_cpu ...)
            kind = name[3:]
            if kind in ("cpu", "cuda", "meta", "mps", "xpu", "xla", "hpu", "ipu", "mtia", "maia"):
                return ConstVar(torch.device(t.device).type == kind)
            h = self.hint_type(t)
            value = getattr(torch.empty_strided(h.shape, h.strides, dtype=t.dtype, device="meta"), name, None)
            if isinstance(value, bool):
                return ConstVar(value)
        raise Unsupported(f"Tensor attribute {name!r}")
