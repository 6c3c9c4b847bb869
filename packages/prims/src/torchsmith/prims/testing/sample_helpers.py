"""Helpers for ATen sample inputs: seeded tensors and the generic unary/binary/reduction sample sets."""

import torch

from torchsmith.prims.testing.make import Sample, make_tensor
from torchsmith.prims.testing.prim_samples import DOMAINS

F32, F64, BF16, F16, I64, I32, B8 = (
    torch.float32,
    torch.float64,
    torch.bfloat16,
    torch.float16,
    torch.int64,
    torch.int32,
    torch.bool,
)


def t(shape, dtype=F32, seed=0, domain=None, nc=False):
    low, high = domain or ((-9, 9) if not dtype.is_floating_point else (-3, 3))
    return make_tensor(shape, dtype, seed=seed, low=low, high=high, noncontiguous=nc)


def unary(name: str, dtypes=(F32, F64, BF16, F16, I64, I32)) -> list[Sample]:
    domain = DOMAINS.get(name)
    samples = []
    for i, dtype in enumerate(dtypes):
        shapes = (
            [((), False), ((0,), False), ((3, 5), False), ((4, 6), True)]
            if dtype == F32
            else [((3, 5), False)]
        )
        samples += [Sample((t(s, dtype, i, domain, nc),)) for s, nc in shapes]
    return samples


def binary(
    name: str, *, scalars=(2, 1.5), dtypes=(F32, F64, BF16, F16, I64, I32), domain=None, nonzero=False
) -> list[Sample]:
    """Same-dtype pairs, broadcasting, 0-d tensors, mixed dtypes and (for .Scalar) Python scalars."""

    def fix(b):
        return torch.where(b == 0, torch.ones((), dtype=b.dtype), b) if nonzero else b

    samples = []
    for i, dtype in enumerate(dtypes):
        samples.append(Sample((t((3, 5), dtype, i, domain), fix(t((3, 5), dtype, i + 7, domain)))))
    samples += [
        Sample((t((3, 1), F32, 1, domain), fix(t((1, 5), F32, 2, domain))), note="broadcast"),
        Sample((t((4, 6), F32, 3, domain, nc=True), fix(t((6,), F32, 4, domain))), note="noncontiguous"),
        Sample((t((3, 5), F16, 5, domain), fix(t((), F32, 6, domain))), note="0-d float32 with float16"),
        Sample((t((3, 5), I64, 7, domain), fix(t((3, 5), F32, 8, domain))), note="int64 with float32"),
        Sample((t((3, 5), I32, 9, domain), fix(t((), F64, 10, domain))), note="int32 with 0-d float64"),
        Sample((t((0, 5), BF16, 11, domain), fix(t((5,), BF16, 12, domain))), note="empty"),
    ]
    return samples


def scalar_binary(name: str, scalars=(2, 1.5), dtypes=(F32, BF16, I64), domain=None) -> list[Sample]:
    return [Sample((t((3, 5), dtype, i, domain), s)) for i, dtype in enumerate(dtypes) for s in scalars]


def reduction(extra_kwargs=({},), dtypes=(F32, F64, BF16, F16, I64), floats_only=False):
    samples = []
    for i, dtype in enumerate(dtypes):
        if floats_only and not dtype.is_floating_point:
            continue
        for shape, dim, keepdim, nc in (
            ((3, 4, 5), [1], False, False),
            ((3, 4, 5), [0, -1], True, False),
            ((4, 6), [0], False, True),
            ((), [], False, False),
        ):
            if dtype != F32 and nc:
                continue
            for kw in extra_kwargs:
                x = t(shape, dtype, i, nc=nc)
                if "correction" in kw:  # keepdim is keyword-only in the correction overloads
                    samples.append(Sample((x, dim), dict(kw, keepdim=keepdim)))
                else:
                    samples.append(Sample((x, dim, keepdim), dict(kw)))
    return samples
