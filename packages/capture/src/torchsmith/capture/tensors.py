"""Recording tensor operations into the graph.

Naming (what capture writes into the `torch.*` dialect): torch functions as `torch.<name>`
(`torch.add`, `torch.nn.functional.relu`), Tensor methods as `torch.Tensor.<name>`
(`torch.Tensor.add_`), Python operators as the Tensor dunder Python itself would call
(`x + y` -> `torch.Tensor.__add__`, `2 * x` -> `torch.Tensor.__rmul__`, `x += y` ->
`torch.Tensor.__iadd__`, `x[i]` -> `torch.Tensor.__getitem__`, `x[i] = v` -> `torch.Tensor.__setitem__`),
so replaying a node is exactly what eager Python did. Output types come from running the op on
meta tensors shaped like the inputs; the real device is kept in the type.
"""

import torch

from torchsmith.capture.errors import Unsupported
from torchsmith.capture.guards import default_device
from torchsmith.capture.variables import (
    ConstVar,
    ListVar,
    SymVar,
    TensorVar,
    TupleVar,
    VariableTracker,
    make_tuple,
)
from torchsmith.ir import ScalarType, SymIntType, TensorType, Value
from torchsmith.ir.graph import CONSTANT_TYPES, ArgList, Slice
from torchsmith.ir.torch_startup import defer_dynamo_import

# Methods whose result is data-dependent or leaves the tensor world: a graph break.
DATA_DEPENDENT_METHODS = frozenset(
    {
        "item",
        "tolist",
        "numpy",
        "__bool__",
        "__int__",
        "__float__",
        "__index__",
        "data_ptr",
        "nonzero",
        "unique",
        "masked_select",
        "__array__",
        "backward",
        "register_hook",
        "cpu_numpy",
        "untyped_storage",
        "storage",
    }
)

# Metadata methods answered from the type at capture time (shapes are static here).
METADATA_METHODS = frozenset(
    {
        "size",
        "dim",
        "ndimension",
        "numel",
        "nelement",
        "stride",
        "is_contiguous",
        "element_size",
        "is_floating_point",
        "is_complex",
        "get_device",
        "__len__",
        "is_signed",
    }
)

# Tensor attributes answered from the type.
METADATA_ATTRIBUTES = frozenset(
    {
        "shape",
        "dtype",
        "device",
        "ndim",
        "requires_grad",
        "is_cuda",
        "is_sparse",
        "is_quantized",
        "is_meta",
        "layout",
        "is_leaf",
    }
)

_NO_GRAD_RESULTS = frozenset({"detach", "detach_", "argmax", "argmin", "eq", "ne", "lt", "le", "gt", "ge"})


def meta_of(t: TensorType) -> torch.Tensor:
    return torch.empty_strided(t.shape, t.strides, dtype=t.dtype, device="meta")


def to_graph_arg(tracker: VariableTracker, what: str):
    """A tracker as a graph argument: Values for tensors, constants, (Arg)lists and tuples."""
    if isinstance(tracker, TensorVar):
        return tracker.value
    if isinstance(tracker, ConstVar):
        value = tracker.value
        if isinstance(value, slice):
            return Slice(value.start, value.stop, value.step)
        if isinstance(value, torch.Size):
            return tuple(value)
        if isinstance(value, (list, tuple)):
            return freeze_constant(value, what)
        if not isinstance(value, CONSTANT_TYPES):
            raise Unsupported(f"{what}: a graph cannot hold its argument {type(value).__name__} {value!r}")
        return value
    if isinstance(tracker, SymVar):
        return tracker.expr
    if isinstance(tracker, ListVar):
        return ArgList(to_graph_arg(t, what) for t in tracker.items)
    if isinstance(tracker, TupleVar):
        return tuple(to_graph_arg(t, what) for t in tracker.items)
    raise Unsupported(f"{what}: cannot pass {tracker.describe()} to a tensor op")


def freeze_constant(value, what):
    if isinstance(value, list):
        return ArgList(freeze_constant(v, what) for v in value)
    if isinstance(value, tuple):
        return tuple(freeze_constant(v, what) for v in value)
    if isinstance(value, slice):
        return Slice(value.start, value.stop, value.step)
    return value


def _to_meta(arg):
    if isinstance(arg, Value):
        if isinstance(arg.type, TensorType):
            return meta_of(arg.type)
        if isinstance(arg.type, SymIntType) and isinstance(arg.type.expr, int):
            return arg.type.expr
        raise Unsupported(f"symbolic scalar {arg} cannot be run on meta tensors yet")
    if isinstance(arg, ArgList):
        return [_to_meta(a) for a in arg]
    if isinstance(arg, tuple):
        return tuple(_to_meta(a) for a in arg)
    if isinstance(arg, Slice):
        return slice(arg.start, arg.stop, arg.step)
    return arg


_DYNAMO_DEFERRED = [False]


def _like_first(src: torch.Tensor, *args, **kwargs) -> torch.Tensor:
    return torch.empty(src.shape, dtype=src.dtype, device="meta")


# Result rules for torch functions that some torch versions ship without a meta kernel (2.11 has
# none for the encoder layer's fused fast path): the result's type from the meta arguments.
_RESULT_RULES = {
    torch._transformer_encoder_layer_fwd: _like_first,  # a new contiguous tensor shaped like src
}


# Result types of earlier meta runs, by op, function and argument types: a transformer's layers
# repeat the same ops on the same shapes, and a meta run through torch's Python meta kernels costs
# milliseconds, a large part of a warm start when repeated per layer.
_INFERRED: dict = {}
_INFERRED_LIMIT = 4096


def _type_key(arg):
    """A hashable key of what a meta run sees of `arg`: a value's type, a constant's type and value
    (1, 1.0 and True compare equal but give different result dtypes)."""
    if isinstance(arg, Value):
        return ("value", arg.type)
    if isinstance(arg, torch.Tensor):
        raise TypeError("tensor constants are not memoized (hashed by identity, kept alive)")
    if isinstance(arg, (tuple, list)):
        return (type(arg), tuple(_type_key(a) for a in arg))
    if isinstance(arg, dict):
        return (dict, tuple((k, _type_key(v)) for k, v in arg.items()))
    return (type(arg), arg)


def _fresh(structure):
    """`structure` with its lists copied (a memoized result is handed out more than once)."""
    if isinstance(structure, list):
        return [_fresh(x) for x in structure]
    if isinstance(structure, tuple) and any(isinstance(x, (list, tuple)) for x in structure):
        return make_tuple(type(structure), [_fresh(x) for x in structure])
    return structure


def infer_result(op: str, fn, args: tuple, kwargs: dict, grad_enabled: bool):
    """Run `fn` on meta copies of the inputs: (structure, types) where structure mirrors the
    result with TensorType leaves (tuples and named tuples kept). Remembered per op, function and
    argument types for the rest of the process."""
    try:
        if isinstance(getattr(fn, "__self__", None), torch.Tensor):
            raise TypeError("a method bound to a tensor")
        # factory functions read the default dtype and device: a result inferred under other
        # defaults does not apply
        defaults = (torch.get_default_dtype(), default_device())
        key = (op, fn, grad_enabled, defaults, _type_key(args), _type_key(kwargs))
        hash(key)
    except TypeError:  # an unhashable constant, a tensor: run it every time
        return _infer_result(op, fn, args, kwargs, grad_enabled)
    found = _INFERRED.get(key)
    if found is None:
        found = _infer_result(op, fn, args, kwargs, grad_enabled)
        if len(_INFERRED) >= _INFERRED_LIMIT:
            _INFERRED.clear()
        _INFERRED[key] = found
    return _fresh(found)


def _infer_result(op: str, fn, args: tuple, kwargs: dict, grad_enabled: bool):
    if not _DYNAMO_DEFERRED[0]:
        _DYNAMO_DEFERRED[0] = True
        defer_dynamo_import()  # torch's Python meta kernels would import torch._dynamo (seconds)
    tensor_types = [v.type for v in _values((args, kwargs)) if isinstance(v.type, TensorType)]
    device = _explicit_device(op, args, kwargs)
    if device is None:  # like torch: a CUDA operand wins over CPU scalars
        non_cpu = [t.device for t in tensor_types if t.device != "cpu"]
        # a factory call without a device goes where set_default_device / `with torch.device` says
        fallback = str(default_device() or "cpu")
        device = non_cpu[0] if non_cpu else (tensor_types[0].device if tensor_types else fallback)
    if op in ("torch.Tensor.to", "torch.Tensor.cuda", "torch.Tensor.cpu"):
        # moving between devices keeps the type but for the device: run it as a same-device op
        args = tuple(a for a in args if not _is_device_like(a))
        kwargs = {k: v for k, v in kwargs.items() if k != "device"}
        if op != "torch.Tensor.to":
            fn = lambda t, *a, **k: t  # noqa: E731
    meta_args = [_to_meta(a) for a in args]
    meta_kwargs = {k: _to_meta(v) for k, v in kwargs.items()}
    if "device" in meta_kwargs:
        meta_kwargs["device"] = "meta"
    elif not tensor_types:
        meta_kwargs["device"] = "meta"
    try:
        with torch.no_grad():
            result = fn(*meta_args, **meta_kwargs)
    except NotImplementedError as e:
        rule = _RESULT_RULES.get(fn)
        if rule is None:
            raise Unsupported(f"{op} has no meta implementation (data-dependent output?): {e}") from e
        result = rule(*meta_args, **meta_kwargs)
    except Exception as e:
        if "item() cannot be called on meta tensors" in str(e):
            # narrow(x, dim, start_tensor, n): the op reads a tensor argument's value, so its result
            # (here the view's offset) depends on data no meta run knows
            raise Unsupported(
                f"{op} reads the value of a tensor argument (its kernel calls Tensor.item()): "
                "data-dependent, so it runs eagerly; pass a Python int instead of a 0-d tensor to compile it"
            ) from e
        raise Unsupported(f"{op} failed on meta tensors: {type(e).__name__}: {e}") from e
    # the function's own name: `add` of torch.add and torch.Tensor.add, `detach` of aten.detach.default
    method = op.split(".")[1] if op.startswith("aten.") else op.rsplit(".", 1)[-1]
    wants_grad = (
        grad_enabled and any(t.requires_grad for t in tensor_types) and method not in _NO_GRAD_RESULTS
    )
    if method == "requires_grad_":
        wants_grad = bool(args[1]) if len(args) > 1 else bool(kwargs.get("requires_grad", True))
        if wants_grad and not tensor_types[0].requires_grad:
            # a new autograd leaf: compiled graphs run below autograd and could not make one
            raise Unsupported(
                "requires_grad_() makes a new autograd leaf (it runs eagerly, so gradients reach it)"
            )
    elif kwargs.get("requires_grad") is True:
        raise Unsupported(
            f"{op}(requires_grad=True) makes a new autograd leaf (it runs eagerly, so gradients reach it)"
        )

    def convert(r):
        if isinstance(r, torch.Tensor):
            t = TensorType.of(r)
            grad = wants_grad and (r.dtype.is_floating_point or r.dtype.is_complex)
            return t.replace(device=device, requires_grad=grad)
        if isinstance(r, tuple):
            return make_tuple(type(r), [convert(x) for x in r])
        if isinstance(r, list):
            return [convert(x) for x in r]
        if isinstance(r, bool) or r is None or isinstance(r, (float, complex)):
            return ScalarType.of(r)
        if isinstance(r, int):
            return SymIntType(r)
        raise Unsupported(f"{op} returns {type(r).__name__}, which capture does not track")

    return convert(result)


def _is_device_like(arg) -> bool:
    if isinstance(arg, torch.device):
        return True
    if isinstance(arg, str):
        try:
            torch.device(arg)
        except (RuntimeError, ValueError):
            return False
        return True
    return False


def _device_name(device) -> str:
    device = torch.device(device)
    if device.type == "cuda" and device.index is None:  # what torch would pick: the current device
        device = torch.device("cuda", torch.cuda.current_device() if torch.cuda.is_available() else 0)
    return str(device)


def _explicit_device(op: str, args: tuple, kwargs: dict) -> str | None:
    """The device an op's arguments ask for (`device=`, `.to("cuda")`, `.to(other)`, `.cuda()`)."""
    if kwargs.get("device") is not None:
        return _device_name(kwargs["device"])
    if op == "torch.Tensor.cpu":
        return "cpu"
    if op == "torch.Tensor.cuda":
        index = args[1] if len(args) > 1 and isinstance(args[1], int) else None
        return _device_name("cuda" if index is None else f"cuda:{index}")
    if op == "torch.Tensor.to":
        for a in args[1:]:
            if _is_device_like(a):
                return _device_name(a)
            if isinstance(a, Value) and isinstance(a.type, TensorType):
                return a.type.device
    return None


def _values(arg):
    if isinstance(arg, Value):
        yield arg
    elif isinstance(arg, (tuple, list)):
        for a in arg:
            yield from _values(a)
    elif isinstance(arg, dict):
        for a in arg.values():
            yield from _values(a)


def flatten_types(structure) -> list:
    if isinstance(structure, (TensorType, ScalarType, SymIntType)):
        return [structure]
    out = []
    for s in structure:
        out.extend(flatten_types(s))
    return out


def rebuild(structure, values: list, make_tensor):
    """Trackers mirroring `structure`, taking Values from `values` in order."""
    if isinstance(structure, TensorType):
        return make_tensor(values.pop(0))
    if structure == ScalarType("none"):
        values.pop(0)  # the node has a none-typed output there; Python sees None
        return ConstVar(None)
    if isinstance(structure, (ScalarType, SymIntType)):
        raise Unsupported("a tensor op returned a Python scalar inside a structure")
    items = [rebuild(s, values, make_tensor) for s in structure]
    if isinstance(structure, list):
        return ListVar(items)
    return TupleVar(items, cls=None if type(structure) is tuple else type(structure))
