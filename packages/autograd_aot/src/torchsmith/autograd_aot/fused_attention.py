"""Attention in CUDA training graphs through the memory-efficient fused kernel, as eager runs it.

The tracer runs programs on meta tensors, and `F.scaled_dot_product_attention` picks its kernel by
device: on meta it always takes the math path, a softmax over the whole score matrix with float32
products for half-precision inputs. On the H200 a bfloat16 TransformerEncoderLayer training step
spent 1.3 ms in those products, where eager and torch.compile call one fused kernel forward and
one backward. For a CUDA program that records gradients, the tracer calls
`aten._scaled_dot_product_efficient_attention` instead wherever torch says that kernel runs these
inputs on the real device; autograd then records its fused backward, and prims keeps both whole
(library calls). The flash kernel would be faster still, but it returns Python ints (sequence
lengths), which a traced graph cannot hold.
"""

import contextlib
import logging
import os

import torch
from torch.overrides import TorchFunctionMode

log = logging.getLogger("torchsmith.autograd_aot.fused_attention")
_ATTENTION = torch.nn.functional.scaled_dot_product_attention
_PARAMETERS = ("query", "key", "value", "attn_mask", "dropout_p", "is_causal", "scale", "enable_gqa")
_DEFAULTS = {"attn_mask": None, "dropout_p": 0.0, "is_causal": False, "scale": None, "enable_gqa": False}


class FusedAttention(TorchFunctionMode):
    """While the tracer runs a CUDA program that records gradients: every call of
    `F.scaled_dot_product_attention`, also one made inside another torch function (capture keeps
    `F.multi_head_attention_forward` whole), takes the memory-efficient kernel where it runs."""

    def __init__(self, device: str):
        super().__init__()
        self.device = device

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is _ATTENTION and torch.is_grad_enabled():
            result = _efficient_attention(args, kwargs, self.device)
            if result is not None:
                return result
        if func is torch.nn.functional.multi_head_attention_forward:
            # Torch functions run with this mode off, so the attention call inside this one would not
            # reach it: for the call, the module's global it calls is the fused stand-in.
            with _attention_in_functional(self.device):
                return func(*args, **kwargs)
        return func(*args, **kwargs)


@contextlib.contextmanager
def _attention_in_functional(device: str):
    functional = torch.nn.functional

    def attention(*args, **kwargs):
        query = args[0] if args else kwargs["query"]
        result = None
        if query.device.type == "meta" and torch.is_grad_enabled():  # only the tracer's own calls
            result = _efficient_attention(args, kwargs, device)
        return result if result is not None else _ATTENTION(*args, **kwargs)

    functional.scaled_dot_product_attention = attention
    try:
        yield
    finally:
        functional.scaled_dot_product_attention = _ATTENTION


def enabled() -> bool:
    """Off unless `TORCHSMITH_FUSED_ATTENTION=1`: the graphs it makes are tested here (on meta
    tensors), but no GPU has run them yet; the next session on the H200 measures and turns it on."""
    return os.environ.get("TORCHSMITH_FUSED_ATTENTION") == "1"


def fused_attention(device: str, training: bool):
    """The context the tracer runs a program in: `FusedAttention` for CUDA training programs."""
    if training and device.startswith("cuda") and enabled():
        return FusedAttention(device)
    return contextlib.nullcontext()


def _efficient_attention(args, kwargs: dict, device: str):
    """The attention computed with the fused kernel, or None where torch's own choice stays."""
    call = dict(_DEFAULTS)
    call.update(zip(_PARAMETERS, args))
    call.update(kwargs)
    q, k, v = call["query"], call["key"], call["value"]
    if not any(t.requires_grad for t in (q, k, v)) or not _kernel_runs(call, device):
        return None
    outputs = torch.ops.aten._scaled_dot_product_efficient_attention.default(
        q, k, v, None, True, 0.0, call["is_causal"], scale=call["scale"]
    )
    return outputs[0]


def _kernel_runs(call: dict, device: str) -> bool:
    """Whether eager may pick a fused kernel here and the memory-efficient one runs these inputs.
    Masks, dropout and grouped heads keep the math path (each changes the kernel's contract)."""
    q, k, v = call["query"], call["key"], call["value"]
    if call["attn_mask"] is not None or call["dropout_p"] != 0.0 or call["enable_gqa"]:
        return False
    if not torch.backends.cuda.mem_efficient_sdp_enabled():
        return False  # the program (or the user) asked for other kernels
    if any(t.dim() != 4 or t.stride(-1) != 1 for t in (q, k, v)):
        return False
    # Ask torch about tensors of the same sizes on the real device (allocated, never written),
    # made outside the tracer's dispatch mode: inside it a factory call gives a meta tensor (and a
    # graph node), which no fused kernel takes.
    try:
        from torch.utils._python_dispatch import _disable_current_modes

        with _disable_current_modes():
            real = [torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device=device) for t in (q, k, v)]
            params = torch.backends.cuda.SDPAParams(*real, None, 0.0, call["is_causal"], False)
            return torch.backends.cuda.can_use_efficient_attention(params, False)
    except Exception as error:  # noqa: BLE001 - a torch without this query: keep the math path
        log.info("attention keeps the math path: cannot ask torch about the fused kernel (%s)", error)
        return False
