"""Output sizes and dtypes that torch's meta kernels get wrong for the real device.

Batch norm in inference (`native_batch_norm`, `_native_batch_norm_legit` and its functional form
with `training=False`, `_native_batch_norm_legit_no_training`) returns an empty saved mean and
inverse std from the CPU kernel, while the meta kernel says `(C,)`; and on bfloat16 or float16
inputs with parameters and running statistics of the same dtype, the CPU kernel returns its saved
statistics (and new running statistics) in that dtype, in training too, while the meta kernel
says float32. A compiled graph allocating what meta says would return values eager never returns,
so the trace asks the real kernel: it runs the op once on the real device on zero stand-ins (batch
and spatial dims of 1) and gives the statistics outputs the sizes and dtypes it reports.
"""

import torch

# Batch norms: their statistics outputs (all outputs after the first) take sizes and dtypes from the
# real kernel, probed on a stand-in of one element per channel.
BATCH_NORMS = frozenset({
    "aten.native_batch_norm.default",
    "aten._native_batch_norm_legit_no_training.default",
    "aten._native_batch_norm_legit.default",
    "aten._native_batch_norm_legit_functional.default",
    "aten._batch_norm_with_update.default",
    "aten._batch_norm_with_update_functional.default",
})
# Layer norm: its mean and rstd take their dtype from the real kernel (bfloat16 on CPU for a bfloat16
# input, float32 on CUDA), probed on a stand-in of one row; their sizes are meta's.
LAYER_NORMS = frozenset({"aten.native_layer_norm.default"})


def with_device_shapes(op: str, args, result, device: str):
    """`result` (a tuple of meta tensors) with its statistics outputs sized and typed as `op` makes
    them on `device`; `result` itself for every other op."""
    if op not in BATCH_NORMS and op not in LAYER_NORMS or not isinstance(result, tuple):
        return result
    if any(isinstance(a, torch.Tensor) and a.device.type != "meta" for a in args):
        return result
    try:
        probe = _probe(op, args, device)
    except Exception:  # noqa: BLE001 - the kernel refuses (the real call will say why) or the device is absent
        return result
    stats = []
    for r, p in zip(result[1:], probe[1:]):
        shape = r.shape if op in LAYER_NORMS or not isinstance(p, torch.Tensor) else p.shape
        dtype = p.dtype if isinstance(p, torch.Tensor) else r.dtype
        same = (shape, dtype) == (r.shape, r.dtype)
        stats.append(r if same else torch.empty(shape, dtype=dtype, device="meta"))
    return (result[0], *stats)


def _probe(op: str, args, device: str):
    first = args[0]
    if op in LAYER_NORMS:
        normalized = len(args[1])
        sizes = [1] * (first.dim() - normalized) + list(first.shape[first.dim() - normalized:])
    else:
        sizes = [1, first.shape[1]] + [1] * (first.dim() - 2)
    real = [torch.zeros(sizes, dtype=first.dtype, device=device)]
    for a in args[1:]:
        real.append(torch.zeros(a.shape, dtype=a.dtype, device=device) if isinstance(a, torch.Tensor) else a)
    packet = getattr(torch.ops.aten, op.split(".")[1])
    with torch.no_grad():
        return getattr(packet, op.split(".")[2])(*real)
