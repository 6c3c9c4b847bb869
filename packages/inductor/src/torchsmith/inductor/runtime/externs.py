"""Extern kernels: the library ops the generated wrapper runs with torch (kept prims and fallbacks),
keyed by the name an `ExternCall` carries in `kernel`, and `run_extern`, which runs one call.

A kernel name found in `EXTERN_KERNELS` runs that function; any other name is an op of the IR
registry (`prims.*`, `aten.*`) and runs its eager implementation, which is how the fallback for ops
without a loop lowering works. `extern.output` picks output k of an earlier multi-output call.
"""

import functools

import torch

from torchsmith.inductor.errors import RuntimeCallError
from torchsmith.inductor.loop_ir.program import ExternCall, TensorArg, TensorView
from torchsmith.inductor.runtime import extern_pool, onednn_matmul
from torchsmith.inductor.runtime.aligned_matmul import aligned_addmm, aligned_mm, dense_addmm, dense_mm
from torchsmith.inductor.runtime.conv_relu import convolution_relu
from torchsmith.ir.graph import ArgList
from torchsmith.ir.interpreter import thaw
from torchsmith.ir.registry import lookup_op
from torchsmith.ir.symbolic import evaluate


def _empty(shape, strides, *, dtype, device):
    """prims.empty/empty_strided: an allocation, no values."""
    return torch.empty_strided(list(shape), list(strides), dtype=dtype, device=device)


def _tensor(data, *, dtype=None, device=None, **kwargs):
    """torch.tensor(data) on `device`. For a GPU the data goes through pinned memory, copied without
    waiting: `torch.tensor(data, device="cuda")` copies from pageable memory, which waits for every
    kernel queued before it, and that made a whole graph's host time and GPU time add up."""
    if device is None or torch.device(device).type != "cuda":
        return torch.tensor(data, dtype=dtype, device=device, **kwargs)
    host = torch.tensor(data, dtype=dtype, pin_memory=True, **kwargs)
    return host.to(device, non_blocking=True)


_EFFICIENT_ATTENTION = "aten._scaled_dot_product_efficient_attention.default"
_EFFICIENT_ATTENTION_BACKWARD = "aten._scaled_dot_product_efficient_attention_backward.default"


def _efficient_attention(*args, **kwargs):
    """The memory-efficient attention kernel (autograd_aot.fused_attention puts it in CUDA training
    graphs). Without dropout its RNG outputs (seed, offset) carry nothing, and eager makes them on
    the CPU where the graph types them on the GPU: empty GPU tensors stand in (no copy, no wait)."""
    results = lookup_op(_EFFICIENT_ATTENTION).eager(*args, **kwargs)
    if _dropout(args, kwargs, 5) != 0.0:
        return results
    stand_in = torch.empty((), dtype=torch.long, device=results[0].device)
    return results[0], results[1], stand_in, stand_in


def _efficient_attention_backward(*args, **kwargs):
    """The kernel's backward; without dropout it gets the CPU RNG outputs eager would pass it."""
    if _dropout(args, kwargs, 9) == 0.0 and len(args) > 8:
        cpu = torch.empty((), dtype=torch.long)
        args = (*args[:7], cpu, cpu, *args[9:])
    return lookup_op(_EFFICIENT_ATTENTION_BACKWARD).eager(*args, **kwargs)


def _rng_on_device(op: str, shapes: tuple, dtype: torch.dtype):
    """A fused attention kernel kept in CUDA training graphs (autograd_aot.fused_attention: flash,
    cuDNN). The graph types its RNG outputs (seed, offset; shapes `shapes`) as tensors on the GPU;
    a torch that makes them on the CPU when there is no dropout (the backward then reads neither)
    gets empty GPU stand-ins."""

    def run(*args, **kwargs):
        results = lookup_op(op).eager(*args, **kwargs)
        device = results[0].device
        if results[6].device == device and results[7].device == device:
            return results
        stand_ins = tuple(torch.empty(shape, dtype=dtype, device=device) for shape in shapes)
        return (*results[:6], *stand_ins, *results[8:])

    return run


_FLASH_ATTENTION = "aten._scaled_dot_product_flash_attention.default"
_CUDNN_ATTENTION = "aten._scaled_dot_product_cudnn_attention.default"


def _dropout(args, kwargs, position: int) -> float:
    return args[position] if len(args) > position else kwargs.get("dropout_p", 0.0)


EXTERN_KERNELS = {
    "prims.mm": torch.mm,
    "prims.bmm": torch.bmm,
    "extern.addmm": torch.addmm,  # (bias, a, b): an mm with its bias add (lowerings_library.fuse_bias_add)
    "extern.aligned_mm": aligned_mm,  # a half-precision mm with unaligned columns (lowering/library.py)
    "extern.aligned_addmm": aligned_addmm,  # the same with a bias (lowering/library.py)
    "extern.dense_mm": dense_mm,  # such an mm as a graph output, dense rows (lowering/library.py)
    "extern.dense_addmm": dense_addmm,  # the same with a bias
    # aten.convolution's arguments, the ReLU after it as oneDNN's post-op (lowering/library.py)
    "extern.convolution_relu": convolution_relu,
    "extern.empty": _empty,
    "extern.tensor": _tensor,
    _EFFICIENT_ATTENTION: _efficient_attention,
    _EFFICIENT_ATTENTION_BACKWARD: _efficient_attention_backward,
    _FLASH_ATTENTION: _rng_on_device(_FLASH_ATTENTION, ((2,), ()), torch.uint64),
    _CUDNN_ATTENTION: _rng_on_device(_CUDNN_ATTENTION, ((), ()), torch.int64),
}

# The kernel of a call that reads output `k` (its only param) of the multi-output call whose first
# output is `args[0]`; the other outputs wait in the wrapper's tensors under `extra_output_name`.
OUTPUT_KERNEL = "extern.output"


def extra_output_name(call_name: str, k: int) -> str:
    """Where run_extern keeps output `k` (not the call's own) of a multi-output call (not a buffer of
    the program)."""
    return f"{call_name}#{k}"


@functools.lru_cache(maxsize=8192)
def _static_dims(dims: tuple) -> tuple[int, ...]:
    """Sizes without symbols as ints, evaluated once: extern calls run every call of a graph, and
    evaluating sympy sizes each time was a measurable share of a small model's call."""
    return tuple(evaluate(d, {}) for d in dims)


def _dims(dims: tuple, bindings) -> tuple[int, ...]:
    return _static_dims(dims) if not bindings else tuple(evaluate(d, bindings) for d in dims)


def tensor_of(tensors: dict[str, torch.Tensor], view: TensorView, bindings) -> torch.Tensor:
    """`view` as a strided tensor over the storage of the buffer it reads."""
    base = tensors[view.buffer]
    shape, strides = _dims(view.shape, bindings), _dims(view.strides, bindings)
    offset = evaluate(view.offset, bindings)
    if base.shape == shape and base.stride() == strides and offset == 0:
        return base
    return base.as_strided(shape, strides, base.storage_offset() + offset)


def kernel_function(kernel: str):
    """The function an extern call's `kernel` name runs."""
    fn = EXTERN_KERNELS.get(kernel)
    if fn is None:
        if kernel.startswith("prims."):
            # A program read from the compile cache may reach here before anything imported prims
            # (which registers the prims ops).
            import torchsmith.prims  # noqa: F401
        fn = lookup_op(kernel).eager
        EXTERN_KERNELS[kernel] = fn
    return fn


def _resolve(param, args: list[torch.Tensor], bindings):
    if isinstance(param, TensorArg):
        return args[param.k]
    if isinstance(param, tuple):
        items = [_resolve(p, args, bindings) for p in param]
        return items if isinstance(param, ArgList) else tuple(items)
    return thaw(param, bindings)


def run_extern(call: ExternCall, tensors: dict[str, torch.Tensor], bindings) -> torch.Tensor:
    """Run `call` with torch on the tensors of its argument views; returns the tensor it defines
    (in `call.layout`). The other outputs of a multi-output op go into `tensors` under
    `extra_output_name(call.name, k)`, for the `extern.output` calls that read them."""
    args = [tensor_of(tensors, v, bindings) for v in call.args]
    if call.kernel == OUTPUT_KERNEL:
        (k,) = call.params
        result = tensors[extra_output_name(call.args[0].buffer, k)]
        return in_layout(call, result, bindings, [])
    fn = kernel_function(call.kernel)
    if call.kernel in onednn_matmul.REPLACEMENTS and args[-1].is_cpu:
        chosen = onednn_matmul.choose(call.kernel, fn, [a.shape for a in args])
        if chosen is not fn:  # large float32 CPU products, where oneDNN beats the BLAS
            return in_layout(call, chosen(*args), bindings, args)
    if fn is extern_pool.OUT_KERNELS.get(call.kernel) and not (call.params or call.kwargs):
        # A large matmul result goes into its call site's buffer from the last run when that is free.
        layout = call.layout
        shape, strides = _dims(layout.shape, bindings), _dims(layout.strides, bindings)
        if extern_pool.worth_keeping(shape, layout.dtype):
            out = extern_pool.out_buffer(call, shape, strides, layout.dtype, args[0].device)
            result = fn(*args, out=out)
            extern_pool.keep(call, result)
            return result
    if call.params or call.kwargs:
        params = [_resolve(p, args, bindings) for p in call.params]
        kwargs = {k: _resolve(v, args, bindings) for k, v in call.kwargs}
        result = fn(*params, **kwargs)
    else:
        result = fn(*args)
    return in_layout(call, own_output(call, result, tensors), bindings, args)


def own_output(call: ExternCall, result, tensors: dict):
    """The output of `result` that `call` defines; a multi-output op's others go into `tensors`
    under `extra_output_name`, for the `extern.output` calls that read them."""
    if not isinstance(result, (tuple, list)):
        return result
    for k, extra in enumerate(result):
        if k != call.output and extra is not None:
            tensors[extra_output_name(call.name, k)] = extra
    return result[call.output]


def in_layout(call: ExternCall, result, bindings, args) -> torch.Tensor:
    """`result` as a tensor of its own storage in the layout the program reads it with: kernels index
    the buffer with the layout's strides, and later steps may reuse the storage of its inputs."""
    layout = call.layout
    if not isinstance(result, torch.Tensor) or result.dtype != layout.dtype:
        got = type(result).__name__ if not isinstance(result, torch.Tensor) else str(result.dtype)
        raise RuntimeCallError(
            f"extern call {call.name} ({call.kernel}, {call.origin}) returned {got}, expected a "
            f"{layout.dtype} tensor; the op's type rule and its eager implementation disagree"
        )
    shape, strides = _dims(layout.shape, bindings), _dims(layout.strides, bindings)
    if result.shape != shape:
        raise RuntimeCallError(
            f"extern call {call.name} ({call.kernel}, {call.origin}) returned shape {list(result.shape)}, "
            f"expected {list(shape)}"
        )
    storage = result.untyped_storage().data_ptr() if result.numel() else None
    aliases = storage is not None and any(
        a.numel() and a.untyped_storage().data_ptr() == storage for a in args
    )
    if not aliases and (result.numel() <= 1 or same_strides(shape, result.stride(), strides)):
        return result
    out = torch.empty_strided(shape, strides, dtype=layout.dtype, device=result.device)
    return out.copy_(result)


def same_strides(shape, actual, expected) -> bool:
    """Whether two strides agree wherever the size is not 1 (where it is, no index reads them)."""
    return all(size == 1 or a == e for size, a, e in zip(shape, actual, expected))
