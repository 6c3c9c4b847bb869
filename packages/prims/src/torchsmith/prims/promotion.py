"""PyTorch's type promotion and broadcasting rules, written for IR operands.

Promotion (`result_type`) follows torch's three tiers: tensors with at least one dim decide the
dtype; 0-d tensors and then Python scalars only matter when their *category* (bool < int < float
< complex) is higher, and then they contribute a dtype (0-d tensors) or the default dtype of their
category (Python scalars: int64, float32, complex64)::

    int32[4] + 1.5            -> float32      int64[4] + float16[] -> float16
    float16[4] + float64[]    -> float16      bool[4] + True       -> bool

`elementwise_dtypes` adds the op's kind (DEFAULT, INT_TO_FLOAT, ...) and returns the dtype to
compute in (float16/bfloat16 computed in float32, "opmath") and the dtype of the result.
Broadcasting (`broadcast_shapes`) works on symbolic sizes: sizes must be equal or 1, and two
symbolic sizes must be provably equal.
"""

import enum

import sympy
import torch

from torchsmith.ir import Value
from torchsmith.ir.symbolic import Dim, format_dim
from torchsmith.ir.types import ScalarType, SymIntType, TensorType
from torchsmith.prims.core import CATEGORY_OF, dtype_category, same_dim
from torchsmith.prims.errors import PromotionError

__all__ = [
    "PromotionKind",
    "broadcast_shapes",
    "elementwise_dtypes",
    "opmath_dtype",
    "promote_types",
    "result_type",
]

_INT_ORDER = (torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64)
_FLOAT_ORDER = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
_COMPLEX_OF = {
    torch.float16: torch.complex32,
    torch.bfloat16: torch.complex64,
    torch.float32: torch.complex64,
    torch.float64: torch.complex128,
}
_REAL_OF = {torch.complex32: torch.float16, torch.complex64: torch.float32, torch.complex128: torch.float64}
_COMPLEX_ORDER = (torch.complex32, torch.complex64, torch.complex128)


class PromotionKind(enum.Enum):
    """How an op turns its promoted operand dtype into its result dtype."""

    DEFAULT = "default"  # add, mul, ...: the promoted dtype
    NO_OPMATH = "no_opmath"  # where, cat: the promoted dtype, computed in it too
    INT_TO_FLOAT = "int_to_float"  # sin, div: integers and bool give the default float
    COMPLEX_TO_FLOAT = "complex_to_float"  # abs: complex gives its real dtype
    BOOL_TO_LONG = "bool_to_long"  # pow, sum: bool gives int64
    ALWAYS_BOOL = "always_bool"  # eq, lt, isnan: bool


def promote_types(a: torch.dtype, b: torch.dtype) -> torch.dtype:
    """The smallest dtype both `a` and `b` convert to (torch.promote_types' table)."""
    if a == b:
        return a
    ca, cb = dtype_category(a), dtype_category(b)
    if CATEGORY_OF[ca] < CATEGORY_OF[cb]:
        a, b, ca, cb = b, a, cb, ca
    if ca == "bool":
        return a
    if ca != cb:  # a has the higher category and wins, except complex widens to hold a wide float
        if ca == "complex" and cb == "float":
            return _widest_complex(a, _COMPLEX_OF[b])
        return a
    if ca == "int":
        if torch.uint8 in (a, b):
            other = b if a == torch.uint8 else a
            return torch.int16 if other == torch.int8 else other
        return max(a, b, key=_INT_ORDER.index)
    if ca == "float":
        if {a, b} == {torch.float16, torch.bfloat16}:
            return torch.float32
        return max(a, b, key=_FLOAT_ORDER.index)
    return _widest_complex(a, b)


def _widest_complex(a: torch.dtype, b: torch.dtype) -> torch.dtype:
    return max(a, b, key=_COMPLEX_ORDER.index)


def _default_dtype_of(kind: str) -> torch.dtype:
    """The dtype a Python scalar of this kind contributes when its category wins."""
    default = torch.get_default_dtype()
    return {"bool": torch.bool, "int": torch.int64, "float": default, "complex": _COMPLEX_OF[default]}[kind]


def _operand(arg):
    """("dim" | "zero" | "scalar", dtype) for a tensor type, Value or Python scalar."""
    if isinstance(arg, Value):
        arg = arg.type
    if isinstance(arg, TensorType):
        return ("dim" if arg.rank else "zero"), arg.dtype
    if isinstance(arg, SymIntType):
        return "scalar", _default_dtype_of("int")
    if isinstance(arg, ScalarType) and arg.kind != "none":
        return "scalar", _default_dtype_of(arg.kind)
    if isinstance(arg, bool):
        return "scalar", torch.bool
    if isinstance(arg, int) or (isinstance(arg, sympy.Expr) and arg.is_integer):
        return "scalar", torch.int64
    if isinstance(arg, float):
        return "scalar", _default_dtype_of("float")
    if isinstance(arg, complex):
        return "scalar", _default_dtype_of("complex")
    if isinstance(arg, torch.dtype):  # a bare dtype counts as a tensor with dims
        return "dim", arg
    raise PromotionError(f"cannot promote {arg!r}: expected a tensor, a Python scalar or a dtype")


def _combine(higher: torch.dtype | None, lower: torch.dtype | None) -> torch.dtype | None:
    """Merge a lower-priority tier into a higher one: only a higher category can change it."""
    if higher is None:
        return lower
    if lower is None:
        return higher
    ch, cl = dtype_category(higher), dtype_category(lower)
    if ch == "complex":
        return higher
    if cl == "complex":
        return _COMPLEX_OF[higher] if ch == "float" else lower
    if ch == "float":
        return higher
    if ch == "bool" or cl == "float":
        return promote_types(higher, lower)
    return higher


def result_type(*operands) -> torch.dtype:
    """The promoted dtype of `operands` (tensor Values or types, scalars, dtypes), like torch.result_type."""
    tiers: dict[str, torch.dtype | None] = {"dim": None, "zero": None, "scalar": None}
    for arg in operands:
        if arg is None:
            continue
        tier, dtype = _operand(arg)
        tiers[tier] = dtype if tiers[tier] is None else promote_types(tiers[tier], dtype)
    dtype = _combine(tiers["dim"], _combine(tiers["zero"], tiers["scalar"]))
    if dtype is None:
        raise PromotionError("type promotion needs at least one operand")
    return dtype


def opmath_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype elementwise math runs in: float16 and bfloat16 in float32, complex32 in complex64."""
    return {
        torch.float16: torch.float32,
        torch.bfloat16: torch.float32,
        torch.complex32: torch.complex64,
    }.get(dtype, dtype)


def elementwise_dtypes(
    *operands, kind: PromotionKind = PromotionKind.DEFAULT
) -> tuple[torch.dtype, torch.dtype]:
    """(computation dtype, result dtype) of an elementwise op of this kind on these operands."""
    promoted = result_type(*operands)
    category = dtype_category(promoted)
    if kind is PromotionKind.ALWAYS_BOOL:
        return promoted, torch.bool
    if kind is PromotionKind.NO_OPMATH:
        return promoted, promoted
    if kind is PromotionKind.INT_TO_FLOAT and category in ("bool", "int"):
        promoted = torch.get_default_dtype()
    if kind is PromotionKind.BOOL_TO_LONG and category == "bool":
        promoted = torch.int64
    if kind is PromotionKind.COMPLEX_TO_FLOAT and category == "complex":
        return opmath_dtype(promoted), _REAL_OF[promoted]
    return opmath_dtype(promoted), promoted


def broadcast_shapes(*shapes) -> tuple[Dim, ...]:
    """The shape all `shapes` broadcast to (right-aligned; sizes equal or 1; symbolic sizes must be
    provably equal)."""
    rank = max((len(s) for s in shapes), default=0)
    result: list[Dim] = []
    for position in range(rank):
        sizes = [s[len(s) - rank + position] for s in shapes if len(s) - rank + position >= 0]
        chosen: Dim = 1
        for size in sizes:
            if same_dim(size, 1):
                continue
            if same_dim(chosen, 1):
                chosen = size
            elif not same_dim(chosen, size):
                raise PromotionError(
                    f"shapes {[[format_dim(d) for d in s] for s in shapes]} do not broadcast: size "
                    f"{format_dim(chosen)} against {format_dim(size)} (symbolic sizes must be provably equal)"
                )
        result.append(chosen)
    return tuple(result)
