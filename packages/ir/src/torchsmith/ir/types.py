"""The types of IR values: tensors, symbolic ints and Python scalars.

Each type has a one-line text form, used by the printer and accepted by the builder::

    f32[s0, 64] cpu               contiguous float32 tensor on the CPU
    f16[4, 8]{1, 4} cuda:0 grad   non-contiguous strides, requires_grad
    sym(s0)                       a symbolic int whose value is s0
    int | float | bool | complex | none   Python scalars
"""

import functools
import re
from dataclasses import dataclass

import torch

from torchsmith.ir.dtypes import dtype_from_name, dtype_name
from torchsmith.ir.errors import SymbolicError, TypeParseError
from torchsmith.ir.symbolic import Dim, format_dim, free_symbols, normalize_dim, parse_dim


def contiguous_strides(shape: tuple[Dim, ...]) -> tuple[Dim, ...]:
    """Row-major strides of `shape`; a size of 0 counts as 1, as torch does."""
    strides: list[Dim] = []
    running: Dim = 1
    for size in reversed(shape):
        strides.append(running)
        running = normalize_dim(running * (size if not (isinstance(size, int) and size == 0) else 1))
    return tuple(reversed(strides))


def normalize_device(device) -> str:
    """`torch.device("cuda")` / `"cuda:0"` / `"cpu"` -> canonical string."""
    return str(torch.device(device))


@dataclass(frozen=True, slots=True)
class TensorType:
    """A tensor's static description. `strides` are always explicit (use `TensorType.make`)."""

    shape: tuple[Dim, ...]
    dtype: torch.dtype
    device: str = "cpu"
    strides: tuple[Dim, ...] = ()
    requires_grad: bool = False

    def __post_init__(self):
        if len(self.strides) != len(self.shape):
            raise TypeParseError(
                f"tensor type has {len(self.shape)} dims but {len(self.strides)} strides; "
                "build it with TensorType.make(shape, dtype, ...) to get contiguous strides"
            )

    @staticmethod
    def make(shape, dtype, device="cpu", strides=None, requires_grad=False) -> "TensorType":
        """Build a tensor type; strides default to contiguous and dims are normalized."""
        shape = tuple(normalize_dim(d) for d in shape)
        strides = contiguous_strides(shape) if strides is None else tuple(normalize_dim(s) for s in strides)
        if isinstance(dtype, str):
            dtype = dtype_from_name(dtype)
        return TensorType(shape, dtype, normalize_device(device), strides, bool(requires_grad))

    @staticmethod
    def of(tensor: torch.Tensor) -> "TensorType":
        """The type of a concrete (or meta) tensor."""
        return TensorType(
            tuple(tensor.shape),
            tensor.dtype,
            str(tensor.device),
            tuple(tensor.stride()),
            tensor.requires_grad,
        )

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def is_contiguous(self) -> bool:
        return self.strides == contiguous_strides(self.shape)

    @property
    def free_symbols(self) -> frozenset[str]:
        return frozenset().union(*(free_symbols(d) for d in self.shape + self.strides))

    def replace(self, **changes) -> "TensorType":
        from dataclasses import replace

        if "shape" in changes and "strides" not in changes:
            changes["strides"] = contiguous_strides(tuple(changes["shape"]))
        return replace(self, **changes)

    def __str__(self) -> str:
        return format_type(self)


@dataclass(frozen=True, slots=True)
class SymIntType:
    """A Python int known symbolically: `expr` is the value it holds (an int or an expression)."""

    expr: Dim

    @property
    def free_symbols(self) -> frozenset[str]:
        return free_symbols(self.expr)

    def __str__(self) -> str:
        return format_type(self)


SCALAR_KINDS = ("bool", "int", "float", "complex", "none")
_SCALAR_PYTHON_TYPES = {"bool": bool, "int": int, "float": float, "complex": complex, "none": type(None)}


@dataclass(frozen=True, slots=True)
class ScalarType:
    """A Python scalar passed in or produced at run time: bool, int, float, complex or None."""

    kind: str

    def __post_init__(self):
        if self.kind not in SCALAR_KINDS:
            raise TypeParseError(
                f"unknown scalar kind {self.kind!r}; expected one of {', '.join(SCALAR_KINDS)}"
            )

    @staticmethod
    def of(value) -> "ScalarType":
        for kind, py_type in _SCALAR_PYTHON_TYPES.items():
            if type(value) is py_type:
                return ScalarType(kind)
        raise TypeParseError(f"{type(value).__name__} is not a Python scalar type")

    @property
    def python_type(self) -> type:
        return _SCALAR_PYTHON_TYPES[self.kind]

    @property
    def free_symbols(self) -> frozenset[str]:
        return frozenset()

    def __str__(self) -> str:
        return self.kind


Type = TensorType | SymIntType | ScalarType


def type_of(value) -> Type:
    """The IR type of a runtime value (tensor, int, float, bool, complex, None)."""
    if isinstance(value, torch.Tensor):
        return TensorType.of(value)
    return ScalarType.of(value)


def format_type(t: Type) -> str:
    """The text form of a type (see the module docstring)."""
    if isinstance(t, TensorType):
        dims = ", ".join(format_dim(d) for d in t.shape)
        text = f"{dtype_name(t.dtype)}[{dims}]"
        if not t.is_contiguous:
            text += "{" + ", ".join(format_dim(s) for s in t.strides) + "}"
        text += f" {t.device}"
        if t.requires_grad:
            text += " grad"
        return text
    if isinstance(t, SymIntType):
        return f"sym({format_dim(t.expr)})"
    if isinstance(t, ScalarType):
        return t.kind
    raise TypeParseError(f"not an IR type: {t!r}")


_TENSOR_RE = re.compile(
    r"^(?P<dtype>[a-z0-9]+)\[(?P<shape>[^\]]*)\](?:\{(?P<strides>[^}]*)\})?"
    r"\s+(?P<device>[a-z]+(?::\d+)?)(?P<grad>\s+grad)?$"
)


def _split_dims(text: str) -> list[str]:
    """Split `a, max(b, c), d` at top-level commas."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return [p.strip() for p in parts] if text.strip() else []


def _parse_dims(text: str, whole: str) -> tuple[Dim, ...]:
    try:
        return tuple(normalize_dim(parse_dim(p)) for p in _split_dims(text))
    except SymbolicError as e:
        raise TypeParseError(f"in type {_shown(whole)}: {e}") from None


def _shown(text: str) -> str:
    return repr(text if len(text) <= 60 else text[:60] + "...")


@functools.lru_cache(maxsize=4096)
def parse_type(text: str) -> Type:
    """Read a type from its text form: `f32[s0, 64] cpu`, `sym(s0)`, `int`, ..."""
    text = text.strip()
    if text in SCALAR_KINDS:
        return ScalarType(text)
    if text.startswith("sym(") and text.endswith(")"):
        try:
            return SymIntType(normalize_dim(parse_dim(text[4:-1])))
        except SymbolicError as e:
            raise TypeParseError(f"in type {_shown(text)}: {e}") from None
    match = _TENSOR_RE.match(text)
    if not match:
        raise TypeParseError(
            f"cannot read type {_shown(text)}; expected e.g. 'f32[s0, 64] cpu', "
            "'f32[4, 8]{1, 4} cuda:0 grad', "
            f"'sym(s0)' or one of {', '.join(SCALAR_KINDS)}"
        )
    shape = _parse_dims(match["shape"], text)
    strides = (
        _parse_dims(match["strides"], text) if match["strides"] is not None else contiguous_strides(shape)
    )
    if len(strides) != len(shape):
        raise TypeParseError(f"type {text!r} has {len(shape)} dims but {len(strides)} strides")
    return TensorType(
        shape, dtype_from_name(match["dtype"]), match["device"], strides, match["grad"] is not None
    )


def as_type(t) -> Type:
    """Accept a Type or its text form."""
    if isinstance(t, str):
        return parse_type(t)
    if isinstance(t, (TensorType, SymIntType, ScalarType)):
        return t
    raise TypeParseError(f"expected an IR type or its text form, got {t!r}")
