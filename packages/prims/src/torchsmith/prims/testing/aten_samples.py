"""Sample inputs for ATen ops, for the decomposition tests: broadcasting, 0-d tensors, Python
scalars, mixed dtypes, empty and non-contiguous tensors.

`aten_samples(name)` returns the samples of one overload (e.g. `"aten.add.Tensor"`).
"""

import functools

from torchsmith.prims.decompositions.elementwise import FLOAT_UNARY
from torchsmith.prims.testing.make import Sample
from torchsmith.prims.testing.sample_helpers import (
    B8,
    BF16,
    F16,
    F32,
    F64,
    I32,
    I64,
    binary,
    scalar_binary,
    unary,
)
from torchsmith.prims.testing.samples_pointwise import POINTWISE
from torchsmith.prims.testing.samples_structured import STRUCTURED
from torchsmith.prims.testing.samples_transformer import TRANSFORMER
from torchsmith.prims.testing.samples_weight_norm import WEIGHT_NORM

SPECIAL = {**POINTWISE, **STRUCTURED, **TRANSFORMER, **WEIGHT_NORM}
SAME_AS = {
    "aten.all.dim": "aten.any.dim",
    "aten.argmin.default": "aten.argmax.default",
    "aten.min.dim": "aten.max.dim",
    "aten.min.default": "aten.max.default",
    "aten.isinf.default": "aten.isnan.default",
    "aten.isfinite.default": "aten.isnan.default",
    "aten.logical_or.default": "aten.logical_and.default",
    "aten.logical_xor.default": "aten.logical_and.default",
    "aten.clamp_max.default": "aten.clamp_min.default",
    "aten.alias.default": "aten.detach.default",
    "aten.lift_fresh_copy.default": "aten.detach.default",
    "aten.true_divide.Tensor": "aten.div.Tensor",
    "aten.rsub.Tensor": "aten.sub.Tensor",
    "aten.fmod.Scalar": "aten.remainder.Scalar",
    "aten.floor_divide.Scalar": "aten.remainder.Scalar",
    "aten.prod.default": "aten.sum.default",
    "aten.empty_like.default": "aten.zeros_like.default",
    "aten.new_empty.default": "aten.new_zeros.default",
    "aten.new_ones.default": "aten.new_zeros.default",
}
# the float unary ops the decompositions register (one list, there), then the others sampled alike
UNARY_FLOAT = FLOAT_UNARY + (
    "sigmoid",
    "silu",
    "relu",
    "hardswish",
    "hardsigmoid",
    "neg",
    "abs",
    "sign",
    "floor",
    "ceil",
    "round",
    "trunc",
)
COMPARISONS = ("eq", "ne", "lt", "le", "gt", "ge")


@functools.cache
def aten_samples(name: str) -> tuple[Sample, ...]:
    """The samples for aten overload `name`, or () when the database has none."""
    if name in SAME_AS:
        return aten_samples(SAME_AS[name])
    if name in SPECIAL:
        return tuple(SPECIAL[name]())
    packet, overload = name.split(".")[1:]
    if packet in UNARY_FLOAT and overload == "default":
        dtypes = (
            (F32, F64, BF16, F16)
            if packet in ("silu", "hardswish", "hardsigmoid")
            else (F32, F64, BF16, F16, I64)
        )
        return tuple(unary(packet, dtypes))
    if packet in COMPARISONS + ("bitwise_and", "bitwise_or", "bitwise_xor"):
        dtypes = (I64, I32, B8) if packet.startswith("bitwise") else (F32, F64, BF16, F16, I64, I32, B8)
        if overload == "Tensor":
            return tuple(
                s
                for s in binary(packet, dtypes=dtypes)
                if not packet.startswith("bitwise") or not any(t.dtype.is_floating_point for t in s.tensors)
            )
        if overload == "Scalar":
            return tuple(
                scalar_binary(
                    packet,
                    scalars=(2,) if packet.startswith("bitwise") else (2, 1.5),
                    dtypes=(I64,) if packet.startswith("bitwise") else (F32, BF16, I64),
                )
            )
    return ()
