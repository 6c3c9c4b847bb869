"""Our type promotion and broadcasting against torch's."""

import itertools

import pytest
import torch

from torchsmith.ir.symbolic import symbol
from torchsmith.ir.types import TensorType
from torchsmith.prims.errors import PromotionError
from torchsmith.prims.promotion import (
    PromotionKind,
    broadcast_shapes,
    elementwise_dtypes,
    promote_types,
    result_type,
)

DTYPES = (
    torch.bool,
    torch.uint8,
    torch.int8,
    torch.int16,
    torch.int32,
    torch.int64,
    torch.float16,
    torch.bfloat16,
    torch.float32,
    torch.float64,
    torch.complex64,
    torch.complex128,
)
SCALARS = (True, 2, 1.5, 1j)


def _operands():
    for dtype in DTYPES:
        yield torch.zeros(2, dtype=dtype)
        yield torch.zeros((), dtype=dtype)
    yield from SCALARS


def _ir(x):
    return TensorType.of(x) if isinstance(x, torch.Tensor) else x


def test_promote_types_matches_torch_on_every_pair():
    for a, b in itertools.product(DTYPES, DTYPES):
        assert promote_types(a, b) == torch.promote_types(a, b), (a, b)


def test_result_type_matches_torch_on_every_pair():
    for a, b in itertools.product(_operands(), _operands()):
        if not isinstance(a, torch.Tensor) and not isinstance(b, torch.Tensor):
            continue
        assert result_type(_ir(a), _ir(b)) == torch.result_type(a, b), (a, b)


def test_result_type_on_three_tensors_matches_torch_addcmul():
    # addcmul promotes all three of its tensor operands together.
    tensors = [x for x in _operands() if isinstance(x, torch.Tensor)][::2] + [
        torch.zeros((), dtype=d) for d in (torch.int32, torch.float16, torch.float64, torch.bool)
    ]
    checked = 0
    for a, b, c in itertools.product(tensors, repeat=3):
        try:
            expected = torch.addcmul(a, b, c).dtype
        except RuntimeError:
            continue  # torch refuses some combinations (e.g. bool arithmetic)
        assert result_type(_ir(a), _ir(b), _ir(c)) == expected, (a, b, c)
        checked += 1
    assert checked > 500


def test_python_scalars_raise_the_category_only():
    i32 = TensorType.make((4,), torch.int32)
    assert result_type(i32, 1.5) == torch.float32
    assert (
        result_type(TensorType.make((4,), torch.int64), TensorType.make((), torch.float16)) == torch.float16
    )
    assert (
        result_type(TensorType.make((4,), torch.float16), TensorType.make((), torch.float64)) == torch.float16
    )
    assert result_type(TensorType.make((4,), torch.bool), True) == torch.bool


OPS_BY_KIND = {
    PromotionKind.DEFAULT: torch.add,
    PromotionKind.INT_TO_FLOAT: torch.true_divide,
    PromotionKind.ALWAYS_BOOL: torch.eq,
    PromotionKind.COMPLEX_TO_FLOAT: lambda a, b: torch.abs(torch.add(a, b)),
    PromotionKind.BOOL_TO_LONG: torch.pow,
}


@pytest.mark.parametrize("kind", list(OPS_BY_KIND), ids=lambda k: k.value)
def test_elementwise_result_dtype_matches_torch_ops(kind):
    op = OPS_BY_KIND[kind]
    for a, b in itertools.product(_operands(), _operands()):
        if not isinstance(a, torch.Tensor):
            continue
        try:
            expected = op(a, b).dtype
        except RuntimeError:
            continue  # torch refuses the combination (e.g. pow of bools)
        _, result = elementwise_dtypes(_ir(a), _ir(b), kind=kind)
        if kind is PromotionKind.BOOL_TO_LONG and expected == torch.bool:
            continue  # eager pow keeps bool ** bool as bool; the kind exists for sum-like reductions
        assert result == expected, (kind, a, b)


def test_opmath_computes_half_and_bfloat16_in_float32():
    half = TensorType.make((2,), torch.float16)
    assert elementwise_dtypes(half, half) == (torch.float32, torch.float16)
    assert elementwise_dtypes(half, half, kind=PromotionKind.NO_OPMATH) == (torch.float16, torch.float16)
    bf = TensorType.make((2,), torch.bfloat16)
    assert elementwise_dtypes(bf, 2) == (torch.float32, torch.bfloat16)


def test_broadcast_shapes_matches_torch():
    cases = [((3, 1), (1, 4)), ((), (2, 3)), ((5, 1, 4), (3, 1)), ((0,), (1,)), ((2, 0, 3), (0, 1))]
    for shapes in cases:
        assert broadcast_shapes(*shapes) == tuple(torch.broadcast_shapes(*shapes))
    with pytest.raises(PromotionError):
        broadcast_shapes((3,), (4,))


def test_broadcast_shapes_on_symbols():
    s0, s1 = symbol("s0"), symbol("s1")
    assert broadcast_shapes((s0, 1), (1, s1)) == (s0, s1)
    assert broadcast_shapes((s0, 4), (s0, 1)) == (s0, 4)
    assert broadcast_shapes((2 * s0,), (s0 + s0,)) == (2 * s0,)
    with pytest.raises(PromotionError, match="provably equal"):
        broadcast_shapes((s0,), (s1,))
