"""Dropout in CUDA programs as CUDA runs it, not as the meta device does.

`torch.dropout` picks its algorithm by device: on CUDA (training, 0 < p < 1, a non-empty input) it
calls the fused `native_dropout` kernel, elsewhere, meta included, it draws a `bernoulli_` mask and
multiplies. The two draw different numbers from the same generator state, so a CUDA program traced
on meta would drop other elements than eager does with the same seed, and a double backward that
re-runs the captured graph eagerly (double_backward.py) would differentiate other masks than the
compiled forward applied. While the tracer runs a CUDA program, out-of-place dropout therefore
records `native_dropout`, as eager runs it there; in-place dropout (`dropout_`) takes the mask path
on every device and is left alone.
"""

import contextlib

import torch
from torch.overrides import TorchFunctionMode

_DROPOUTS = (torch.nn.functional.dropout, torch.dropout)
_PARAMETERS = ("input", "p", "training", "inplace")


class CudaDropout(TorchFunctionMode):
    """While the tracer runs a CUDA program: out-of-place dropout is `native_dropout`."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in _DROPOUTS:
            result = _fused_dropout(func, args, kwargs)
            if result is not None:
                return result
        return func(*args, **kwargs)


def _fused_dropout(func, args, kwargs: dict):
    """`native_dropout`'s output where CUDA's `torch.dropout` calls that kernel, else None."""
    names = _PARAMETERS if func is torch.nn.functional.dropout else ("input", "p", "train")
    call = {"p": 0.5, "training": True, "inplace": False}
    call.update(zip(names, args))
    call.update(kwargs)
    x, p = call.get("input"), call["p"]
    training = call.get("train", call["training"])
    if not isinstance(x, torch.Tensor) or call["inplace"] or not training:
        return None
    if not 0 < p < 1 or x.numel() == 0:
        return None
    return torch.native_dropout(x, p, True)[0]


def device_dropout(device: str):
    """The context the tracer runs a program in: `CudaDropout` for CUDA programs."""
    return CudaDropout() if device.startswith("cuda") else contextlib.nullcontext()
