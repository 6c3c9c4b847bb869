"""Extern kernels: the library ops the generated wrapper runs with torch (kept prims and fallbacks),
keyed by the name an `ExternCall` carries in `kernel`, and `run_extern`, which runs one call."""

import torch

from torchsmith.inductor.loop_ir import ExternCall, TensorView
from torchsmith.ir.symbolic import evaluate

EXTERN_KERNELS = {"prims.mm": torch.mm, "prims.bmm": torch.bmm}


def tensor_of(tensors: dict[str, torch.Tensor], view: TensorView, bindings) -> torch.Tensor:
    """`view` as a strided tensor over the storage of the buffer it reads."""
    base = tensors[view.buffer]
    shape = [evaluate(d, bindings) for d in view.shape]
    strides = [evaluate(d, bindings) for d in view.strides]
    offset = evaluate(view.offset, bindings)
    if list(base.shape) == shape and list(base.stride()) == strides and offset == 0:
        return base
    return base.as_strided(shape, strides, base.storage_offset() + offset)


def run_extern(call: ExternCall, tensors: dict[str, torch.Tensor], bindings) -> torch.Tensor:
    """Run `call` with torch on the tensors of its argument views; returns the tensor it defines."""
    args = [tensor_of(tensors, v, bindings) for v in call.args]
    return EXTERN_KERNELS[call.kernel](*args)
