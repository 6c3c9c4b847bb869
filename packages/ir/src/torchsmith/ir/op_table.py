"""The explicit table of Python-level ops a graph may name: what capture (and fx import) records.

An op name such as `torch.nn.functional.gelu` resolves only if it is a key of this table; nothing
walks the attributes of a module by a name read from a file, so `torch.os.system` or
`torch.load` is an unknown op, not a call. The table holds:

- `torch.<f>`: the ATen-bound torch functions (`torch._C._VariableFunctions`, which holds every
  `torch.add`, `torch.softmax`, ...) and the Python ones of `torch.functional` (`einsum`, `split`, ...);
- `torch.nn.functional.<f>`, `torch.linalg.<f>`, `torch.special.<f>`, `torch.fft.<f>`: the public
  functions those modules define or bind from torch's C extension;
- `torch.Tensor.<m>`: the Tensor methods and operators (hooks, storage and pickling excluded);
- `operator.<f>` and `math.<f>`: Python's own functions on scalars and tensors (not the ones that
  call or build arbitrary callables);
- `torch._C._set_grad_enabled`: the grad-mode switch capture records.

Functions that touch files, global state or other processes are left out by name.
"""

import functools
import math
import operator
import types
from collections.abc import Callable

import torch

# Torch functions that read or write files, change global state, or build callables: no graph
# needs them as an op, and a graph read from a file must not be able to call them.
_TORCH_EXCLUDED = frozenset(
    {
        "from_file",
        "load",
        "save",
        "manual_seed",
        "seed",
        "set_rng_state",
        "get_rng_state",
        "compile",
        "set_default_device",
        "set_default_dtype",
        "set_default_tensor_type",
        "set_num_threads",
        "set_num_interop_threads",
        "set_flush_denormal",
        "set_printoptions",
        "use_deterministic_algorithms",
    }
)

# Tensor attributes that are object protocol, hooks, storage sharing or pickling, not computation.
_TENSOR_EXCLUDED = frozenset(
    {
        "__class__",
        "__init__",
        "__new__",
        "__init_subclass__",
        "__subclasshook__",
        "__class_getitem__",
        "__reduce__",
        "__reduce_ex__",
        "__getstate__",
        "__setstate__",
        "__deepcopy__",
        "__copy__",
        "__getattribute__",
        "__getattr__",
        "__setattr__",
        "__delattr__",
        "__dir__",
        "__sizeof__",
        "__torch_function__",
        "__torch_dispatch__",
        "__format__",
        "__repr__",
        "__str__",
        "__hash__",
        "__array__",
        "__array_wrap__",
        "__dlpack__",
        "__dlpack_device__",
        "register_hook",
        "register_post_accumulate_grad_hook",
        "share_memory_",
        "storage",
        "untyped_storage",
        "module_load",
        "pin_memory",
        "backward",
        "retain_grad",
        "set_",
    }
)

# ATen ops that read or map files: a graph read from a file must not reach the file system.
ATEN_EXCLUDED = frozenset({"from_file"})

# operator and math functions that call, or make, arbitrary callables.
_OPERATOR_EXCLUDED = frozenset({"call", "attrgetter", "itemgetter", "methodcaller"})

_SUBMODULES = ("torch.nn.functional", "torch.linalg", "torch.special", "torch.fft")


def _is_function(obj) -> bool:
    return callable(obj) and not isinstance(obj, (type, types.ModuleType))


def _public_functions(module, owners: tuple[str, ...]) -> dict[str, Callable]:
    """Public functions of `module` that it defines itself or binds from a module in `owners`."""
    found = {}
    for name, obj in vars(module).items():
        if name.startswith("_") or not _is_function(obj):
            continue
        owner = getattr(obj, "__module__", None) or ""
        if owner == module.__name__ or owner in owners:
            found[name] = obj
    return found


# Private ATen-bound torch functions that public modules call in their forward, so that capture
# records them as ops instead of breaking the graph: nn.utils.weight_norm (both APIs) calls
# torch._weight_norm (Wav2Vec2's positional convolution); nn.TransformerEncoderLayer and
# nn.MultiheadAttention call their fused fast paths in inference. The rest are ATen ops torch's own
# OpInfo database calls through torch.* (functional, or mutating only running statistics).
_TORCH_PRIVATE_OPS = (
    "_weight_norm", "_transformer_encoder_layer_fwd", "_native_multi_head_attention",
    "_chunk_cat", "_unsafe_masked_index", "_unsafe_masked_index_put_accumulate", "_native_batch_norm_legit",
)


def _torch_functions() -> dict[str, Callable]:
    names = [n for n in dir(torch._C._VariableFunctions) if not n.startswith("_")]
    names += list(_TORCH_PRIVATE_OPS)
    names += list(torch.functional.__all__)
    table = {}
    for name in names:
        obj = getattr(torch, name, None)
        if name not in _TORCH_EXCLUDED and _is_function(obj):
            table[f"torch.{name}"] = obj
    return table


def _submodule_functions() -> dict[str, Callable]:
    import torch.nn.functional

    owners = ("torch", "torch._C", "torch._C._nn", "torch._C._linalg", "torch._C._special", "torch._C._fft")
    table = {}
    for module_name in _SUBMODULES:
        module = {
            "torch.nn.functional": torch.nn.functional,
            "torch.linalg": torch.linalg,
            "torch.special": torch.special,
            "torch.fft": torch.fft,
        }[module_name]
        for name, obj in _public_functions(module, owners).items():
            if not name.startswith("has_torch_function"):
                table[f"{module_name}.{name}"] = obj
    return table


def _tensor_methods() -> dict[str, Callable]:
    table = {}
    for name in dir(torch.Tensor):
        if name in _TENSOR_EXCLUDED or (name.startswith("_") and not name.startswith("__")):
            continue
        obj = getattr(torch.Tensor, name, None)
        if _is_function(obj):
            table[f"torch.Tensor.{name}"] = obj
    return table


def _python_functions() -> dict[str, Callable]:
    table = {}
    for module in (operator, math):
        for name in dir(module):
            obj = getattr(module, name)
            if name.startswith("_") or name in _OPERATOR_EXCLUDED or not _is_function(obj):
                continue
            table[f"{module.__name__}.{name}"] = obj
    return table


@functools.cache
def bound_op_names() -> dict[int, str]:
    """id of a C-level function -> its table name, for the functions `torch.linalg`,
    `torch.special`, `torch.fft` and `torch.nn.functional` bind under another name than their own
    (`torch.special.entr` is `torch._C._special.special_entr`, `F.logsigmoid` is
    `torch._C._nn.log_sigmoid`), so an op name is found from the function a program calls.
    The table holds every function, so the ids stay valid."""
    names = {}
    for name, fn in _submodule_functions().items():
        if getattr(fn, "__name__", None) != name.rsplit(".", 1)[1]:
            names.setdefault(id(python_op_table()[name]), name)
    return names


@functools.cache
def python_op_table() -> dict[str, Callable]:
    """Op name -> callable for every torch, Tensor, operator and math op a graph may name."""
    table = _torch_functions() | _submodule_functions() | _tensor_methods() | _python_functions()
    table["torch._C._set_grad_enabled"] = torch._C._set_grad_enabled
    return table
