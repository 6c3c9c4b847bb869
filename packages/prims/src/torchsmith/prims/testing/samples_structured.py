"""ATen samples for view, shape, creation, matmul, normalization, indexing, loss and pooling ops."""

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
)
from torchsmith.prims.testing.sample_helpers import t as _t

STRUCTURED = {
    "aten.view.default": lambda: (
        [Sample((_t((3, 4), d), [4, -1])) for d in (F32, I64)] + [Sample((_t(()), [1]))]
    ),
    "aten._unsafe_view.default": lambda: [Sample((_t((3, 4)), [12]))],
    "aten.reshape.default": lambda: [Sample((_t((4, 6), nc=True), [2, 12]))],
    "aten.permute.default": lambda: [Sample((_t((2, 3, 4)), [2, 0, -2]))],
    "aten.transpose.int": lambda: [Sample((_t((2, 3, 4)), 0, -1))],
    "aten.t.default": lambda: [Sample((_t((2, 3)),)), Sample((_t((3,)),))],
    "aten.unsqueeze.default": lambda: [Sample((_t((2, 3)), -1)), Sample((_t(()), 0))],
    "aten.squeeze.dim": lambda: [Sample((_t((2, 1, 3)), 1)), Sample((_t((2, 3)), 0))],
    "aten.squeeze.dims": lambda: [Sample((_t((1, 2, 1)), [0, 2]))],
    "aten.squeeze.default": lambda: [Sample((_t((1, 2, 1)),))],
    "aten.expand.default": lambda: [Sample((_t((3, 1)), [2, 3, 4])), Sample((_t((3, 1)), [-1, 5]))],
    "aten.slice.Tensor": lambda: [
        Sample((_t((6, 5)), 0, 1, 4)),
        Sample((_t((6, 5)), 1, -3, 9223372036854775807, 2)),
        Sample((_t((6, 5)), 0, -100, -2)),
        Sample((_t((6, 5)), 1, 4, 2)),
    ],
    "aten.select.int": lambda: [Sample((_t((6, 5)), 0, 2)), Sample((_t((6, 5)), 1, -1))],
    "aten.cat.default": lambda: [
        Sample(([_t((2, 3)), _t((1, 3), seed=1)], 0)),
        Sample(([_t((2, 3), F16), _t((2, 2), I64, 1)], -1), note="mixed dtypes"),
        Sample(([_t((2, 3)), _t((0,), seed=1)], 1), note="legacy empty"),
    ],
    "aten.stack.default": lambda: [Sample(([_t((2, 3)), _t((2, 3), seed=1)], 1))],
    "aten.split.Tensor": lambda: [Sample((_t((7, 3)), 3)), Sample((_t((7, 3)), 2, 1))],
    "aten.split_with_sizes.default": lambda: [Sample((_t((7, 3)), [2, 5]))],
    "aten.unbind.int": lambda: [Sample((_t((3, 2)), 1))],
    "aten.constant_pad_nd.default": lambda: [
        Sample((_t((3, 4)), [1, 2])),
        Sample((_t((3, 4), I64), [1, -1, -1, 2], 3)),
        Sample((_t((2, 3, 4)), [0, 0, 2, 0, 1, 1], 0.5)),
    ],
    "aten.flip.default": lambda: [Sample((_t((3, 4)), [0, -1]))],
    "aten.empty_strided.default": lambda: [Sample(([2, 3], [1, 2])), Sample(([4], [1]), {"dtype": I32})],
    "aten.full.default": lambda: [
        Sample(([2, 3], 1.5)),
        Sample(([2], 7)),
        Sample(([2], True)),
        Sample(([3], 2), {"dtype": F16}),
    ],
    "aten.zeros.default": lambda: [Sample(([2, 3],)), Sample(([2],), {"dtype": I32})],
    "aten.ones.default": lambda: [Sample(([2, 3],), {"dtype": BF16})],
    "aten.scalar_tensor.default": lambda: [Sample((2.5,)), Sample((3,), {"dtype": I64})],
    "aten.full_like.default": lambda: [Sample((_t((2, 3), F16), 2.5)), Sample((_t((2, 3), I64), 3))],
    "aten.zeros_like.default": lambda: [Sample((_t((2, 3), F16),))],
    "aten.ones_like.default": lambda: [Sample((_t((2, 3), I32),))],
    "aten.new_zeros.default": lambda: [Sample((_t((2, 3), F16), [4]))],
    "aten.arange.start_step": lambda: [
        Sample((0, 10, 3)),
        Sample((1.0, 2.0, 0.1)),
        Sample((5, -3, -2)),
        Sample((0, 1, 0.25), {"dtype": F16}),
    ],
    "aten.arange.default": lambda: [Sample((7,)), Sample((2.5,))],
    "aten.mm.default": lambda: [Sample((_t((3, 4), d), _t((4, 5), d, 1))) for d in (F32, BF16)],
    "aten.bmm.default": lambda: [Sample((_t((2, 3, 4)), _t((2, 4, 5), seed=1)))],
    "aten.addmm.default": lambda: [
        Sample((_t((5,)), _t((3, 4), seed=1), _t((4, 5), seed=2))),
        Sample((_t((3, 5)), _t((3, 4), seed=1), _t((4, 5), seed=2)), {"beta": 0.5, "alpha": 2}),
    ],
    "aten.linear.default": lambda: [
        Sample((_t((2, 3, 4)), _t((5, 4), seed=1), _t((5,), seed=2))),
        Sample((_t((3, 4)), _t((5, 4), seed=1))),
    ],
    "aten.convolution.default": lambda: [
        Sample(
            (
                _t((2, 4, 7, 6)),
                _t((6, 2, 3, 2), seed=1),
                _t((6,), seed=2),
                [2, 1],
                [1, 0],
                [1, 1],
                False,
                [0, 0],
                2,
            )
        )
    ],
    "aten.convolution_backward.default": lambda: [
        Sample(
            (
                _t(go, d, 1),
                _t(xs, d, 2),
                _t(ws, d, 3),
                [ws[0] if not tr else ws[1] * g],
                st,
                p,
                dl,
                tr,
                op,
                g,
                [True, True, True],
            )
        )
        for d in (F32, F64)
        for xs, ws, go, st, p, dl, tr, op, g in (
            ((2, 4, 7, 6), (6, 2, 3, 2), (2, 6, 4, 5), [2, 1], [1, 0], [1, 1], False, [0, 0], 2),
            ((1, 3, 9), (5, 3, 3), (1, 5, 4), [2], [1], [2], False, [0], 1),
            ((2, 4, 5, 4), (4, 3, 3, 2), (2, 6, 10, 5), [2, 1], [1, 0], [1, 1], True, [1, 0], 2),
        )
    ],
    "aten.native_layer_norm.default": lambda: (
        [Sample((_t((2, 3, 8), d), [8], _t((8,), d, 1), _t((8,), d, 2), 1e-5)) for d in FLOAT_DTYPES]
        + [Sample((_t((4, 6)), [4, 6], None, None, 1e-5))]
    ),
    "aten.native_layer_norm_backward.default": lambda: [
        Sample(
            (
                _t((2, 3, 8), d, 1),
                x,
                [8],
                *[r.to(d) for r in torch.ops.aten.native_layer_norm(x.double(), [8], None, None, 1e-5)[1:]],
                _t((8,), d, 2),
                _t((8,), d, 3),
                [True, True, True],
            )
        )
        for d in (F32, F64, BF16)
        for x in [_t((2, 3, 8), d, 4)]
    ],
    "aten._native_batch_norm_legit_functional.default": lambda: [
        Sample(
            (
                _t((2, 3, 4, 4), d),
                _t((3,), d, 1),
                _t((3,), d, 2),
                _t((3,), d, 3),
                _t((3,), d, 4, (0.5, 2)),
                training,
                0.1,
                1e-5,
            )
        )
        for d in (F32, BF16)
        for training in (True, False)
    ],
    "aten._native_batch_norm_legit_no_training.default": lambda: [
        Sample((_t((2, 3, 4, 4), d), w, _t((3,), d, 2), _t((3,), d, 3), _t((3,), d, 4, (0.5, 2)), 0.1, 1e-5))
        for d in (F32, F64)
        for w in (None, _t((3,), d, 1))
    ],
    "aten.native_batch_norm.default": lambda: [
        Sample(
            (
                _t((2, 3, 4, 4)),
                _t((3,), seed=1),
                None,
                _t((3,), seed=3),
                _t((3,), seed=4, domain=(0.5, 2)),
                False,
                0.1,
                1e-5,
            )
        )
    ],
    "aten._native_batch_norm_legit.default": lambda: [
        Sample(
            (
                _t((2, 3, 4, 4), F64),
                None,
                _t((3,), F64, 2),
                _t((3,), F64, 3),
                _t((3,), F64, 4, (0.5, 2)),
                False,
                0.1,
                1e-5,
            )
        )
    ],
    "aten.slice_scatter.default": lambda: [
        Sample((_t((6, 5)), _t((2, 5), seed=1), 0, 1, 5, 2)),
        Sample((_t((6, 5), F16), _t((6, 2), F32, 1), 1, -2)),
    ],
    "aten.select_scatter.default": lambda: [Sample((_t((6, 5)), _t((6,), seed=1), 1, -1))],
    "aten.diagonal_scatter.default": lambda: [
        Sample((_t((4, 5)), _t((4,), seed=1))),
        Sample((_t((2, 4, 5)), _t((2, 2), seed=1), 2, 2, 1)),
    ],
    "aten.copy.default": lambda: [
        Sample((_t((3, 4)), _t((4,), F16, 1))),
        Sample((_t((3, 4), I32), _t((3, 4), seed=1))),
    ],
    "aten.lift_fresh.default": lambda: [Sample((_t((3, 4)),))],
    "aten.native_batch_norm_backward.default": lambda: [
        Sample(
            (
                _t((2, 3, 4, 4), seed=1),
                x,
                _t((3,), seed=2),
                _t((3,), seed=3),
                _t((3,), seed=4, domain=(0.5, 2)),
                x.mean((0, 2, 3)),
                1 / (x.var((0, 2, 3), unbiased=False) + 1e-5).sqrt(),
                train,
                1e-5,
                [True, True, True],
            )
        )
        for train in (True, False)
        for x in [_t((2, 3, 4, 4), seed=5)]
    ],
    "aten.native_group_norm.default": lambda: [
        Sample((_t((2, 6, 3, 3), d), _t((6,), d, 1), _t((6,), d, 2), 2, 6, 9, 3, 1e-5)) for d in (F32, BF16)
    ],
    "aten.max_pool2d_with_indices.default": lambda: (
        [Sample((_t((2, 3, 7, 6), d), [3, 2], [2, 2], [1, 0])) for d in (F32, BF16)]
        + [Sample((_t((3, 6, 6)), [2, 2])), Sample((_t((1, 2, 7, 7)), [3, 3], [1, 1], [1, 1], [2, 2]))]
    ),
    "aten.max_pool2d_with_indices_backward.default": lambda: [
        Sample(
            (
                _t((2, 3, 4, 3), seed=1),
                x,
                [3, 2],
                [2, 2],
                [1, 0],
                [1, 1],
                False,
                torch.ops.aten.max_pool2d_with_indices(x, [3, 2], [2, 2], [1, 0])[1],
            )
        )
        for x in [_t((2, 3, 7, 6))]
    ],
    "aten.avg_pool2d.default": lambda: (
        [Sample((_t((2, 3, 7, 6), d), [3, 2], [2, 2], [1, 0])) for d in (F32, BF16)]
        + [
            Sample((_t((2, 3, 7, 6)), [3, 3], [2, 1], [1, 1], False, False)),
            Sample((_t((2, 3, 6, 6)), [2, 2], [], 0, False, True, 3)),
        ]
    ),
    "aten._adaptive_avg_pool2d.default": lambda: (
        [Sample((_t((2, 3, 6, 4), d), [1, 1])) for d in (F32, BF16)] + [Sample((_t((2, 3, 6, 4)), [3, 2]))]
    ),
    "aten._adaptive_avg_pool2d_backward.default": lambda: [
        Sample((_t((2, 3, 1, 1), seed=1), _t((2, 3, 6, 4)))),
        Sample((_t((2, 3, 3, 2), seed=1), _t((2, 3, 6, 4)))),
    ],
    "aten.upsample_nearest2d.vec": lambda: [
        Sample((_t((1, 2, 3, 4)), [6, 8], None)),
        Sample((_t((1, 2, 3, 4)), [5, 7], None)),
        Sample((_t((1, 2, 3, 4)), None, [1.5, 2.0])),
    ],
    "aten.hardswish_backward.default": lambda: [
        Sample((_t((3, 5), d, 1), _t((3, 5), d, 2, (-5, 5)))) for d in (F32, BF16)
    ],
    "aten.leaky_relu_backward.default": lambda: [
        Sample((_t((3, 5), seed=1), _t((3, 5), seed=2), 0.01, False))
    ],
    "aten.native_dropout_backward.default": lambda: [
        Sample((_t((3, 5), d, 1), _t((3, 5), B8, 2), 2.0)) for d in (F32, BF16)
    ],
    "aten._safe_softmax.default": lambda: [
        Sample((torch.tensor([[0.5, -float("inf")], [-float("inf")] * 2]), -1)),
        Sample((_t((3, 4), BF16), 1)),
    ],
    "aten.repeat.default": lambda: [Sample((_t((2, 3)), [2, 1, 3])), Sample((_t((2,), I64), [3]))],
    "aten.slice_backward.default": lambda: [
        Sample((_t((2, 3)), [5, 3], 0, 1, 3, 1)),
        Sample((_t((4, 2)), [4, 5], 1, 0, 9223372036854775807, 3)),
    ],
    "aten.select_backward.default": lambda: [
        Sample((_t((3,)), [4, 3], 0, -1)),
        Sample((_t((4,)), [4, 3], 1, 1)),
    ],
    "aten.tril.default": lambda: [Sample((_t((4, 5)),)), Sample((_t((2, 3, 3), I64), -1))],
    "aten.triu.default": lambda: [Sample((_t((4, 5)), 1))],
    "aten.native_group_norm_backward.default": lambda: [
        Sample(
            (
                _t((2, 6, 3, 3), seed=1),
                x,
                *[r for r in torch.ops.aten.native_group_norm(x, None, None, 2, 6, 9, 3, 1e-5)[1:]],
                _t((6,), seed=2),
                2,
                6,
                9,
                3,
                [True, True, True],
            )
        )
        for x in [_t((2, 6, 3, 3), seed=3)]
    ],
    "aten.avg_pool2d_backward.default": lambda: [
        Sample((_t((2, 3, 4, 3), seed=1), _t((2, 3, 7, 6)), [3, 2], [2, 2], [1, 0], False, True, None)),
        Sample((_t((2, 3, 4, 6), seed=1), _t((2, 3, 7, 6)), [3, 3], [2, 1], [1, 1], False, False, None)),
    ],
    "aten.upsample_bilinear2d.vec": lambda: (
        [Sample((_t((1, 2, 3, 4), d), [5, 7], a, None)) for d in (F32, BF16) for a in (False, True)]
        + [Sample((_t((1, 2, 3, 4)), None, False, [2.0, 1.5]))]
    ),
    "aten.layer_norm.default": lambda: [Sample((_t((2, 8)), [8], _t((8,), seed=1), _t((8,), seed=2)))],
    "aten.embedding.default": lambda: [
        Sample((_t((10, 4)), torch.tensor([[1, 3], [9, 0]]))),
        Sample((_t((10, 4), BF16), torch.tensor([2, 2], dtype=I32))),
    ],
    "aten.embedding_dense_backward.default": lambda: [
        Sample((_t((2, 3, 4), d), torch.tensor([[1, 3, 1], [0, 9, 3]]), 10, p, False))
        for d in (F32, BF16)
        for p in (-1, 3)
    ],
    "aten.gather.default": lambda: [Sample((_t((4, 5)), 1, torch.tensor([[0, 4], [1, 1], [2, 0], [3, 3]])))],
    "aten.scatter.src": lambda: [
        Sample((_t((4, 5)), 0, torch.tensor([[0, 1, 2, 3, 0]]), _t((1, 5), seed=1)))
    ],
    "aten.scatter.value": lambda: [Sample((_t((4, 5)), 1, torch.tensor([[0], [4], [2], [1]]), 2.5))],
    "aten.scatter_add.default": lambda: [
        Sample((_t((4, 5)), 0, torch.tensor([[0, 1, 0, 3, 0], [0, 1, 0, 3, 0]]), _t((2, 5), seed=1)))
    ],
    "aten.index.Tensor": lambda: [
        Sample((_t((4, 5)), [torch.tensor([0, -1, 2])])),
        Sample((_t((4, 5)), [None, torch.tensor([[1], [3]], dtype=I32)])),
        Sample((_t((4, 5)), [torch.tensor([[0], [3]]), torch.tensor([1, 2, 4])])),
    ],
    "aten.index_put.default": lambda: [
        Sample((_t((4, 5)), [torch.tensor([0, 2])], _t((5,), seed=1))),
        Sample((_t((4, 5)), [torch.tensor([0, 0, 3])], _t((3, 5), seed=1), True)),
    ],
    "aten.nll_loss_forward.default": lambda: (
        [
            Sample((torch.log_softmax(_t((4, 5)), 1), torch.tensor([0, 4, -100, 2]), w, r, -100))
            for w in (None, _t((5,), seed=1, domain=(0.5, 2)))
            for r in (0, 1, 2)
        ]
        + [Sample((torch.log_softmax(_t((5,)), 0), torch.tensor(3), None, 1, -100))]
    ),
    "aten.nll_loss_backward.default": lambda: [
        Sample(
            (
                _t(() if r else (4,), seed=2),
                torch.log_softmax(_t((4, 5)), 1),
                torch.tensor([0, 4, -100, 2]),
                w,
                r,
                -100,
                torch.tensor(3.0),
            )
        )
        for w in (None, _t((5,), seed=1, domain=(0.5, 2)))
        for r in (0, 1, 2)
    ],
    "aten.threshold_backward.default": lambda: [
        Sample((_t((3, 5), d, 1), _t((3, 5), d, 2), 0)) for d in (F32, BF16)
    ],
    "aten.gelu_backward.default": lambda: [
        Sample((_t((3, 5), d, 1), _t((3, 5), d, 2)), {"approximate": a})
        for d in (F32, F16)
        for a in ("none", "tanh")
    ],
    "aten.gelu.default": lambda: [
        Sample((_t((3, 5), d, 1),), {"approximate": a}) for d in FLOAT_DTYPES for a in ("none", "tanh")
    ],
    "aten.silu_backward.default": lambda: [Sample((_t((3, 5), d, 1), _t((3, 5), d, 2))) for d in (F32, BF16)],
    "aten.sigmoid_backward.default": lambda: [
        Sample((_t((3, 5), d, 1), torch.sigmoid(_t((3, 5), d, 2)))) for d in (F32, BF16)
    ],
    "aten.tanh_backward.default": lambda: [
        Sample((_t((3, 5), d, 1), torch.tanh(_t((3, 5), d, 2)))) for d in (F32, BF16)
    ],
    "aten.hardtanh.default": lambda: [Sample((_t((3, 5)),)), Sample((_t((3, 5), BF16), 0.0, 6.0))],
    "aten.hardtanh_backward.default": lambda: [Sample((_t((3, 5), seed=1), _t((3, 5), seed=2), -1.0, 1.0))],
    "aten.leaky_relu.default": lambda: (
        [Sample((_t((3, 5), d),)) for d in (F32, BF16)] + [Sample((_t((3, 5)), 0.2))]
    ),
    "aten.elu.default": lambda: [Sample((_t((3, 5), d),)) for d in (F32, BF16)],
    "aten.softplus.default": lambda: (
        [Sample((_t((3, 5), d, domain=(-30, 30)),)) for d in (F32, BF16)] + [Sample((_t((3, 5)), 2, 5))]
    ),
    "aten.scaled_dot_product_attention.default": lambda: [
        Sample((_t((2, 3, 5, 8)), _t((2, 3, 6, 8), seed=1), _t((2, 3, 6, 4), seed=2))),
        Sample(
            (
                _t((2, 3, 5, 8)),
                _t((2, 3, 6, 8), seed=1),
                _t((2, 3, 6, 4), seed=2),
                _t((5, 6), B8, 3) | torch.eye(5, 6).bool(),
            )
        ),
    ],
    "aten.isnan.default": lambda: [
        Sample((torch.tensor([1.0, float("nan"), float("inf")]),)),
        Sample((_t((3,), I64),)),
    ],
    "aten.logical_not.default": lambda: [Sample((_t((3, 4), d),)) for d in (B8, F32, I64)],
    "aten.bitwise_not.default": lambda: [Sample((_t((3, 4), d),)) for d in (B8, I32)],
    "aten.detach.default": lambda: [Sample((_t((3, 4)),))],
    "aten.clone.default": lambda: [Sample((_t((4, 6), nc=True),))],
}
