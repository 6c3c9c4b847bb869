"""`extern.convolution_relu`: a convolution and the ReLU after it as one library call, so the
activation is written once, by the convolution, instead of read and written again by a ReLU kernel:
on the CPU oneDNN's (`torch.ops.mkldnn._convolution_pointwise` with its "relu" post-op), on CUDA
cuDNN's (`torch.cudnn_convolution_relu`: the bias and ReLU inside the convolution's kernel, which
keeps NaN as `torch.relu` does).

oneDNN's ReLU post-op maps NaN to 0 where `torch.relu` keeps NaN. A convolution's result holds a
NaN only where its input, weight or bias holds a NaN or infinity (or where a sum overflows both
ways), so the fused call runs only when those are finite, and the exact pair (convolution, then
`torch.relu`) runs otherwise. The weight and bias are small and checked on every call; the input,
an image, is checked unless it is the result of a fused call that ran (whose inputs were finite,
so it holds no NaN unless a sum overflowed): a chain of conv-ReLU layers checks its first input only.
"""

import math
import weakref

import torch

# id -> weak reference of the results of fused calls that ran (finite inputs, so finite results).
_FINITE: dict[int, weakref.ref] = {}


def available(device: torch.device) -> bool:
    """Whether this torch build has a fused convolution op for `device` (oneDNN's, cuDNN's)."""
    if device.type == "cuda":
        return torch.backends.cudnn.is_available() and hasattr(torch, "cudnn_convolution_relu")
    return torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_convolution_pointwise")


def _known_finite(t: torch.Tensor) -> bool:
    ref = _FINITE.get(id(t))
    return ref is not None and ref() is t


def _mark_finite(t: torch.Tensor) -> None:
    key = id(t)
    _FINITE[key] = weakref.ref(t, lambda _, key=key: _FINITE.pop(key, None))


def _finite(t: torch.Tensor) -> bool:
    # A sum is finite only if every element is (a sum that overflows sends the call to the exact path).
    return math.isfinite(t.sum())


def convolution_relu(x, weight, bias, stride, padding, dilation, transposed, output_padding, groups):
    """`relu(aten.convolution(...))` (same arguments) for a 2-D convolution that is not transposed."""
    if x.is_cuda:
        if transposed or not torch.backends.cudnn.enabled or any(output_padding):
            return torch.relu(torch.ops.aten.convolution.default(
                x, weight, bias, stride, padding, dilation, transposed, output_padding, groups))
        return torch.cudnn_convolution_relu(x, weight, bias, stride, padding, dilation, groups)
    fused = (
        not transposed
        and torch.backends.mkldnn.enabled
        and _finite(weight)
        and (bias is None or _finite(bias))
        and (_known_finite(x) or _finite(x))
    )
    if not fused:
        result = torch.ops.aten.convolution.default(
            x, weight, bias, stride, padding, dilation, transposed, output_padding, groups
        )
        return torch.relu(result)
    result = torch.ops.mkldnn._convolution_pointwise(
        x, weight, bias, padding, stride, dilation, groups, "relu", [], ""
    )
    _mark_finite(result)
    return result
