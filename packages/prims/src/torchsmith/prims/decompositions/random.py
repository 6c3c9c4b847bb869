"""Decompositions of random ops into the counter-based `prims.philox_rand`, used only under
`decompose(..., philox=True)`: each random node draws from (seed, base offset + its index), so a
graph's randomness is a pure function of two inputs and any node can be recomputed (in the
backward, or by another tiling) with the same values. Values differ from eager's generator by
design, as torch.compile's do."""

import torch

from torchsmith.prims.decompose import register_decomposition
from torchsmith.prims.promotion import opmath_dtype


def _uniform(e, shape, dtype, device):
    seed, offset = e.rng_state()
    return e.philox_rand([*shape], seed, offset, dtype=dtype, device=str(torch.device(device)))


@register_decomposition("aten.rand.default")
def rand(e, size, *, generator=None, dtype=None, layout=None, device=None, pin_memory=None):
    return _uniform(e, size, dtype or torch.get_default_dtype(), device or "cpu")


@register_decomposition("aten.bernoulli.p")
def bernoulli(e, a, p=0.5, *, generator=None):
    t = e.type(a)
    compute = opmath_dtype(t.dtype) if t.dtype.is_floating_point else torch.float32
    return e.convert_element_type(e.lt(_uniform(e, t.shape, compute, t.device), float(p)), t.dtype)


@register_decomposition("aten.native_dropout.default")
def native_dropout(e, a, p, train):
    t = e.type(a)
    if not train or p == 0:
        return e.clone(a), e.full(list(t.shape), True, dtype=torch.bool, device=t.device)
    compute = opmath_dtype(t.dtype)
    keep = e.lt(_uniform(e, t.shape, compute, t.device), 1.0 - float(p))
    scale = 0.0 if p == 1 else 1.0 / (1.0 - float(p))
    out = e.where(keep, e.mul(e.to(a, compute), scale), 0.0)
    return e.to(out, t.dtype), keep
