"""Output layouts that torch's meta kernels get wrong for the real device.

The trace runs ATen ops on meta tensors and records the strides the meta kernels report; for
pointwise ops, views, reductions, pooling, cat and `*_like` those are eager's. A convolution is the
exception: its layout is chosen by the backend that runs it (oneDNN on CPU returns a channels-last
result when the input or the weight is channels-last, except for float64 or when the slow path
runs; cuDNN has its own rule), while the meta kernel answers contiguous for every channels-last
input. So the trace asks the real kernel: it runs the convolution once on the real device with the
same batch, channels, weight, dtype, layouts and arguments but the smallest spatial sizes that still
give an output of at least 2 per spatial dim, and lays the meta result out the way the real result
is (channels-last or contiguous). Later meta ops then see the layout eager's ops see.
"""

import torch

CONVOLUTION = "aten.convolution.default"

# The channels-last formats by the rank of the tensor they apply to.
_CHANNELS_LAST = {4: torch.channels_last, 5: torch.channels_last_3d}


def with_device_layout(op: str, args, result, device: str):
    """`result` (a meta tensor) laid out as `op` lays it out on `device`; `result` itself for ops
    whose meta kernels already say what eager does."""
    if op != CONVOLUTION or not isinstance(result, torch.Tensor) or result.dim() not in _CHANNELS_LAST:
        return result
    if any(isinstance(a, torch.Tensor) and a.device.type != "meta" for a in args[:3]):
        return result
    fmt = _CHANNELS_LAST[result.dim()]
    try:
        probe = _probe_convolution(args, device)
    except (RuntimeError, ValueError):  # the real kernel refuses: the real call will say why
        return result
    if probe.is_contiguous(memory_format=fmt) and not probe.is_contiguous():
        layout = torch.empty(result.shape, dtype=result.dtype, device="meta", memory_format=fmt)
    elif probe.is_contiguous() and not result.is_contiguous():
        layout = torch.empty(result.shape, dtype=result.dtype, device="meta")
    else:
        return result
    return layout if layout.stride() != result.stride() else result


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
    strides = [0] * meta.dim()
    step = 1
    for k in reversed(order):
        strides[k] = step
        step *= max(sizes[k], 1)
    return torch.zeros(step, dtype=meta.dtype, device=device).as_strided(sizes, strides)
