"""Output sizes that torch's meta kernels get wrong for the real device.

Batch norm in inference (`native_batch_norm` with `training=False`,
`_native_batch_norm_legit_no_training`) returns an empty saved mean and inverse std from the CPU
kernel, while the meta kernel says `(C,)`. A compiled graph allocating `(C,)` would return values
eager never returns, so the trace asks the real kernel: it runs the op once on the real device on
zero stand-ins (batch and spatial dims of 1) and gives the saved statistics the sizes it reports.
"""

import torch

# Ops whose outputs after the first take their sizes from the real kernel, with the test on the
# arguments that says the probe applies.
PROBED = {
    "aten.native_batch_norm.default": lambda args: len(args) > 5 and args[5] is False,
    "aten._native_batch_norm_legit_no_training.default": lambda args: True,
}


def with_device_shapes(op: str, args, result, device: str):
    """`result` (a tuple of meta tensors) with its statistics outputs sized as `op` sizes them on
    `device`; `result` itself for every other op."""
    applies = PROBED.get(op)
    if applies is None or not isinstance(result, tuple) or not applies(args):
        return result
    if any(isinstance(a, torch.Tensor) and a.device.type != "meta" for a in args):
        return result
    try:
        probe = _probe(op, args, device)
    except (RuntimeError, ValueError, IndexError):  # the real kernel refuses: the real call will say why
        return result
    stats = tuple(
        r if not isinstance(p, torch.Tensor) or p.shape == r.shape
        else torch.empty(p.shape, dtype=r.dtype, device="meta")
        for r, p in zip(result[1:], probe[1:])
    )
    return (result[0], *stats)


def _probe(op: str, args, device: str):
    first = args[0]
    sizes = [1, first.shape[1]] + [1] * (first.dim() - 2)
    real = [torch.zeros(sizes, dtype=first.dtype, device=device)]
    for a in args[1:]:
        real.append(torch.zeros(a.shape, dtype=a.dtype, device=device) if isinstance(a, torch.Tensor) else a)
    packet = getattr(torch.ops.aten, op.split(".")[1])
    with torch.no_grad():
        return getattr(packet, op.split(".")[2])(*real)
