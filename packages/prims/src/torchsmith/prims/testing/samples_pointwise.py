"""ATen samples for pointwise, reduction and softmax ops."""

import torch

from torchsmith.prims.testing.make import FLOAT_DTYPES, Sample
from torchsmith.prims.testing.sample_helpers import (
    B8,
    BF16,
    F16,
    F32,
    F64,
    I32,
    I64,
    binary,
    reduction,
    scalar_binary,
)
from torchsmith.prims.testing.sample_helpers import t as _t

POINTWISE = {
    "aten.add.Tensor": lambda: binary("add") + [Sample((_t((3, 5)), _t((3, 5), seed=2)), {"alpha": 2})],
    "aten.add.Scalar": lambda: scalar_binary("add"),
    "aten.sub.Tensor": lambda: binary("sub") + [Sample((_t((3, 5)), _t((5,), seed=2)), {"alpha": 0.5})],
    "aten.sub.Scalar": lambda: scalar_binary("sub"),
    "aten.rsub.Scalar": lambda: scalar_binary("rsub"),
    "aten.mul.Tensor": lambda: binary("mul") + [Sample((_t((3, 5), B8), _t((3, 5), B8, 1)))],
    "aten.mul.Scalar": lambda: scalar_binary("mul"),
    "aten.div.Tensor": lambda: binary("div", nonzero=True),
    "aten.div.Scalar": lambda: scalar_binary("div"),
    "aten.div.Tensor_mode": lambda: [
        Sample(s.args, {"rounding_mode": m}) for s in binary("div", nonzero=True) for m in ("trunc", "floor")
    ],
    "aten.floor_divide.default": lambda: binary("floor_divide", nonzero=True),
    "aten.remainder.Tensor": lambda: binary("remainder", nonzero=True),
    "aten.remainder.Scalar": lambda: scalar_binary("remainder", scalars=(3, -1.5)),
    "aten.fmod.Tensor": lambda: binary("fmod", nonzero=True),
    "aten.pow.Tensor_Tensor": lambda: binary("pow", dtypes=(F32, F64, BF16, I64), domain=(0.5, 3)),
    "aten.pow.Tensor_Scalar": lambda: (
        scalar_binary("pow", scalars=(2, 3, 0.5, -1, 1.7), dtypes=(F32, F16, F64), domain=(0.1, 3))
        + [Sample((_t((4,), I64), 2))]
    ),
    "aten.maximum.default": lambda: binary("maximum"),
    "aten.minimum.default": lambda: binary("minimum"),
    "aten.atan2.default": lambda: binary("atan2"),
    "aten.where.self": lambda: [
        Sample((_t((3, 5), B8), _t((3, 5), F32, 1), _t((3, 5), F32, 2))),
        Sample((_t((3, 1), B8), _t((1, 5), F16, 1), _t((), F32, 2)), note="broadcast, 0-d other"),
        Sample((_t((5,), B8), _t((3, 5), I64, 1), _t((3, 5), F32, 2)), note="mixed dtypes"),
    ],
    "aten.clamp.default": lambda: (
        [
            Sample((_t((3, 5), d),), {"min": -1, "max": 1.5 if d.is_floating_point else 2})
            for d in (F32, BF16, I64)
        ]
        + [
            Sample((_t((3, 5)), None, 0.5)),
            Sample((_t((3, 5), I64), -2.5)),
        ]
    ),
    "aten.clamp_min.default": lambda: [Sample((_t((3, 5), d), 0.5)) for d in (F32, F16)],
    "aten.masked_fill.Scalar": lambda: [
        Sample((_t((3, 5), d), _t((5,), B8, 3), -1.5 if d.is_floating_point else 7))
        for d in (F32, BF16, I64, B8)
    ],
    "aten.masked_fill.Tensor": lambda: [Sample((_t((3, 5), F16), _t((3, 5), B8, 3), _t((), F32, 4)))],
    "aten.logical_and.default": lambda: [
        Sample((_t((3, 5), B8), _t((3, 5), B8, 1))),
        Sample((_t((3, 5), F32), _t((5,), I64, 1))),
    ],
    "aten._to_copy.default": lambda: [
        Sample((_t((3, 5), s),), {"dtype": d}) for s in (F32, F16, I64, B8) for d in (F32, BF16, I32, B8)
    ],
    "aten.sum.dim_IntList": lambda: (
        reduction() + [Sample((_t((3, 4), B8), [1])), Sample((_t((3, 4), F16), [1]), {"dtype": F32})]
    ),
    "aten.sum.default": lambda: [Sample((_t((3, 4), d),)) for d in (F32, F16, I32, B8)],
    "aten.mean.dim": lambda: reduction(floats_only=True) + [Sample((_t((0, 4)), [0]))],
    "aten.mean.default": lambda: [Sample((_t((3, 4), d),)) for d in (F32, BF16)],
    "aten.prod.dim_int": lambda: [Sample((_t((3, 4), d), 1)) for d in (F32, I64, B8)],
    "aten.amax.default": lambda: reduction(),
    "aten.amin.default": lambda: reduction(),
    "aten.max.dim": lambda: (
        [Sample((_t((3, 4), d), 1)) for d in (F32, I64)] + [Sample((_t((3, 4)), 0, True))]
    ),
    "aten.max.default": lambda: [Sample((_t((3, 4), d),)) for d in (F32, I64)],
    "aten.argmax.default": lambda: [
        Sample((_t((3, 4)), 1)),
        Sample((_t((3, 4)),)),
        Sample((_t((3, 4), I64), 0, True)),
    ],
    "aten.var.correction": lambda: reduction(({"correction": 0}, {"correction": 1}), floats_only=True),
    "aten.var_mean.correction": lambda: reduction(({"correction": 1},), floats_only=True),
    "aten.std.correction": lambda: reduction(({"correction": 1},), floats_only=True),
    "aten.any.dim": lambda: [Sample((_t((3, 4), d), 1)) for d in (B8, F32, I64)],
    "aten.all.default": lambda: [Sample((_t((3, 4), d),)) for d in (B8, F32)] + [Sample((_t((0, 3), B8),))],
    "aten.cumsum.default": lambda: [Sample((_t((3, 4), d), 1)) for d in (F32, F16, I32, B8)],
    "aten.logsumexp.default": lambda: [Sample((_t((3, 4), d), [1])) for d in (F32, BF16)],
    "aten._softmax.default": lambda: (
        [Sample((_t((3, 8), d), -1, False)) for d in FLOAT_DTYPES]
        + [Sample((_t((4, 6), nc=True), 0, False)), Sample((_t(()), 0, False))]
    ),
    "aten._log_softmax.default": lambda: (
        [Sample((_t((3, 8), d), -1, False)) for d in FLOAT_DTYPES] + [Sample((_t((4, 6), nc=True), 0, False))]
    ),
    "aten._softmax_backward_data.default": lambda: [
        Sample((_t((3, 8), d, 1), torch.softmax(_t((3, 8), F32, 2), -1).to(d), -1, d)) for d in FLOAT_DTYPES
    ],
    "aten._log_softmax_backward_data.default": lambda: [
        Sample((_t((3, 8), d, 1), torch.log_softmax(_t((3, 8), F32, 2), -1).to(d), -1, d))
        for d in FLOAT_DTYPES
    ],
}
POINTWISE.update(
    {
        "aten.all.dims": lambda: [Sample((_t((3, 4), d), [0, 1])) for d in (B8, F32)],
        "aten.any.dims": lambda: [Sample((_t((3, 4, 2), B8), [0, 2], True))],
        "aten.any.default": lambda: [Sample((_t((3, 4), d),)) for d in (B8, I64)] + [Sample((_t((0,), B8),))],
        "aten.arange.start": lambda: [Sample((2, 7)), Sample((-1.5, 2))],
        "aten.clamp.Tensor": lambda: [
            Sample((_t((3, 5)), _t((5,), seed=1, domain=(-3, 0)), _t((3, 1), seed=2, domain=(0, 3))))
        ],
        "aten.clamp_min.Tensor": lambda: [Sample((_t((3, 5), BF16), _t((), F32, 1)))],
        "aten.clamp_max.Tensor": lambda: [Sample((_t((3, 5), I64), _t((5,), I64, 1)))],
        "aten.div.Scalar_mode": lambda: [
            Sample((_t((3, 5), d), s), {"rounding_mode": m})
            for d in (F32, I64)
            for s in (3, -1.5)
            for m in ("trunc", "floor")
        ],
        "aten.empty.memory_format": lambda: [Sample(([2, 3],)), Sample(([2],), {"dtype": I64})],
        "aten.new_full.default": lambda: [Sample((_t((2, 3), F16), [4], 1.5))],
        "aten.pow.Scalar": lambda: [Sample((2.0, _t((3, 5)))), Sample((3, _t((3, 5), I64, domain=(0, 4))))],
        "aten.upsample_nearest2d.default": lambda: [Sample((_t((1, 2, 3, 4)), [6, 8]))],
        "aten.where.Scalar": lambda: [Sample((_t((3, 5), B8), 1.0, 0.0))],
        "aten.where.ScalarOther": lambda: [
            Sample((_t((3, 5), B8), _t((3, 5), F16, 1), 0.5)),
            Sample((_t((5,), B8), _t((3, 5), I64, 1), 2)),
        ],
        "aten.where.ScalarSelf": lambda: [Sample((_t((3, 5), B8), 0.5, _t((3, 5), BF16, 1)))],
    }
)
# Overloads whose samples are another op's (same signature).
