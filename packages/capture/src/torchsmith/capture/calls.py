"""Calls: the CALL opcodes and what calling each kind of tracker means.

User functions, methods, lambdas and closures are inlined; `nn.Module` calls inline `forward`;
torch functions and Tensor methods become graph nodes (see tensors.py for the naming); builtins
and the `math`/`operator` modules fold on constants (builtins.py); anything else is a graph break.
"""

import collections.abc
import copy
import functools
import inspect
import types
import weakref

import sympy
import torch

from torchsmith.capture.aten_calls import is_aten_packet, packet_overload
from torchsmith.capture.builtins import BuiltinOps
from torchsmith.capture.custom_ops import custom_op_name, custom_op_overload, is_custom_op
from torchsmith.capture.errors import Unsupported
from torchsmith.capture.guards import DICT_READS
from torchsmith.capture.objects import traceable_dataclass
from torchsmith.capture.python_state import PythonStateOps, is_context_var_method
from torchsmith.capture.tensors import DATA_DEPENDENT_METHODS, METADATA_METHODS, to_graph_arg
from torchsmith.capture.variables import (
    NULL,
    BuiltinMethodVar,
    ConstVar,
    FunctionVar,
    GradModeVar,
    MethodVar,
    ObjectVar,
    PartialVar,
    RestoreGradMode,
    TensorVar,
    TupleVar,
    WithExitVar,
)
from torchsmith.ir import op_name_of, register_op
from torchsmith.ir.errors import UnknownOpError
from torchsmith.ir.graph import CONSTANT_TYPES

# Torch functions that build tensors from Python values only (recorded even with no tensor args).
CREATION_FUNCTIONS = frozenset(
    {
        "zeros",
        "ones",
        "empty",
        "full",
        "arange",
        "linspace",
        "logspace",
        "eye",
        "tensor",
        "as_tensor",
        "rand",
        "randn",
        "randint",
        "randperm",
        "zeros_like",
        "ones_like",
        "empty_like",
        "full_like",
        "scalar_tensor",
        "empty_strided",
        "empty_permuted",
        "tril_indices",
        "triu_indices",
    }
)

# Torch functions evaluated at capture time (they read no tensor data).
STATIC_TORCH_FUNCTIONS = {
    torch.is_tensor,
    torch.is_floating_point,
    torch.is_complex,
    torch.is_signed,
    torch.broadcast_shapes,
    torch.get_default_dtype,
    torch.numel,
    torch.is_grad_enabled,
    torch.finfo,
    torch.iinfo,
    torch.device,
    torch.Size,
    torch.promote_types,
    torch.result_type,
    torch.can_cast,
    torch.is_inference_mode_enabled,
}


class CallOps(BuiltinOps, PythonStateOps):
    """Mixin of the Tracer."""

    def op_CALL(self, frame, ins):
        kwnames = ins.argval or ()
        args = frame.popn(ins.arg)
        kwargs = {}
        if kwnames:
            kwargs = dict(zip(kwnames, args[len(args) - len(kwnames) :]))
            args = args[: len(args) - len(kwnames)]
        second = frame.pop()
        first = frame.pop()
        fn, args = callable_and_args(first, second, args)
        frame.push(self.call(fn, args, kwargs, frame))

    def op_CALL_FUNCTION_EX(self, frame, ins):
        kwargs = self.dict_items(frame.pop()) if ins.arg & 1 else {}
        args = self.sequence_items(frame.pop())
        fn = frame.pop()
        if fn is NULL:  # 3.13: [callable, NULL, args]
            fn = frame.pop()
        elif frame.stack and frame.stack[-1] is NULL:  # 3.11/3.12: [NULL, callable, args]
            frame.pop()
        frame.push(self.call(fn, args, kwargs, frame))

    # ----------------------------------------------------------------- dispatch
    def call(self, fn, args: list, kwargs: dict, frame=None):
        """The tracker of `fn(*args, **kwargs)`."""
        depth = frame.depth if frame is not None else 1
        if isinstance(fn, FunctionVar):
            return self.inline(
                fn.code,
                fn.globals,
                fn.globals_source,
                fn.closure,
                args,
                kwargs,
                fn.defaults,
                fn.kwdefaults,
                depth,
            )
        if isinstance(fn, MethodVar):
            return self.call(fn.func, [fn.obj, *args], kwargs, frame)
        if isinstance(fn, PartialVar):  # bound arguments first; call-time keywords override, as in Python
            return self.call(fn.func, [*fn.args, *args], {**fn.kwargs, **kwargs}, frame)
        if isinstance(fn, BuiltinMethodVar):
            if isinstance(fn.obj, TensorVar):
                return self.call_tensor_method(fn.obj, fn.name, args, kwargs)
            return self.call_container_method(fn.obj, fn.name, args, kwargs)
        if isinstance(fn, WithExitVar):
            if fn.ctx is not None:  # None: a nullcontext's exit, which changes nothing
                self.set_grad_mode(fn.ctx.previous)
            return ConstVar(None)
        if isinstance(fn, ConstVar):
            return self.call_value(fn, args, kwargs, depth)
        if isinstance(fn, ObjectVar):
            return self.user_object_dunder(fn, "__call__", args, kwargs)
        raise Unsupported(f"calling {fn.describe()}")

    def call_value(self, fn: ConstVar, args, kwargs, depth):
        value = fn.value
        special = self.builtin_handler(value)
        if special is not None:
            return special(args, kwargs)
        if value is copy.deepcopy:
            return self.deep_copy(args, kwargs)
        if value is functools.partial:
            return self.make_partial(args, kwargs)
        if type(value) is functools.partial:  # a partial made outside: call its parts, read (and guarded) now
            return self.call(self.unpack_partial(fn), args, kwargs)
        if value is torch.no_grad or value is torch.enable_grad:
            return GradModeVar(value is torch.enable_grad)
        if value is torch.set_grad_enabled:
            mode = bool(self.as_python(args[0] if args else kwargs["mode"]))
            ctx = GradModeVar(mode)
            ctx.previous = self.grad_enabled
            self.set_grad_mode(mode)  # takes effect at the call, like eager
            return ctx
        if isinstance(value, RestoreGradMode):
            if value.previous is not None:  # None: a nullcontext block's exit
                self.set_grad_mode(value.previous)
            return ConstVar(False)
        if value is torch.is_grad_enabled:
            return ConstVar(self.grad_enabled)
        if value is object.__init__ and len(args) == 1 and not kwargs:
            return ConstVar(None)  # the end of a `super().__init__()` chain: nothing to do
        if value in _HAS_TORCH_FUNCTION:
            # __torch_function__ overrides only exist on tensor subclasses, which capture refuses.
            plain = all(
                not isinstance(t, ConstVar) or not hasattr(t.value, "__torch_function__")
                for t in self.flat_trackers([*args, *kwargs.values()])
            )
            if plain:
                return ConstVar(False)
        if value in _FIXED_RESULTS:
            return ConstVar(_FIXED_RESULTS[value])
        if value in _INTROSPECTION:
            return self.introspect(value, args, kwargs)
        if value is torch.is_autocast_enabled:
            return self.global_state(value, args, kwargs)
        if isinstance(value, torch.nn.Module):
            return self.call_module(fn, args, kwargs, depth)
        if getattr(value, "_torchsmith_allow_in_graph", False):
            return self.record(allowed_op_name(value), value, args, kwargs)
        if (
            isinstance(value, types.BuiltinMethodType)
            and type(getattr(value, "__self__", None)) in _IMMUTABLE_TYPES
        ):
            return self.call_pure(value, args, kwargs)  # "-".join(...), "abc".upper(), (1, 2).index(2)
        if (
            any(value is m for m in _DICT_READS) and len(args) >= 2 and isinstance(args[0], ConstVar)
            and not kwargs
        ):
            read = self.read_dict_subclass(value, args)
            if read is not None:
                return read
        if is_context_var_method(value):
            return self.context_var_call(value, fn.source, args, kwargs)
        if isinstance(value, functools._lru_cache_wrapper):
            return self.call_memoized(value, args, kwargs)
        if isinstance(value, weakref.ReferenceType):
            return self.wrap(value(), f"{fn.source}()" if fn.source else None)
        inner = getattr(value, "_torchsmith_captured_fn", None)
        if isinstance(inner, types.FunctionType):  # a compiled function called from compiled code
            return self.inline_function(ConstVar(inner), args, kwargs, depth)
        if isinstance(value, types.MethodType):
            return self.call(self.wrap_method(value, fn.source), args, kwargs)
        if is_aten_packet(value):  # torch.ops.aten.x(...): recorded as the overload torch picks
            packet = str(value)
            graph_args = tuple(to_graph_arg(a, packet) for a in args)
            graph_kwargs = {k: to_graph_arg(v, packet) for k, v in kwargs.items()}
            overload = packet_overload(value, graph_args, graph_kwargs)
            return self.call_torch(op_name_of(overload), overload, args, kwargs)
        if is_custom_op(value):  # a torch.library op: one graph op, kept whole (custom_ops.py)
            overload = custom_op_overload(value, args, kwargs)
            return self.record(custom_op_name(overload), overload, args, kwargs)
        torch_name = self.torch_op_name(value)
        if torch_name is not None and isinstance(value, types.FunctionType) and any(
            _is_callable_tracker(a) or _is_unstorable_constant(a)
            for a in self.flat_trackers([*args, *kwargs.values()])
        ):
            # a torch function written in Python that takes a callable (a distance function) or an
            # options object: a graph cannot hold either, so the body is traced with it inlined
            return self.inline_function(fn, args, kwargs, depth)
        if torch_name is not None:
            return self.call_torch(torch_name, value, args, kwargs)
        if isinstance(value, types.FunctionType):
            return self.inline_function(fn, args, kwargs, depth)
        if getattr(value, "__module__", None) in ("math", "_operator", "operator"):
            return self.call_pure(value, args, kwargs)
        if isinstance(value, type):
            return self.construct(value, args, kwargs)
        name = getattr(value, "__qualname__", None) or type(value).__name__
        raise Unsupported(f"call to {name}, which capture cannot trace (it runs eagerly)")

    def make_partial(self, args, kwargs):
        """`functools.partial(func, *args, **kwargs)`: a tracker holding the parts (a nested partial
        is flattened, as `partial.__new__` does)."""
        if not args:
            raise Unsupported("functools.partial() without a function")
        func, bound = args[0], list(args[1:])
        if isinstance(func, PartialVar):
            return PartialVar(func.func, [*func.args, *bound], {**func.kwargs, **kwargs})
        if not self.is_callable(func):
            raise Unsupported(f"functools.partial of {func.describe()}, which is not callable")
        return PartialVar(func, bound, kwargs)

    def unpack_partial(self, fn: ConstVar) -> PartialVar:
        """The tracker of an existing `functools.partial` object, its parts read through its source."""
        p, src = fn.value, fn.source

        def part(value, suffix):
            return self.wrap(value, src + suffix) if src else self.wrap_unguarded(value)

        args = [part(a, f".args[{i}]") for i, a in enumerate(p.args)]
        kwargs = {k: part(v, f".keywords[{self.ns.literal(k)}]") for k, v in p.keywords.items()}
        return PartialVar(part(p.func, ".func"), args, kwargs, source=src)

    def read_dict_subclass(self, method, args):
        """`dict.get(obj, key)` (and `__getitem__`, `__contains__`) on a dict subclass reached through a
        source, as `super().get(key)` calls it: read now, guarded by the same read at call time."""
        owner = args[0]
        # a Mapping's get/__contains__ catch the KeyError of __getitem__: capture does not trace except
        # clauses, so the read happens now and is guarded by the same read at call time
        if owner.source is None or not isinstance(owner.value, (dict, collections.abc.Mapping)):
            return None
        try:
            rest = [self.as_python(a) for a in args[1:]]
        except Unsupported:
            return None
        if not (rest[0] is None or type(rest[0]) in (str, int, bool, float)):
            return None
        try:
            result = method(owner.value, *rest)
        except Exception:  # e.g. KeyError: let the call run eagerly, where it raises
            return None
        literals = ", ".join(self.ns.literal(v) for v in rest)
        return self.wrap(result, f"{self.ns.name_of(method)}({owner.source}, {literals})")

    def introspect(self, fn, args, kwargs):
        """`inspect.signature(f)` and its kin, answered now from the function objects themselves.

        Their answers depend only on code objects, defaults and `__wrapped__`/`__signature__`, which
        the guards on `f` (its code, defaults or identity) already pin, so the result is a constant.
        Tracing inspect's own code instead breaks the graph on `id()`, `sys.getrecursionlimit()`
        and mappingproxy iteration (transformers calls `inspect.signature` inside `forward`).
        """
        values = [self.callable_value(a) for a in args]
        kw = {k: self.callable_value(v) for k, v in kwargs.items()}
        try:
            result = fn(*values, **kw)
        except Exception as e:
            raise Unsupported(f"inspect.{fn.__name__} raised {type(e).__name__}: {e}") from e
        return self.wrap_unguarded(result)

    def callable_value(self, tracker):
        """The Python object a tracker of a function, method or partial stands for (constants too)."""
        from torchsmith.capture.variables import MethodVar

        if isinstance(tracker, MethodVar) and isinstance(tracker.func, ConstVar):
            owner = tracker.obj.value if isinstance(tracker.obj, ConstVar) else object()
            # the owner only binds `self` away: any object stands in for a traced one (a tensor)
            return types.MethodType(tracker.func.value, owner)
        if isinstance(tracker, PartialVar):
            return functools.partial(
                self.callable_value(tracker.func),
                *[self.callable_value(a) for a in tracker.args],
                **{k: self.callable_value(v) for k, v in tracker.kwargs.items()},
            )
        if isinstance(tracker, TensorVar):
            raise Unsupported("an inspect function applied to a tensor")
        return self.as_python(tracker)

    def global_state(self, fn, args, kwargs):
        """Read a global flag (autocast) at capture time and guard that it stays the same."""
        values = [self.as_python(a) for a in args]
        result = fn(*values)
        call = ", ".join(self.ns.literal(v) for v in values)
        self.guards.add(f"{self.ns.name_of(fn)}({call}) is {result!r}")
        return ConstVar(result)

    def inline_function(self, fn: ConstVar, args, kwargs, depth):
        func = fn.value
        if getattr(func, "__wrapped__", None) is not None and hasattr(func, "_torchsmith_disabled"):
            raise Unsupported(f"{func.__qualname__} is marked torchsmith.disable")
        src = fn.source
        closure = ()
        if func.__closure__:
            closure = tuple(
                self.real_cell(cell, f"{src}.__closure__[{i}]" if src else None)
                for i, cell in enumerate(func.__closure__)
            )
        globals_source = f"{src}.__globals__" if src else f"{self.ns.name_of(func)}.__globals__"
        defaults = tuple(self.wrap_unguarded(d) for d in (func.__defaults__ or ()))
        kwdefaults = {k: self.wrap_unguarded(v) for k, v in (func.__kwdefaults__ or {}).items()}
        return self.inline(
            func.__code__,
            func.__globals__,
            globals_source,
            closure,
            args,
            kwargs,
            defaults,
            kwdefaults,
            depth,
        )

    def call_module(self, fn: ConstVar, args, kwargs, depth):
        """Inline `module(*args)`: forward pre-hooks, `forward`, forward hooks, as `Module.__call__` does."""
        module = fn.value
        if (
            module._backward_hooks
            or getattr(module, "_backward_pre_hooks", None)
            or getattr(module, "_forward_hooks_with_kwargs", None)
            or getattr(module, "_forward_pre_hooks_with_kwargs", None)
            or torch.nn.modules.module._global_forward_hooks
            or torch.nn.modules.module._global_forward_pre_hooks
            or torch.nn.modules.module._global_backward_hooks
        ):
            raise Unsupported(f"module {type(module).__name__} has backward, keyword or global hooks")
        if type(module).__call__ is not torch.nn.Module.__call__:  # a module defining its own __call__
            return self.call(MethodVar(ConstVar(type(module).__call__), fn), args, kwargs)
        if fn.source:  # adding or removing a hook, or patching forward, must recompile
            self.guards.module_hooks(fn.source, module)
            if module._forward_pre_hooks or module._forward_hooks:
                # the hooks are inlined as the objects found now: another instance has its own
                self.specialize_module(fn)
        if "forward" in module.__dict__:  # forward replaced on the instance
            source = f"{fn.source}.__dict__['forward']" if fn.source else None
            forward_var = self.wrap(module.__dict__["forward"], source)
        else:
            forward = type(module).forward
            if not isinstance(forward, types.FunctionType):
                raise Unsupported(f"{type(module).__name__}.forward is not a Python function")
            # a forward patched on the class between calls recompiles
            self.guards.add(f"{self.ns.name_of(type(module))}.forward is {self.ns.name_of(forward)}")
            forward_var = MethodVar(ConstVar(forward), fn)
        for hook in module._forward_pre_hooks.values():
            result = self.call(self.wrap_unguarded(hook), [fn, TupleVar(args)], {})
            if not (isinstance(result, ConstVar) and result.value is None):
                args = list(result.items) if isinstance(result, TupleVar) else [result]
        output = self.call(forward_var, list(args), kwargs)
        for hook in module._forward_hooks.values():
            result = self.call(self.wrap_unguarded(hook), [fn, TupleVar(args), output], {})
            if not (isinstance(result, ConstVar) and result.value is None):
                output = result
        return output

    # ----------------------------------------------------------------- torch
    def torch_op_name(self, value) -> str | None:
        module = getattr(value, "__module__", None) or ""
        qualname = getattr(value, "__qualname__", "")
        if not (
            module.startswith("torch")
            or qualname.startswith(("Tensor.", "TensorBase.", "_VariableFunctions"))
            or type(value).__name__ == "builtin_function_or_method"
            and module in ("torch", "")
        ):
            return None
        name = getattr(value, "__name__", "_")
        private_helper = isinstance(value, types.FunctionType) and name.startswith("_")
        if isinstance(value, type) or private_helper:
            return None  # Python helpers such as torch.nn.functional._pair are inlined instead
        try:
            name = op_name_of(value)
        except UnknownOpError:
            # functions evaluated at capture time (torch.get_default_dtype) need no op in the table
            return f"torch.{name}" if _is_static_torch_function(value) else None
        # ATen overloads (torch.ops.aten.sort.default) run below autograd like any torch function
        return name if name.startswith(("torch.", "aten.")) else None

    def call_torch(self, name: str, fn, args, kwargs):
        if fn in STATIC_TORCH_FUNCTIONS:
            if any(isinstance(a, TensorVar) for a in [*args, *kwargs.values()]):
                if fn is torch.numel:
                    return self.size_var(sympy.Mul(*args[0].type.shape))
                if fn in (torch.is_tensor,):
                    return ConstVar(True)
                if fn in (torch.is_floating_point, torch.is_complex, torch.is_signed):
                    return ConstVar(getattr(args[0].type.dtype, fn.__name__))
                raise Unsupported(f"{name} on tensors")
            return self.call_pure(fn, args, kwargs)
        has_tensor = any(isinstance(a, TensorVar) for a in self.flat_trackers([*args, *kwargs.values()]))
        short = name.rsplit(".", 1)[-1]
        if not has_tensor and short not in CREATION_FUNCTIONS:
            raise Unsupported(f"call to {name} without tensor arguments")
        if short.startswith("manual_seed") or short in ("seed", "set_rng_state", "get_rng_state"):
            raise Unsupported(f"{name} changes global RNG state")
        return self.record(name, fn, args, kwargs)

    def flat_trackers(self, trackers):
        for t in trackers:
            if isinstance(t, (TupleVar,)) or type(t).__name__ == "ListVar":
                yield from self.flat_trackers(t.items)
            else:
                yield t

    def call_tensor_method(self, tensor: TensorVar, name: str, args, kwargs):
        if name in DATA_DEPENDENT_METHODS:
            if name in ("numpy", "__array__"):
                raise Unsupported(
                    f"Tensor.{name}() makes a NumPy array sharing the tensor's memory (NumPy runs eagerly)"
                )
            raise Unsupported(f"Tensor.{name}() reads tensor data (data-dependent)")
        if name in METADATA_METHODS:
            return self.tensor_metadata(tensor, name, args, kwargs)
        if name == "type":
            return self.tensor_type_method(tensor, args, kwargs)
        if name in ("__repr__", "__str__", "__format__", "__hash__", "__array__"):
            raise Unsupported(f"Tensor.{name}()")
        fn = getattr(torch.Tensor, name, None)
        if fn is None or not callable(fn):
            raise Unsupported(f"Tensor has no method {name!r}")
        return self.record(f"torch.Tensor.{name}", fn, [tensor, *args], kwargs)

    def tensor_type_method(self, tensor: TensorVar, args, kwargs):
        """`x.type()` is the type name (from dtype and device, no data); `x.type(dtype)` a cast, as `x.to`."""
        dtype = args[0] if args else kwargs.get("dtype")
        if dtype is None:
            t = tensor.type
            name = torch.empty(0, dtype=t.dtype).type()  # e.g. "torch.FloatTensor"
            device = torch.device(t.device).type
            return ConstVar(name if device == "cpu" else name.replace("torch.", f"torch.{device}.", 1))
        value = self.as_python(dtype)
        if not isinstance(value, torch.dtype):
            raise Unsupported(f"Tensor.type({value!r}) with a type name (pass a torch.dtype)")
        rest = {k: v for k, v in kwargs.items() if k == "non_blocking"}
        return self.record("torch.Tensor.to", torch.Tensor.to, [tensor, ConstVar(value)], rest)

    def tensor_metadata(self, tensor: TensorVar, name: str, args, kwargs):
        t = tensor.type
        pos = [self.as_python(a) for a in args]
        if name in ("size", "stride"):
            dims = t.shape if name == "size" else t.strides
            dim = pos[0] if pos else self.as_python(kwargs["dim"]) if "dim" in kwargs else None
            if dim is None:
                return self.shape_var(dims) if name == "size" else TupleVar([self.size_var(d) for d in dims])
            return self.size_var(dims[dim])
        if name in ("dim", "ndimension"):
            return ConstVar(len(t.shape))
        if name in ("numel", "nelement"):
            return self.size_var(sympy.Mul(*t.shape))
        if name == "__len__":
            if not t.shape:
                raise Unsupported("len() of a 0-d tensor")
            return self.size_var(t.shape[0])
        h = self.hint_type(t)
        meta = torch.empty_strided(h.shape, h.strides, dtype=t.dtype, device="meta")
        if name == "get_device":
            return ConstVar(torch.device(t.device).index if t.device != "cpu" else -1)
        return ConstVar(getattr(meta, name)(*pos))

    # ----------------------------------------------------------------- plain Python
    def call_pure(self, fn, args, kwargs):
        if any(isinstance(a, TensorVar) for a in [*args, *kwargs.values()]):
            if getattr(fn, "__module__", None) == "_operator" and fn.__name__ in _OPERATOR_SYMBOLS:
                return self.binary(_OPERATOR_SYMBOLS[fn.__name__], *args)
            raise Unsupported(f"{getattr(fn, '__name__', fn)} on a tensor")
        values = [self.as_python(a) for a in args]
        kw = {k: self.as_python(v) for k, v in kwargs.items()}
        for tracker in self.flat_trackers([*args, *kwargs.values()]):
            if isinstance(tracker, ConstVar) and isinstance(tracker.value, torch.nn.Module):
                self.specialize_module(tracker)  # the answer is computed from this very instance
        try:
            result = fn(*values, **kw)
        except Exception as e:
            raise Unsupported(f"{getattr(fn, '__name__', fn)} raised {type(e).__name__}: {e}") from e
        return self.wrap_unguarded(result)

    def construct(self, cls: type, args, kwargs):
        if issubclass(cls, tuple) and hasattr(cls, "_fields"):
            bound = inspect.signature(cls).bind(*args, **kwargs)
            bound.apply_defaults()
            return TupleVar(
                [self.wrap_unguarded(v) if not hasattr(v, "source") else v for v in bound.arguments.values()],
                cls=cls,
            )
        if traceable_dataclass(cls):
            return self.construct_dataclass(cls, args, kwargs)
        if issubclass(cls, torch.nn.Module):
            created = self.construct_stateless_module(cls, args, kwargs)
            if created is not None:
                return created
            raise Unsupported(f"creating module {cls.__name__} inside the compiled function")
        pure = cls.__module__ == "builtins" or issubclass(cls, BaseException) or cls in _PURE_CLASSES
        if pure:
            return self.call_pure(cls, args, kwargs)
        return self.construct_user_object(cls, args, kwargs)

    def call_container_method(self, obj, name: str, args, kwargs):
        return self.container_method(obj, name, args, kwargs)


def _is_callable_tracker(tracker) -> bool:
    """Whether `tracker` stands for a function, method, partial or callable object (not a class)."""
    if isinstance(tracker, (FunctionVar, MethodVar, PartialVar, ObjectVar)):
        return True
    value = getattr(tracker, "value", None)
    return isinstance(tracker, ConstVar) and callable(value) and not isinstance(value, type)


def _is_unstorable_constant(tracker) -> bool:
    """Whether `tracker` is a constant no graph argument can hold (an options dataclass, say)."""
    if not isinstance(tracker, ConstVar):
        return False
    value = tracker.value
    if isinstance(value, (list, tuple, slice)):  # frozen item by item (to_graph_arg)
        return False
    return not isinstance(value, CONSTANT_TYPES)


def _is_static_torch_function(value) -> bool:
    try:
        return value in STATIC_TORCH_FUNCTIONS
    except TypeError:  # an unhashable callable
        return False


def callable_and_args(first, second, args: list) -> tuple:
    """The callable and arguments of a CALL from the two slots below its arguments: `NULL, f`
    (3.11/3.12), `f, NULL` (3.13) or `method, self` (all versions)."""
    if first is NULL:
        return second, list(args)
    if second is NULL:
        return first, list(args)
    return first, [second, *args]


def allowed_op_name(fn) -> str:
    """The graph op standing for a function marked `allow_in_graph` (registered on first use)."""
    qualname = f"{fn.__module__}.{fn.__qualname__}".replace("<locals>.", "").replace("<lambda>", "lambda")
    name = "allow_in_graph." + "".join(ch if ch.isalnum() or ch in "._" else "_" for ch in qualname)
    existing = _ALLOWED.get(name)
    if existing is not fn:
        register_op(name, fn, replace=True, doc="a user function kept whole by allow_in_graph")
        _ALLOWED[name] = fn
    return name


_ALLOWED: dict = {}

# read-only dict methods capture evaluates on a guarded dict subclass (see read_dict_subclass)
_DICT_READS = DICT_READS
_PURE_CLASSES = (torch.finfo, torch.iinfo)  # C types made from constants, with no side effect
_IMMUTABLE_TYPES = (str, bytes, int, float, complex, bool, tuple, frozenset)

# Functions whose answer is fixed while running captured code.
_FIXED_RESULTS = {
    torch._C._get_tracing_state: None,  # not under torch.jit.trace
    torch.compiler.is_compiling: True,  # as under torch.compile: the code is being compiled
    torch.jit.is_scripting: False,
    torch.jit.is_tracing: False,
}

# Introspection answered at capture time (see Tracer.introspect).
_INTROSPECTION = {
    inspect.signature,
    inspect.unwrap,
    inspect.getfullargspec,
    inspect.isfunction,
    inspect.ismethod,
    inspect.isclass,
    inspect.iscoroutinefunction,
    inspect.isgeneratorfunction,
}

_HAS_TORCH_FUNCTION = {
    torch._C._has_torch_function,
    torch._C._has_torch_function_unary,
    torch._C._has_torch_function_variadic,
    torch.overrides.has_torch_function,
    torch.overrides.has_torch_function_unary,
    torch.overrides.has_torch_function_variadic,
}

_OPERATOR_SYMBOLS = {
    "add": "+",
    "sub": "-",
    "mul": "*",
    "truediv": "/",
    "floordiv": "//",
    "mod": "%",
    "pow": "**",
    "matmul": "@",
    "and_": "&",
    "or_": "|",
    "xor": "^",
    "iadd": "+=",
    "imul": "*=",
}
