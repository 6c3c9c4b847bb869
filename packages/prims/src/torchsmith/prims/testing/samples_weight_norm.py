"""ATen samples for weight normalization (`aten._weight_norm_interface` and its backward): the kept
dim first or last (the two the CPU kernel takes), float32/float64/bfloat16."""

import torch

from torchsmith.prims.testing.make import Sample
from torchsmith.prims.testing.sample_helpers import BF16, F32, F64
from torchsmith.prims.testing.sample_helpers import t as _t


def _g(v: torch.Tensor, dim: int, seed: int) -> torch.Tensor:
    shape = [1] * v.dim()
    shape[dim] = v.shape[dim]
    return _t(tuple(shape), v.dtype, seed)


def _forward():
    samples = []
    for d in (F32, F64, BF16):
        for dim in (0, 2):
            v = _t((6, 4, 3), d, 1)
            samples.append(Sample((v, _g(v, dim, 2), dim)))
    v = _t((5, 7), F32, 3)
    samples.append(Sample((v, _g(v, 1, 4), 1), note="2-d v, last dim kept"))
    return samples


def _backward():
    samples = []
    for d in (F32, F64, BF16):
        for dim in (0, 2):
            v = _t((6, 4, 3), d, 1)
            g = _g(v, dim, 2)
            norms = torch._weight_norm_interface(v, g, dim)[1]
            samples.append(Sample((_t((6, 4, 3), d, 5), v, g, norms, dim)))
    return samples


WEIGHT_NORM = {
    "aten._weight_norm_interface.default": _forward,
    "aten._weight_norm_interface_backward.default": _backward,
}
