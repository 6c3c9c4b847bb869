"""Entry points: wrapping a function or an `nn.Module` so its calls go through the dispatcher.

>>> from torchsmith.capture import capture
>>> from torchsmith.ir import interpret
>>> f = capture(lambda x: x.sin() + 1, backend=lambda g, ex: lambda *a: interpret(g, *a))
"""

import functools
import types
import weakref

import torch

from torchsmith.capture.dispatch import CaptureSession, bind, call_with_forward_hooks
from torchsmith.capture.errors import CaptureError

_SESSIONS: "weakref.WeakSet[CaptureSession]" = weakref.WeakSet()


class CapturedFunction:
    """A Python function whose calls are captured (the callable `compile` returns for functions)."""

    def __init__(self, fn: types.FunctionType, session: CaptureSession):
        if not isinstance(fn, types.FunctionType):
            raise CaptureError(f"capture needs a Python function or nn.Module, got {type(fn).__name__}")
        self._fn = fn
        self._torchsmith_captured_fn = fn
        self._session = session
        functools.update_wrapper(self, fn)

    def __call__(self, *args, **kwargs):
        fn = self._fn
        if _disabled():
            return fn(*args, **kwargs)
        L = bind(fn, args, kwargs)
        closure = fn.__closure__
        if closure:
            L["__closure__"] = closure
        return self._session.run_code(fn.__code__, fn.__globals__, closure, L, lambda: fn(*args, **kwargs))

    def __get__(self, obj, objtype=None):
        # Decorating a method: bind like a function would.
        return self if obj is None else types.MethodType(self, obj)

    @property
    def session(self) -> CaptureSession:
        return self._session


class CapturedModule(torch.nn.Module):
    """An `nn.Module` whose `forward` is captured. It shares everything with the original module:
    parameters, buffers, `state_dict` keys, attributes, `train()`/`eval()`."""

    def __init__(self, module: torch.nn.Module, session: CaptureSession):
        object.__setattr__(self, "_orig_mod", module)  # first: nn.Module.__init__ sets `training`
        super().__init__()
        object.__setattr__(self, "_wrapper_ready", True)
        object.__setattr__(self, "_session", session)
        object.__setattr__(self, "_custom_call", None)
        if type(module).__call__ is not torch.nn.Module.__call__:  # the module defines its own __call__
            object.__setattr__(self, "_custom_call", CapturedFunction(type(module).__call__, session))
            return
        # forward may be patched on the instance
        forward = module.__dict__.get("forward", type(module).forward)
        if isinstance(forward, types.MethodType) and forward.__self__ is module:
            forward = forward.__func__
        elif "forward" in module.__dict__:  # a plain function set on the instance takes no `self`
            object.__setattr__(self, "_forward", _without_self(capture(forward, None, session=session)))
            return
        if not isinstance(forward, types.FunctionType):
            raise CaptureError(f"{type(module).__name__}.forward is not a Python function")
        object.__setattr__(self, "_forward", CapturedFunction(forward, session))

    def __call__(self, *args, **kwargs):
        module = self._orig_mod
        if self._custom_call is not None:
            return self._custom_call(module, *args, **kwargs)
        if not (module._forward_pre_hooks or module._forward_hooks):
            return self._forward(module, *args, **kwargs)
        return call_with_forward_hooks(module, lambda *a, **k: self._forward(module, *a, **k), args, kwargs)

    forward = __call__

    def __getattr__(self, name):
        return getattr(object.__getattribute__(self, "_orig_mod"), name)

    def __setattr__(self, name, value):
        if name == "__class__":  # FSDP2's fully_shard subclasses the wrapper it was given, not the original
            object.__setattr__(self, name, value)
            return
        setattr(self._orig_mod, name, value)

    def __delattr__(self, name):
        delattr(self._orig_mod, name)

    def __getitem__(self, index):
        return self._orig_mod[index]

    def __len__(self):
        return len(self._orig_mod)

    def __iter__(self):
        return iter(self._orig_mod)

    def __dir__(self):
        return dir(self._orig_mod)

    def __repr__(self):
        return f"CapturedModule({self._orig_mod!r})"

    # nn.Module's own methods would look at the (empty) wrapper: send them to the original.
    def state_dict(self, *args, **kwargs):
        return self._orig_mod.state_dict(*args, **kwargs)

    def load_state_dict(self, *args, **kwargs):
        return self._orig_mod.load_state_dict(*args, **kwargs)

    def _load_from_state_dict(self, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys,
                              error_msgs):
        # Loading a parent (DDP(compiled), a model holding compiled blocks) reaches the wrapper as a
        # child: its keys are the original's, under the wrapper's prefix.
        assign = local_metadata.get("assign_to_params_buffers", False)
        _load_module_tree(self._orig_mod, state_dict, prefix, assign, strict, missing_keys, unexpected_keys,
                          error_msgs)

    def named_parameters(self, *args, **kwargs):
        return self._orig_mod.named_parameters(*args, **kwargs)

    def parameters(self, *args, **kwargs):
        return self._orig_mod.parameters(*args, **kwargs)

    def named_buffers(self, *args, **kwargs):
        return self._orig_mod.named_buffers(*args, **kwargs)

    def buffers(self, *args, **kwargs):
        return self._orig_mod.buffers(*args, **kwargs)

    def named_modules(self, memo=None, prefix: str = "", remove_duplicate: bool = True):
        if type(self) is not CapturedModule:
            # fully_shard (or another composable API) made the wrapper its module: it holds that API's
            # state and hooks, which the API finds by walking the modules, so the walk includes it
            memo = set() if memo is None else memo
            if self not in memo:
                if remove_duplicate:
                    memo.add(self)
                yield prefix, self
        yield from self._orig_mod.named_modules(memo, prefix, remove_duplicate)

    def modules(self):
        for _, module in self.named_modules():
            yield module

    def children(self):
        return self._orig_mod.children()

    def named_children(self):
        return self._orig_mod.named_children()

    # `training` is the original's flag: nn.Module.__init__ writes it on the wrapper, which must not
    # shadow (or reset) the original's.
    @property
    def training(self) -> bool:
        return self._orig_mod.training

    @training.setter
    def training(self, mode: bool) -> None:
        if self.__dict__.get("_wrapper_ready"):  # not while nn.Module.__init__ runs
            self._orig_mod.training = mode

    def _apply(self, fn, *args, **kwargs):
        # .to()/.double()/.cuda() reach the original's own parameters, not only its children's
        self._orig_mod._apply(fn, *args, **kwargs)
        return self

    def apply(self, fn):
        self._orig_mod.apply(fn)
        return self

    def get_submodule(self, target: str):
        return self._orig_mod.get_submodule(target)

    def requires_grad_(self, requires_grad: bool = True):
        self._orig_mod.requires_grad_(requires_grad)
        return self

    def train(self, mode: bool = True):
        self._orig_mod.train(mode)
        return self

    def eval(self):
        return self.train(False)

    def to(self, *args, **kwargs):
        self._orig_mod.to(*args, **kwargs)
        return self

    def zero_grad(self, set_to_none: bool = True):
        self._orig_mod.zero_grad(set_to_none)

    def register_forward_hook(self, *args, **kwargs):
        return self._orig_mod.register_forward_hook(*args, **kwargs)

    def register_forward_pre_hook(self, *args, **kwargs):
        return self._orig_mod.register_forward_pre_hook(*args, **kwargs)


def _load_module_tree(module, state_dict, prefix, assign, strict, missing, unexpected, errors):
    """`module` and its descendants load their entries of `state_dict` under `prefix`, as
    `nn.Module.load_state_dict` loads each module of a tree."""
    metadata = dict(getattr(state_dict, "_metadata", {}).get(prefix[:-1], {}))
    if assign:
        metadata["assign_to_params_buffers"] = assign
    module._load_from_state_dict(state_dict, prefix, metadata, strict, missing, unexpected, errors)
    for name, child in module._modules.items():
        if child is not None:
            child_prefix = f"{prefix}{name}."
            _load_module_tree(child, state_dict, child_prefix, assign, strict, missing, unexpected, errors)


def _without_self(fn):
    return lambda module, *args, **kwargs: fn(*args, **kwargs)


def capture(obj, backend, *, fullgraph: bool = False, dynamic=None, session: CaptureSession | None = None):
    """Wrap a function or module so every call runs captured graphs through `backend`, a callable
    `backend(graph, example_inputs) -> compiled` where `compiled(*inputs)` returns the outputs."""
    if session is None:
        session = CaptureSession(backend, fullgraph=fullgraph, dynamic=dynamic)
        _SESSIONS.add(session)
    if isinstance(obj, torch.nn.Module):
        return CapturedModule(obj, session)
    if isinstance(obj, types.MethodType):
        return types.MethodType(CapturedFunction(obj.__func__, session), obj.__self__)
    return CapturedFunction(obj, session)


def allow_in_graph(fn):
    """Keep calls to `fn` as one opaque graph node (op `allow_in_graph.<module>.<name>`) instead of
    tracing into it. `fn` must take and return tensors and run on meta tensors (for its types)."""
    fn._torchsmith_allow_in_graph = True
    return fn


def mark_dynamic(tensor: torch.Tensor, dim) -> None:
    """Make `dim` (an int or a list of ints) of `tensor` symbolic in every capture that reads it."""
    dims = [dim] if isinstance(dim, int) else list(dim)
    for d in dims:
        if not -tensor.dim() <= d < tensor.dim():
            raise CaptureError(f"mark_dynamic: dim {d} is out of range for a {tensor.dim()}-d tensor")
    marked = set(getattr(tensor, "_torchsmith_dynamic_dims", ()))
    marked.update(d % tensor.dim() for d in dims)
    tensor._torchsmith_dynamic_dims = marked


def mark_static(tensor: torch.Tensor, dim) -> None:
    """Never make `dim` (an int or a list of ints) of `tensor` symbolic: not under `dynamic=True`,
    not by automatic dynamic after its size changes (a size change recompiles instead), and not by
    `mark_dynamic` (static wins)."""
    dims = [dim] if isinstance(dim, int) else list(dim)
    for d in dims:
        if not -tensor.dim() <= d < tensor.dim():
            raise CaptureError(f"mark_static: dim {d} is out of range for a {tensor.dim()}-d tensor")
    marked = set(getattr(tensor, "_torchsmith_static_dims", ()))
    marked.update(d % tensor.dim() for d in dims)
    tensor._torchsmith_static_dims = marked


def reset_all() -> None:
    """Drop every cached capture of every session."""
    for session in list(_SESSIONS):
        session.reset()


_DISABLED = [0]


def _disabled() -> bool:
    return _DISABLED[0] > 0
