"""C++ types of loop-IR dtypes: how a dtype is stored in memory and the type it is computed in.

float16 and bfloat16 are stored as 16 bits and computed in float, as eager PyTorch on the CPU does:
every half-precision op computes in float and rounds its result to 16 bits. So a value of a 16-bit
dtype lives in a `float` temporary that holds an exactly representable 16-bit number: loads widen,
each op's result is rounded (`ts::round_f16` / `ts::round_bf16`, which keep it a float), stores
narrow. float16 uses the compiler's `_Float16` (F16C instructions, so loops still vectorize);
bfloat16 is `uint16_t` bits with round-to-nearest-even done in integer arithmetic.
"""

import math

import torch

from torchsmith.inductor.errors import CodegenError

# dtype -> (storage type, compute type)
_TYPES = {
    torch.float32: ("float", "float"),
    torch.float64: ("double", "double"),
    torch.float16: ("_Float16", "float"),
    torch.bfloat16: ("uint16_t", "float"),
    torch.int64: ("int64_t", "int64_t"),
    torch.int32: ("int32_t", "int32_t"),
    torch.int16: ("int16_t", "int16_t"),
    torch.int8: ("int8_t", "int8_t"),
    torch.uint8: ("uint8_t", "uint8_t"),
    # Stored as uint8_t (same bytes): g++ 12 does not vectorize a loop that loads `bool` elements
    # (a masked softmax would run scalar); loads compare `!= 0`.
    torch.bool: ("uint8_t", "bool"),
}

HALF_DTYPES = (torch.float16, torch.bfloat16)


def _types(dtype: torch.dtype) -> tuple[str, str]:
    try:
        return _TYPES[dtype]
    except KeyError:
        # The lowering runs every node touching such a dtype as torch's kernel (lowering.fallback
        # .foreign_dtype), so a loop over one comes from a hand-made or hand-edited loop IR.
        raise CodegenError(
            f"the C++ backend generates no loops over {dtype} elements (supported: "
            f"{', '.join(map(str, _TYPES))}); lower graphs with torchsmith.inductor.lower, which runs "
            f"nodes reading or writing {dtype} tensors as extern calls"
        ) from None


def storage_type(dtype: torch.dtype) -> str:
    """The C++ element type of a buffer of `dtype` (what pointers point to)."""
    return _types(dtype)[0]


# Bytes of each C++ type above (storage and compute types).
_SIZES = {"double": 8, "int64_t": 8, "float": 4, "int32_t": 4, "int16_t": 2, "uint16_t": 2, "_Float16": 2,
          "int8_t": 1, "uint8_t": 1, "bool": 1}  # fmt: skip


def type_size(cpp: str) -> int:
    """The bytes of a value of C++ type `cpp` (one of `storage_type` / `cpp_type`'s answers)."""
    return _SIZES[cpp]


def cpp_type(dtype: torch.dtype) -> str:
    """The C++ type a value of `dtype` is computed in (float for the 16-bit float dtypes)."""
    return _types(dtype)[1]


def load_code(pointer_element: str, dtype: torch.dtype) -> str:
    """A load of one stored element, widened to the compute type."""
    if dtype == torch.float16:
        return f"static_cast<float>({pointer_element})"
    if dtype == torch.bfloat16:
        return f"ts::bf16_to_float({pointer_element})"
    if dtype == torch.bool:
        return f"({pointer_element} != 0)"
    return pointer_element


def store_code(value: str, dtype: torch.dtype) -> str:
    """A compute-type value narrowed to the storage type (rounding to nearest even)."""
    if dtype == torch.float16:
        return f"static_cast<_Float16>({value})"
    if dtype == torch.bfloat16:
        return f"ts::float_to_bf16({value})"
    if dtype == torch.bool:
        return f"static_cast<uint8_t>({value})"
    return value


def round_code(value: str, dtype: torch.dtype) -> str:
    """`value` (a float) rounded to `dtype` and kept as a float: the result of one 16-bit op."""
    if dtype == torch.float16:
        return f"ts::round_f16({value})"
    if dtype == torch.bfloat16:
        return f"ts::round_bf16({value})"
    return value


def cpp_limit(dtype: torch.dtype, which: str) -> str:
    """A limit of `dtype`'s compute type as a C++ literal (no <limits> in generated code):
    `which` is "inf", "-inf", "nan", "lowest" or "max" (lowest/max of a float type are -inf/inf)."""
    t = cpp_type(dtype)
    if t in ("float", "double"):
        suffix = "f" if t == "float" else ""
        if which == "nan":
            return f'__builtin_nan{suffix}("")'
        negative = which in ("-inf", "lowest")
        return f"{'-' if negative else ''}__builtin_inf{suffix}()"
    if dtype == torch.bool:
        return "false" if which == "lowest" else "true"
    info = torch.iinfo(dtype)
    value = info.min if which == "lowest" else info.max
    if value == -(2**63):  # not a literal in C++: 9223372036854775808 overflows before the minus
        return "(-9223372036854775807LL - 1)"
    return f"static_cast<{t}>({value}LL)"


def cpp_constant(value, dtype: torch.dtype) -> str:
    """A constant of `dtype` as a C++ literal of its compute type (16-bit constants are rounded)."""
    t = cpp_type(dtype)
    if dtype == torch.bool:
        return "true" if value else "false"
    if isinstance(value, float) and (math.isinf(value) or math.isnan(value)):
        if dtype.is_floating_point:
            return cpp_limit(dtype, "nan" if math.isnan(value) else ("-inf" if value < 0 else "inf"))
        raise CodegenError(f"cannot make the non-finite constant {value} a {dtype}")
    if isinstance(value, bool):
        value = int(value)
    if dtype in HALF_DTYPES:
        # The constant is a value of the 16-bit dtype: round it as torch does when it makes the tensor.
        value = torch.tensor(float(value), dtype=dtype).item()
        if math.isinf(value):
            return cpp_limit(dtype, "-inf" if value < 0 else "inf")
        return f"{float(value)!r}f"
    if dtype == torch.float32 and isinstance(value, (int, float)):
        return f"static_cast<float>({float(value)!r})"
    if dtype == torch.int64 and isinstance(value, int) and value == -(2**63):
        return cpp_limit(dtype, "lowest")
    return f"static_cast<{t}>({value!r})"
