"""Results of ATen ops that some torch versions ship without a meta kernel.

The trace runs every op on meta tensors. torch 2.11 has no meta kernel for the encoder layer's fused
fast path (`_transformer_encoder_layer_fwd`, what `nn.TransformerEncoderLayer` calls in inference), so
the trace would stop there; its result is a new contiguous tensor shaped like its input, which is all
the trace needs (prims decomposes the op into the layer's parts).
"""

import torch


def _like_first(src: torch.Tensor, *args, **kwargs) -> torch.Tensor:
    return torch.empty(src.shape, dtype=src.dtype, device="meta")


RESULT_RULES = {"aten._transformer_encoder_layer_fwd.default": _like_first}


def run_on_meta(func, op: str, args, kwargs):
    """`func(*args, **kwargs)` on meta tensors; for an op without a meta kernel in this torch, the
    result its rule gives."""
    try:
        return func(*args, **kwargs)
    except NotImplementedError:
        rule = RESULT_RULES.get(op)
        if rule is None or not any(isinstance(a, torch.Tensor) and a.is_meta for a in args):
            raise
        return rule(*args, **kwargs)
