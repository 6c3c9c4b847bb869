"""C++ for the counter-based random ops `philox_rand` and `philox_randn` (loop forms of the prims
of the same names): each element is a pure function of (seed, offset, its row-major index), so the
kernel computes it in place, vectorizes, and needs no state.

The bits are those of `torchsmith.prims.rng` (Philox4x32-10 keyed by the seed, counter (index,
offset)): uniform values keep the dtype's mantissa bits of word 0 (float64: words 0 and 1); normal
values are Box-Muller on words 0 and 1 in double, as the prim's torch implementation computes them.

Hooks for the C++ printer: `random_code(op, args)` is the expression of an `Op` named in
`RANDOM_OPS` (operands: seed, offset, index, all int64); `RANDOM_PRELUDE` goes into every
translation unit that `uses_random`.
"""

import torch

from torchsmith.inductor.loop_ir.program import ComputedBuffer, Indirect, Op

RANDOM_OPS = ("philox_rand", "philox_randn")

# The dtypes the loop form produces (float16/bfloat16 keep the extern call: fewer mantissa bits).
RANDOM_DTYPES = {torch.float32: ("float", 24), torch.float64: ("double", 53)}

RANDOM_PRELUDE = r"""
namespace ts {
// Philox4x32-10 (Salmon et al., SC'11): the four 32-bit words for counter (index, offset), key seed.
inline void philox(uint64_t index, uint64_t offset, uint64_t seed, uint32_t* w) {
  uint32_t c0 = static_cast<uint32_t>(index), c1 = static_cast<uint32_t>(index >> 32);
  uint32_t c2 = static_cast<uint32_t>(offset), c3 = static_cast<uint32_t>(offset >> 32);
  uint32_t k0 = static_cast<uint32_t>(seed), k1 = static_cast<uint32_t>(seed >> 32);
  for (int round = 0; round < 10; ++round) {
    uint64_t p0 = static_cast<uint64_t>(0xD2511F53u) * c0;
    uint64_t p1 = static_cast<uint64_t>(0xCD9E8D57u) * c2;
    uint32_t n0 = static_cast<uint32_t>(p1 >> 32) ^ c1 ^ k0;
    uint32_t n2 = static_cast<uint32_t>(p0 >> 32) ^ c3 ^ k1;
    c1 = static_cast<uint32_t>(p1);
    c3 = static_cast<uint32_t>(p0);
    c0 = n0;
    c2 = n2;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  w[0] = c0; w[1] = c1; w[2] = c2; w[3] = c3;
}

// Uniform in [0, 1) with `bits` mantissa bits (53: words 0 and 1), exact in double.
inline double philox_uniform(int64_t seed, int64_t offset, int64_t index, int bits) {
  uint32_t w[4];
  philox(static_cast<uint64_t>(index), static_cast<uint64_t>(offset), static_cast<uint64_t>(seed), w);
  if (bits > 32) {
    uint64_t mantissa = (static_cast<uint64_t>(w[0] >> 6) << 27) + (w[1] >> 5);
    return static_cast<double>(mantissa) * 0x1p-53;
  }
  return static_cast<double>(w[0] >> (32 - bits)) / static_cast<double>(uint64_t(1) << bits);
}

// Standard normal: Box-Muller on two 24-bit uniforms, u1 in (0, 1] so the log is finite.
inline double philox_normal(int64_t seed, int64_t offset, int64_t index) {
  uint32_t w[4];
  philox(static_cast<uint64_t>(index), static_cast<uint64_t>(offset), static_cast<uint64_t>(seed), w);
  double u1 = static_cast<double>((w[0] >> 8) + 1) * 0x1p-24;
  double u2 = static_cast<double>(w[1] >> 8) * 0x1p-24;
  // GCC builtins: libm without depending on which headers the translation unit includes.
  return __builtin_sqrt(-2.0 * __builtin_log(u1)) * __builtin_cos(2 * 3.14159265358979323846 * u2);
}
}  // namespace ts
"""


def random_code(op: Op, args: list[str]) -> str:
    """The C++ expression of a random `Op` (`philox_rand`/`philox_randn`) on named operands."""
    t, bits = RANDOM_DTYPES[op.dtype]
    seed, offset, index = args
    if op.op == "philox_rand":
        return f"static_cast<{t}>(ts::philox_uniform({seed}, {offset}, {index}, {bits}))"
    return f"static_cast<{t}>(ts::philox_normal({seed}, {offset}, {index}))"


def uses_random(program) -> bool:
    """Whether any computed buffer of `program` holds a random `Op` (then its translation unit
    needs `RANDOM_PRELUDE`)."""

    def walk(expr) -> bool:
        if isinstance(expr, Op):
            return expr.op in RANDOM_OPS or any(walk(a) for a in expr.args)
        if isinstance(expr, Indirect):
            return walk(expr.value) or walk(expr.body)
        return False

    return any(walk(b.body.value) for b in program.buffers if isinstance(b, ComputedBuffer))
