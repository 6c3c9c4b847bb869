"""Short dtype names used in the text and JSON forms (`f32`, `bf16`, `i64`, `b8`)."""

import torch

from torchsmith.ir.errors import TypeParseError

DTYPE_BY_NAME: dict[str, torch.dtype] = {
    "b8": torch.bool,
    "u8": torch.uint8,
    "u16": torch.uint16,
    "u32": torch.uint32,
    "u64": torch.uint64,
    "i8": torch.int8,
    "i16": torch.int16,
    "i32": torch.int32,
    "i64": torch.int64,
    "f16": torch.float16,
    "bf16": torch.bfloat16,
    "f32": torch.float32,
    "f64": torch.float64,
    "c32": torch.complex32,
    "c64": torch.complex64,
    "c128": torch.complex128,
    "f8e4m3": torch.float8_e4m3fn,
    "f8e5m2": torch.float8_e5m2,
}
NAME_BY_DTYPE: dict[torch.dtype, str] = {dtype: name for name, dtype in DTYPE_BY_NAME.items()}


def dtype_name(dtype: torch.dtype) -> str:
    """`torch.float32` -> `"f32"`."""
    try:
        return NAME_BY_DTYPE[dtype]
    except KeyError:
        raise TypeParseError(f"dtype {dtype} has no short name in torchsmith.ir") from None


def dtype_from_name(name: str) -> torch.dtype:
    """`"f32"` -> `torch.float32`; also accepts torch's own names (`"float32"`, `"torch.float32"`)."""
    if name in DTYPE_BY_NAME:
        return DTYPE_BY_NAME[name]
    attr = getattr(torch, name.removeprefix("torch."), None)
    if isinstance(attr, torch.dtype):
        return attr
    known = ", ".join(DTYPE_BY_NAME)
    raise TypeParseError(f"unknown dtype {name!r}; expected one of {known}")
