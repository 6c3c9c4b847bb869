"""Counter-based random prims: `philox_rand` and `philox_randn`.

Each result element i is a pure function of (seed, offset, i): Philox4x32-10 (Salmon et al.,
"Parallel random numbers: as easy as 1, 2, 3", SC'11) keyed by the 64-bit seed, run on the
128-bit counter (i, offset). So a backend can regenerate any element anywhere (recompute in
the backward, any tiling) and a graph's randomness is reproducible from (seed, offset) alone.
The torch implementation computes in int64 tensors (torch lacks uint32 arithmetic on every
device), the NumPy one in uint64; both are exact, so the Philox words and uniform values agree bit
for bit on every device (normal values up to the device's rounding of log and cos).
"""

import math

import numpy as np
import torch

from torchsmith.ir import Value
from torchsmith.ir.types import ScalarType, SymIntType, TensorType
from torchsmith.prims.core import define_prim, dtype_category, shape_value
from torchsmith.prims.errors import PrimTypeError

MUL_A, MUL_B = 0xD2511F53, 0xCD9E8D57
WEYL_A, WEYL_B = 0x9E3779B9, 0xBB67AE85
MASK32 = 0xFFFFFFFF
ROUNDS = 10

# Random mantissa bits per dtype: enough to fill the mantissa, few enough that u < 1 after rounding.
_UNIFORM_BITS = {torch.float16: 11, torch.bfloat16: 8, torch.float32: 24, torch.float64: 53}


def _torch_mulhilo(a: int, b: torch.Tensor):
    """(high, low) 32-bit halves of a * b for a 32-bit constant and int64 tensor of 32-bit values,
    without overflowing int64: a = a_hi * 2**16 + a_lo."""
    a_hi, a_lo = a >> 16, a & 0xFFFF
    upper = a_hi * b  # < 2**48
    low_sum = ((upper & 0xFFFF) << 16) + a_lo * b  # < 2**49
    return ((upper >> 16) + (low_sum >> 32)) & MASK32, low_sum & MASK32


def philox_torch(counter_lo: torch.Tensor, counter_hi: torch.Tensor, offset: int, seed: int):
    """The four 32-bit Philox words (int64 tensors) for counters (counter_lo, counter_hi, offset)."""
    c0, c1 = counter_lo, counter_hi
    c2 = torch.full_like(c0, offset & MASK32)
    c3 = torch.full_like(c0, (offset >> 32) & MASK32)
    k0, k1 = seed & MASK32, (seed >> 32) & MASK32
    for _ in range(ROUNDS):
        hi0, lo0 = _torch_mulhilo(MUL_A, c0)
        hi1, lo1 = _torch_mulhilo(MUL_B, c2)
        c0, c1, c2, c3 = hi1 ^ c1 ^ k0, lo1, hi0 ^ c3 ^ k1, lo0
        k0, k1 = (k0 + WEYL_A) & MASK32, (k1 + WEYL_B) & MASK32
    return c0, c1, c2, c3


def philox_numpy(counter_lo: np.ndarray, counter_hi: np.ndarray, offset: int, seed: int):
    """The same words as `philox_torch`, in NumPy uint64 (32x32-bit products fit exactly)."""
    c0, c1 = counter_lo.astype(np.uint64), counter_hi.astype(np.uint64)
    c2 = np.full_like(c0, offset & MASK32)
    c3 = np.full_like(c0, (offset >> 32) & MASK32)
    k0, k1 = np.uint64(seed & MASK32), np.uint64((seed >> 32) & MASK32)
    mask, shift = np.uint64(MASK32), np.uint64(32)
    for _ in range(ROUNDS):
        p0, p1 = np.uint64(MUL_A) * c0, np.uint64(MUL_B) * c2
        c0, c1, c2, c3 = (p1 >> shift) ^ c1 ^ k0, p1 & mask, (p0 >> shift) ^ c3 ^ k1, p0 & mask
        k0, k1 = (k0 + np.uint64(WEYL_A)) & mask, (k1 + np.uint64(WEYL_B)) & mask
    return c0, c1, c2, c3


def _uniform_from_words(words, dtype, *, lib):
    """u in [0, 1) with the dtype's mantissa bits (two words for float64); computed in float64."""
    bits = _UNIFORM_BITS[dtype]
    if bits > 32:
        hi, lo = words[0] >> (32 - 26), words[1] >> (32 - 27)  # 26 + 27 = 53 bits
        mantissa = hi * (1 << 27) + lo
    else:
        mantissa = words[0] >> (32 - bits)
    scale = 2.0**-bits
    return mantissa.to(torch.float64) * scale if lib == "torch" else mantissa.astype(np.float64) * scale


def _normal_from_words(words, *, lib):
    """Box-Muller on two 24-bit uniforms: u1 in (0, 1] so the log is finite; computed in float64."""
    scale = 2.0**-24
    if lib == "torch":
        u1 = ((words[0] >> 8) + 1).to(torch.float64) * scale
        u2 = (words[1] >> 8).to(torch.float64) * scale
        return torch.sqrt(-2.0 * torch.log(u1)) * torch.cos(2 * math.pi * u2)
    u1 = ((words[0] >> np.uint64(8)) + np.uint64(1)).astype(np.float64) * scale
    u2 = (words[1] >> np.uint64(8)).astype(np.float64) * scale
    return np.sqrt(-2.0 * np.log(u1)) * np.cos(2 * math.pi * u2)


def _as_int(x) -> int:
    return int(x.item()) if isinstance(x, (torch.Tensor, np.ndarray)) else int(x)


def _torch_random(normal: bool):
    def run(shape, seed, offset, *, dtype, device):
        numel = math.prod(shape)
        index = torch.arange(numel, dtype=torch.int64, device=device)
        words = philox_torch(index & MASK32, index >> 32, _as_int(offset), _as_int(seed))
        values = (
            _normal_from_words(words, lib="torch")
            if normal
            else _uniform_from_words(words, dtype, lib="torch")
        )
        return values.to(dtype).reshape(list(shape))

    return run


def _numpy_random(normal: bool):
    def run(shape, seed, offset, *, dtype, device):
        index = np.arange(math.prod(shape), dtype=np.uint64)
        words = philox_numpy(
            index & np.uint64(MASK32), index >> np.uint64(32), _as_int(offset), _as_int(seed)
        )
        values = (
            _normal_from_words(words, lib="numpy")
            if normal
            else _uniform_from_words(words, dtype, lib="numpy")
        )
        return values.reshape(shape)

    return run


def _check_counter(name: str, what: str, arg) -> None:
    if isinstance(arg, bool):
        raise PrimTypeError(f"{name}: {what} must be an int, got {arg!r}")
    if isinstance(arg, int):
        return
    if isinstance(arg, Value):
        t = arg.type
        if isinstance(t, SymIntType) or t == ScalarType("int"):
            return
        if isinstance(t, TensorType) and t.rank == 0 and t.dtype == torch.int64:
            return
    raise PrimTypeError(f"{name}: {what} must be an int, a symbolic int or a 0-d int64 tensor, got {arg!r}")


def _random_rule(name: str):
    def infer(shape, seed, offset, *, dtype, device):
        shape = shape_value(name, shape)
        _check_counter(name, "seed", seed)
        _check_counter(name, "offset", offset)
        if (
            not isinstance(dtype, torch.dtype)
            or dtype_category(dtype) != "float"
            or dtype not in _UNIFORM_BITS
        ):
            raise PrimTypeError(f"{name}: dtype must be float16, bfloat16, float32 or float64, got {dtype!r}")
        return TensorType.make(shape, dtype, device)

    return infer


_PARAMS = "shape: ints, seed: any, offset: any, *, dtype: dtype, device: device"
define_prim(
    "prims.philox_rand",
    _PARAMS,
    kind="random",
    infer=_random_rule("prims.philox_rand"),
    torch_impl=_torch_random(False),
    numpy_impl=_numpy_random(False),
    doc="Uniform values in [0, 1): element i (row-major) comes from Philox word 0 at counter (i, offset) "
    "under key seed, keeping the dtype's mantissa bits (float64 uses words 0 and 1).",
)
define_prim(
    "prims.philox_randn",
    _PARAMS,
    kind="random",
    infer=_random_rule("prims.philox_randn"),
    torch_impl=_torch_random(True),
    numpy_impl=_numpy_random(True),
    doc="Standard normal values: Box-Muller on Philox words 0 and 1 at counter (i, offset) under key seed, "
    "computed in float64 and rounded to dtype.",
)
