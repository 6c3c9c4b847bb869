"""Checks of the verifier on types and on what ops compute, beyond the graph's structure.

- `type_problems(t)`: sizes and strides are non-negative and below 2**63, a tensor has fewer than
  2**63 elements, the device is a known kind with a sane index.
- `meta_result_problems(node, eager)`: an ATen op run on meta tensors of the declared input types
  gives the declared output shapes and dtypes.

Devices: a graph file may be written on another machine, so the verifier does not ask how many GPUs
this one has; `cuda:7` verifies anywhere. The index is only bounded (below `MAX_DEVICE_INDEX`), and
the device's presence is checked when something is about to run there (`check_devices_present`,
called by `example_inputs` and the stage command lines).
"""

import sympy
import torch

from torchsmith.ir.errors import ExecutionSetupError
from torchsmith.ir.graph import ArgList, Node, Slice, Value
from torchsmith.ir.torch_startup import defer_dynamo_import
from torchsmith.ir.types import ScalarType, SymIntType, TensorType, format_type

KNOWN_DEVICE_TYPES = frozenset({"cpu", "cuda", "meta", "mps", "xpu"})
MAX_DEVICE_INDEX = 64  # beyond any machine torchsmith runs on; a larger index is a corrupt file
MAX_DIM = 2**63  # torch stores sizes, strides and element counts as int64

# Ops the meta check leaves alone: they change global state instead of computing a tensor.
_NO_META_CHECK = frozenset({"aten._set_grad_enabled.default"})
# Outputs (by index) that the real kernel may return empty where the meta kernel gives them a size:
# inference batch norm's saved statistics are empty on CPU (autograd_aot's device_shapes asks it).
_MAY_BE_EMPTY = {
    "aten.native_batch_norm.default": frozenset({1, 2}),
    "aten._native_batch_norm_legit_no_training.default": frozenset({1, 2}),
}


def type_problems(t) -> list[str]:
    """What is wrong with the values in type `t` (an empty list when nothing is)."""
    if not isinstance(t, TensorType):
        return []
    problems = []
    for what, dims in (("size", t.shape), ("stride", t.strides)):
        for axis, dim in enumerate(dims):
            if isinstance(dim, bool) or not isinstance(dim, (int, sympy.Expr)):
                problems.append(f"{what} {axis} is {dim!r}, not an integer or a symbolic expression")
            elif isinstance(dim, int) and not 0 <= dim < MAX_DIM:
                problems.append(f"{what} {axis} is {dim}; a {what} is an integer in 0 .. 2**63-1")
    concrete = [d for d in t.shape if isinstance(d, int) and not isinstance(d, bool)]
    if not problems and len(concrete) == len(t.shape):
        numel = 1
        for d in concrete:
            numel *= d
        if numel >= MAX_DIM:
            problems.append(f"it has {numel} elements; a tensor holds fewer than 2**63")
    problems += device_problems(t.device)
    return problems


def device_problems(device) -> list[str]:
    """What is wrong with a device string of a type (its kind and index, not its presence here)."""
    try:
        parsed = torch.device(device)
    except (RuntimeError, TypeError, ValueError):
        return [f"device {device!r} is not a device; expected e.g. 'cpu' or 'cuda:0'"]
    if parsed.type not in KNOWN_DEVICE_TYPES:
        return [f"device {device!r} is of unknown kind {parsed.type!r}; expected one of "
                f"{', '.join(sorted(KNOWN_DEVICE_TYPES))}"]
    if parsed.index is not None and not 0 <= parsed.index < MAX_DEVICE_INDEX:
        return [f"device {device!r} has index {parsed.index}; expected 0 .. {MAX_DEVICE_INDEX - 1}"]
    return []


def check_devices_present(types, what: str = "the graph") -> None:
    """Raise `ExecutionSetupError` when a device named in `types` is not on this machine (a CUDA
    index at or past the device count, or CUDA without a GPU)."""
    for t in types:
        if not isinstance(t, TensorType):
            continue
        device = torch.device(t.device)
        if device.type == "cuda":
            count = torch.cuda.device_count() if torch.cuda.is_available() else 0
            index = 0 if device.index is None else device.index
            if index >= count:
                raise ExecutionSetupError(
                    f"{what} needs {t.device}, but this machine has {count} CUDA device"
                    f"{'s' * (count != 1)}; run it where that device exists or change the device in its types"
                )
        elif device.type not in ("cpu", "meta"):
            module = getattr(torch, device.type, None)
            if module is None or not module.is_available():
                raise ExecutionSetupError(f"{what} needs {t.device}, which this machine does not have")


def meta_result_problems(node: Node, eager) -> list[str]:
    """Run an ATen op on meta tensors of the node's declared input types and compare the output
    shapes and dtypes with the declared ones. Nodes the check cannot run (symbolic shapes, scalar
    inputs whose value is unknown, ops without a meta kernel) are skipped: no finding."""
    if not isinstance(eager, torch._ops.OpOverload) or node.op in _NO_META_CHECK:
        return []
    try:
        args = [_meta_arg(a) for a in node.args]
        kwargs = {k: _meta_kwarg(k, v) for k, v in node.kwargs}
    except _Unknown:
        return []
    if any(not _concrete(v.type) for v in node.outputs):
        return []
    defer_dynamo_import()  # torch's meta kernels would import TorchDynamo on their first call
    try:
        with torch.no_grad():
            result = eager(*args, **kwargs)
    except Exception:  # no meta kernel, or data-dependent: nothing to compare with
        return []
    results = list(result) if isinstance(result, (list, tuple)) else [result]
    if len(results) != len(node.outputs):
        return []
    problems = []
    may_be_empty = _MAY_BE_EMPTY.get(node.op, frozenset())
    for i, (value, got) in enumerate(zip(node.outputs, results, strict=True)):
        declared = value.type
        if i in may_be_empty and isinstance(declared, TensorType) and tuple(declared.shape) == (0,):
            continue
        if isinstance(got, torch.Tensor):
            if not isinstance(declared, TensorType):
                problems.append(f"output %{value.name} is declared {format_type(declared)}, but {node.op} "
                                f"returns a tensor {_describe(got)}")
            elif tuple(declared.shape) != tuple(got.shape) or declared.dtype != got.dtype:
                problems.append(
                    f"output %{value.name} is declared {format_type(declared)}, but {node.op} on the "
                    f"declared input types gives {_describe(got)}"
                )
    return problems


class _Unknown(Exception):
    """An argument whose runtime value the verifier cannot make up."""


def _concrete(t) -> bool:
    if isinstance(t, TensorType):
        return all(isinstance(d, int) for d in t.shape + t.strides)
    return not isinstance(t, SymIntType) or isinstance(t.expr, int)


def _meta_arg(arg):
    if isinstance(arg, Value):
        t = arg.type
        if isinstance(t, TensorType) and _concrete(t) and not type_problems(t):
            return torch.empty_strided(t.shape, t.strides, dtype=t.dtype, device="meta")
        if isinstance(t, SymIntType) and isinstance(t.expr, int):
            return t.expr
        if isinstance(t, ScalarType) and t.kind == "none":
            return None
        raise _Unknown
    if isinstance(arg, ArgList):
        return [_meta_arg(a) for a in arg]
    if isinstance(arg, tuple):
        return tuple(_meta_arg(a) for a in arg)
    if isinstance(arg, Slice):
        return slice(_meta_arg(arg.start), _meta_arg(arg.stop), _meta_arg(arg.step))
    if isinstance(arg, sympy.Basic):
        if not arg.is_Integer:
            raise _Unknown
        return int(arg)
    if isinstance(arg, torch.device):
        return torch.device("meta")
    return arg


def _meta_kwarg(name: str, value):
    if name == "device" and value is not None:
        return torch.device("meta")
    return _meta_arg(value)


def _describe(t: torch.Tensor) -> str:
    return f"{str(t.dtype).removeprefix('torch.')}{list(t.shape)}"
