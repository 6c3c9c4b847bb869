"""Output layouts that torch's meta kernels get wrong for the real device.

The trace runs ATen ops on meta tensors and records the strides the meta kernels report; for
pointwise ops, views, reductions, most pooling, cat and `*_like` those are eager's. A few kernels
choose their layout themselves and their meta twins say contiguous for a channels-last input:
convolution (oneDNN returns channels-last when the input or the weight is, except for float64 or
when the slow path runs; cuDNN has its own rule), `native_group_norm`, reflection and replication
padding, channel shuffle. For those the trace asks the real kernel: it runs the op once on the real
device on zero tensors laid out like the arguments, with smaller spatial sizes where the op allows
(a convolution: the smallest that still give an output of at least 2 per spatial dim; the others:
at most 8, or the real size when the op needs more), and lays the meta result out the way the real
result is (channels-last or contiguous). Later meta ops then see the layout eager's ops see.
CUDA's fused attention results need no probe: the kernels' rules are known (ATTENTION_MIRRORS).
"""

import contextlib
import math

import torch
from torch.overrides import TorchFunctionMode

CONVOLUTION = "aten.convolution.default"
# Ops (other than convolution) whose first output's layout the real kernel decides, by the size
# their probe keeps for each spatial dim: None keeps the real sizes (the pads need them).
PROBED = {
    "aten.native_group_norm.default": 8,
    "aten.reflection_pad1d.default": None,
    "aten.reflection_pad2d.default": None,
    "aten.reflection_pad3d.default": None,
    "aten.replication_pad1d.default": None,
    "aten.replication_pad2d.default": None,
    "aten.replication_pad3d.default": None,
    "aten.channel_shuffle.default": 8,
    "aten.native_channel_shuffle.default": 8,
}

# The channels-last formats by the rank of the tensor they apply to.
_CHANNELS_LAST = {4: torch.channels_last, 5: torch.channels_last_3d}


# CUDA's fused attention kernels allocate each result in the memory order of one argument: result k
# of the op is laid out like its argument ATTENTION_MIRRORS[op][k] (flash: as `empty_like` of its
# (batch, position, head, feature) view; cuDNN's backward: dense, its dims ordered by the
# argument's strides). The meta kernels allocate like the arguments themselves, which differs where
# a head split of a projection is not dense. cuDNN's forward meta kernel already follows its rule.
ATTENTION_MIRRORS = {
    "aten._scaled_dot_product_flash_attention.default": ("view", {0: 0}),
    "aten._scaled_dot_product_flash_attention_backward.default": ("view", {0: 1, 1: 2, 2: 3}),
    "aten._scaled_dot_product_cudnn_attention_backward.default": ("dim order", {0: 1, 1: 2, 2: 3}),
}


def with_device_layout(op: str, args, result, device: str):
    """`result` (a meta tensor, or a tuple whose first item is one) laid out as `op` lays it out on
    `device`; `result` itself for ops whose meta kernels already say what eager does."""
    if op in ATTENTION_MIRRORS:
        return _attention_layouts(op, args, result)
    if op != CONVOLUTION and op not in PROBED:
        return result
    if isinstance(result, tuple) and result and isinstance(result[0], torch.Tensor):
        return (with_device_layout(op, args, result[0], device), *result[1:])
    if not isinstance(result, torch.Tensor) or result.dim() not in _CHANNELS_LAST:
        return result
    if any(isinstance(a, torch.Tensor) and a.device.type != "meta" for a in args):
        return result
    fmt = _CHANNELS_LAST[result.dim()]
    try:
        probe = _probe_convolution(args, device) if op == CONVOLUTION else _probe(op, args, device)
    except (RuntimeError, ValueError, IndexError):  # the real kernel refuses: the real call will say why
        return result
    if isinstance(probe, tuple):
        probe = probe[0]
    if probe.is_contiguous(memory_format=fmt) and not probe.is_contiguous():
        layout = torch.empty(result.shape, dtype=result.dtype, device="meta", memory_format=fmt)
    elif probe.is_contiguous() and not result.is_contiguous():
        layout = torch.empty(result.shape, dtype=result.dtype, device="meta")
    else:
        return result
    return layout if layout.stride() != result.stride() else result


def _attention_layouts(op: str, args, result: tuple) -> tuple:
    """The results of a fused attention op (meta tensors) laid out as the CUDA kernel lays them out."""
    laid_out = list(result)
    rule, mirrors = ATTENTION_MIRRORS[op]
    for k, arg in mirrors.items():
        like = args[arg]
        if rule == "view":
            strides = torch.empty_like(like.transpose(1, 2)).transpose(1, 2).stride()
        else:
            strides = _dense_strides(like.shape, sorted(range(like.dim()), key=lambda d: -like.stride(d)))
        if like.shape == result[k].shape and strides != result[k].stride():
            meta = result[k]
            laid_out[k] = torch.empty_strided(meta.shape, strides, dtype=meta.dtype, device=meta.device)
    return tuple(laid_out)


def _dense_strides(shape, order: list[int]) -> tuple[int, ...]:
    """Strides of a dense tensor of `shape` whose dims run outermost to innermost in `order`."""
    strides = [0] * len(shape)
    step = 1
    for d in reversed(order):
        strides[d] = step
        step *= max(int(shape[d]), 1)
    return tuple(strides)


def _probe_convolution(args, device: str) -> torch.Tensor:
    """The real convolution of small stand-ins for `args` (meta tensors) on `device`."""
    input, weight, bias, stride, padding, dilation, transposed, output_padding, groups = args
    spatial = input.dim() - 2
    sizes = list(input.shape[:2])
    for d in range(spatial):
        sizes.append(_smallest_input(input.shape[2 + d], weight.shape[2 + d], _at(stride, d), _at(padding, d),
                                     _at(dilation, d), transposed, _at(output_padding, d)))
    real_input = _like(input, sizes, device)
    real_weight = _like(weight, list(weight.shape), device)
    real_bias = None if bias is None else _like(bias, list(bias.shape), device)
    with torch.no_grad():
        return torch.ops.aten.convolution.default(
            real_input, real_weight, real_bias, stride, padding, dilation, transposed, output_padding, groups
        )


def _probe(op: str, args, device: str):
    """`op` run on `device` on zero stand-ins of its tensor arguments, the first one's spatial dims
    (those after batch and channels) cut to PROBED[op] (sizes that later arguments name, such as a
    group norm's N and HxW, follow)."""
    keep = PROBED[op]
    first = args[0]
    sizes = list(first.shape)
    if keep is not None:
        sizes = sizes[:2] + [min(int(n), keep) for n in sizes[2:]]
    real = [_like(first, sizes, device)]
    for a in args[1:]:
        real.append(_like(a, list(a.shape), device) if isinstance(a, torch.Tensor) else a)
    if op == "aten.native_group_norm.default":  # (input, weight, bias, N, C, HxW, group, eps)
        hxw = 1
        for n in sizes[2:]:
            hxw *= n
        real[5] = hxw
    packet = getattr(torch.ops.aten, op.split(".")[1])
    with torch.no_grad():
        return getattr(packet, op.split(".")[2])(*real)


def _at(values, d: int) -> int:
    values = list(values)
    return int(values[d] if len(values) > d else values[0])


def _smallest_input(size, kernel, stride, padding, dilation, transposed, output_padding) -> int:
    """The smallest input size, up to the real one, whose output size is at least 2."""
    size = int(size)
    for n in range(1, size + 1):
        if transposed:
            out = (n - 1) * stride - 2 * padding + dilation * (int(kernel) - 1) + output_padding + 1
        else:
            out = (n + 2 * padding - dilation * (int(kernel) - 1) - 1) // stride + 1
        if out >= 2:
            return n
    return size


def _like(meta: torch.Tensor, sizes: list[int], device: str) -> torch.Tensor:
    """A zero tensor on `device` of `sizes`, its dims in the memory order of `meta`'s strides."""
    order = sorted(range(meta.dim()), key=lambda k: (-meta.stride(k), k))
    strides = _dense_strides(sizes, order)
    storage = math.prod(max(n, 1) for n in sizes)
    return torch.zeros(storage, dtype=meta.dtype, device=device).as_strided(sizes, strides)


class CpuGroupNorm(TorchFunctionMode):
    """While the tracer runs a CPU program: `F.group_norm` of a channels-last input keeps that layout,
    as the CPU composite does (on any other device, meta included, the composite first copies the
    input to contiguous, before any op a probe could correct)."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is torch.nn.functional.group_norm or func is torch.group_norm:
            result = _channels_last_group_norm(args, kwargs)
            if result is not None:
                return result
        return func(*args, **kwargs)


def cpu_layouts(device: str):
    """The context the tracer runs a program in: `CpuGroupNorm` for CPU programs."""
    return CpuGroupNorm() if device == "cpu" else contextlib.nullcontext()


def _channels_last_group_norm(args, kwargs: dict):
    """`native_group_norm` on the input as it is laid out, or None where the composite's own path
    gives eager's layout (a contiguous input, or one whose layout is ambiguous)."""
    call = {"weight": None, "bias": None, "eps": 1e-5}
    call.update(zip(("input", "num_groups", "weight", "bias", "eps"), args))
    call.update({k: v for k, v in kwargs.items() if k in ("input", "num_groups", "weight", "bias", "eps")})
    x = call.get("input")
    fmt = _CHANNELS_LAST.get(x.dim()) if isinstance(x, torch.Tensor) else None
    if fmt is None or x.is_contiguous() or not x.is_contiguous(memory_format=fmt):
        return None
    n, c, hxw = x.shape[0], x.shape[1], math.prod(x.shape[2:])
    weight, bias = call["weight"], call["bias"]
    return torch.ops.aten.native_group_norm(x, weight, bias, n, c, hxw, call["num_groups"], call["eps"])[0]
