"""Attention as the real device runs it, not as the meta device does.

The tracer runs programs on meta tensors, and `F.scaled_dot_product_attention` picks its kernel by
device: on meta it always takes the math path, and for half-precision inputs off CUDA that path
computes in float32 (both batched products and the softmax). Traced that way, a bfloat16 model
would run its attention as float32 GEMMs, where eager computes in bfloat16 with a fused kernel.

Where no gradient flows through the call (inference, or frozen inputs) and there is no dropout, the
tracer records the call whole, as one `aten.scaled_dot_product_attention.default` node: prims
keeps it as its attention prim, and the inductor calls torch's kernel (flash or memory-efficient,
as eager picks). For a CUDA program that records gradients the tracer asks torch which kernel
eager's attention takes for these inputs on the real device (no mask, no dropout) and calls:

- `aten._scaled_dot_product_flash_attention` or `aten._scaled_dot_product_cudnn_attention` where
  eager takes flash or cuDNN (half precision); autograd then records the kernel's fused backward,
  and prims keeps both whole (library calls). Their sequence-length results are sizes the graph
  holds as constants.
- with `TORCHSMITH_FUSED_ATTENTION=1`, `aten._scaled_dot_product_efficient_attention` where eager
  takes the memory-efficient kernel (float32).
- otherwise, for half-precision inputs, the math path as torch computes it on CUDA: both products
  and the softmax's output in the input's dtype (the softmax itself computes in float32), scale
  split over the two factors, a boolean or causal mask as -inf scores, `_safe_softmax` (a row
  with every score masked gives zeros). Dropout and grouped heads keep torch's own path.
"""

import contextlib
import logging
import math
import os

import torch
from torch.overrides import TorchFunctionMode

log = logging.getLogger("torchsmith.autograd_aot.fused_attention")
_ATTENTION = torch.nn.functional.scaled_dot_product_attention
_PARAMETERS = ("query", "key", "value", "attn_mask", "dropout_p", "is_causal", "scale", "enable_gqa")
_DEFAULTS = {"attn_mask": None, "dropout_p": 0.0, "is_causal": False, "scale": None, "enable_gqa": False}
_WHOLE = torch.ops.aten.scaled_dot_product_attention.default


class FusedAttention(TorchFunctionMode):
    """While the tracer runs: every call of `F.scaled_dot_product_attention`, also one made inside
    another torch function (capture keeps `F.multi_head_attention_forward` whole), is recorded whole
    where no gradient flows through it; in a CUDA program that records gradients it takes a fused
    kernel where eager takes one (flash, cuDNN; memory-efficient where turned on), else CUDA's math path for
    half-precision inputs (see the module docstring). `recorder` is the tracer's `_Recorder`."""

    def __init__(self, recorder, training: bool):
        super().__init__()
        self.recorder = recorder
        self.device = recorder.device
        self.training = training

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is _ATTENTION:
            result = self.attention(args, kwargs)
            if result is not None:
                return result
        if func is torch.nn.functional.multi_head_attention_forward:
            # Torch functions run with this mode off, so the attention call inside this one would not
            # reach it: for the call, the module's global it calls is the fused stand-in.
            with _attention_in_functional(self):
                return func(*args, **kwargs)
        return func(*args, **kwargs)

    def attention(self, args, kwargs: dict):
        """The traced attention call, or None where torch's own path (on meta) stays."""
        call = _normalized(args, kwargs)
        grad = torch.is_grad_enabled() and any(call[n].requires_grad for n in ("query", "key", "value"))
        if not grad and call["dropout_p"] == 0.0:
            return _record_whole(self.recorder, call)
        if grad and self.training and self.device.startswith("cuda"):
            return _cuda_attention(call, self.device)
        return None


def _normalized(args, kwargs: dict) -> dict:
    call = dict(_DEFAULTS)
    call.update(zip(_PARAMETERS, args))
    call.update(kwargs)
    return call


def _record_whole(recorder, call: dict):
    """One `aten.scaled_dot_product_attention.default` node for the call (the dispatcher would
    split this composite op into the math path's parts before the tracer saw it)."""
    positional = tuple(call[n] for n in _PARAMETERS[:6])
    keywords = {n: call[n] for n in ("scale", "enable_gqa") if call[n] != _DEFAULTS[n]}
    return recorder.record_whole(_WHOLE, positional, keywords)


@contextlib.contextmanager
def _attention_in_functional(mode: FusedAttention):
    functional = torch.nn.functional

    def attention(*args, **kwargs):
        query = args[0] if args else kwargs["query"]
        result = None
        if query.device.type == "meta":  # only the tracer's own calls
            result = mode.attention(args, kwargs)
        return result if result is not None else _ATTENTION(*args, **kwargs)

    functional.scaled_dot_product_attention = attention
    try:
        yield
    finally:
        functional.scaled_dot_product_attention = _ATTENTION


def enabled() -> bool:
    """The memory-efficient kernel is off unless `TORCHSMITH_FUSED_ATTENTION=1`: its backward makes a
    transformer layer's training step no faster than the unfused path."""
    return os.environ.get("TORCHSMITH_FUSED_ATTENTION") == "1"


def fused_attention(recorder, training: bool) -> FusedAttention:
    """The context the tracer (`recorder`, its `_Recorder`) runs a program in."""
    return FusedAttention(recorder, training)


def _cuda_attention(call: dict, device: str):
    """The attention as CUDA would compute it, or None where torch's own path stays."""
    q, k, v = call["query"], call["key"], call["value"]
    kernel = _eager_kernel(call, device)
    if kernel == "flash":
        outputs = torch.ops.aten._scaled_dot_product_flash_attention.default(
            q, k, v, 0.0, call["is_causal"], False, scale=call["scale"]
        )
        return outputs[0]
    if kernel == "cudnn":
        outputs = torch.ops.aten._scaled_dot_product_cudnn_attention.default(
            q, k, v, None, True, 0.0, call["is_causal"], False, scale=call["scale"]
        )
        return outputs[0]
    if kernel == "efficient" and enabled():
        outputs = torch.ops.aten._scaled_dot_product_efficient_attention.default(
            q, k, v, None, True, 0.0, call["is_causal"], scale=call["scale"]
        )
        return outputs[0]
    if q.dtype in (torch.float16, torch.bfloat16) and call["dropout_p"] == 0.0 and not call["enable_gqa"]:
        return _math_attention(q, k, v, call["attn_mask"], call["is_causal"], call["scale"])
    return None


def _math_attention(q, k, v, mask, is_causal: bool, scale):
    """softmax(q k^T * scale + mask) v in the inputs' dtype, as torch's math path on CUDA."""
    if scale is None:
        scale = 1.0 / math.sqrt(q.size(-1))
    factor = math.sqrt(scale)  # split over both factors, as torch does (smaller half products)
    scores = torch.matmul(q * factor, k.transpose(-2, -1) * factor)
    if is_causal:
        mask = torch.ones(q.size(-2), k.size(-2), dtype=torch.bool, device=q.device).tril()
    if mask is not None and mask.dtype == torch.bool:
        scores = scores.masked_fill(~mask, -math.inf)  # adding 0 or -inf to a finite score
    elif mask is not None:
        scores = scores + mask
    return torch.matmul(torch.ops.aten._safe_softmax.default(scores, -1), v)


def _eager_kernel(call: dict, device: str) -> str:
    """The kernel eager's attention takes for these inputs on the real device: "flash", "cudnn",
    "efficient" or "math". Masks, dropout and grouped heads keep the math path here (each changes
    the fused kernels' contracts)."""
    q, k, v = call["query"], call["key"], call["value"]
    if call["attn_mask"] is not None or call["dropout_p"] != 0.0 or call["enable_gqa"]:
        return "math"
    if any(t.dim() != 4 or t.stride(-1) != 1 for t in (q, k, v)):
        return "math"
    # Ask torch about tensors of the same sizes on the real device (allocated, never written),
    # made outside the tracer's dispatch mode: inside it a factory call gives a meta tensor (and a
    # graph node), which no fused kernel takes. Whether gradients flow changes some kernels' rules.
    try:
        from torch.nn.attention import SDPBackend
        from torch.utils._python_dispatch import _disable_current_modes

        with _disable_current_modes():
            real = [torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device=device) for t in (q, k, v)]
            real = [r.requires_grad_(t.requires_grad) for r, t in zip(real, (q, k, v))]
            choice = torch._fused_sdp_choice(*real, None, 0.0, call["is_causal"], scale=call["scale"])
    except Exception as error:  # noqa: BLE001 - a torch without this query: keep the math path
        log.info("attention keeps the math path: cannot ask torch which kernel runs (%s)", error)
        return "math"
    kernels = {SDPBackend.FLASH_ATTENTION: "flash", SDPBackend.CUDNN_ATTENTION: "cudnn",
               SDPBackend.EFFICIENT_ATTENTION: "efficient"}
    return next((name for backend, name in kernels.items() if choice == backend.value), "math")
