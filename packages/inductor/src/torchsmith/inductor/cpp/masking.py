"""Which kernels may see masked values (-inf, a -1e9 or dtype-minimum fill), so that their exp is
our inline one (vector_math.INLINE): libmvec's vector expf handles every lane below -87.3 with a
scalar call, many times slower than the rest of a softmax row.

A kernel may see them when it holds such a constant itself (masked_fill with -inf), or when it
reads a buffer computed from one anywhere upstream: transformers' padding masks are built by a
`where(keep, 0, finfo.min)` kernel of their own, stored, and read broadcast by the softmax kernel
of every head, which holds no large constant.
"""

from torchsmith.inductor.loop_ir.program import ComputedBuffer, Constant, LoopProgram, loads

# A float constant this large (or infinite, or nan) marks a value as masking: exp's vector
# variant in libmvec is slow on inputs below -87.3.
MASK_MAGNITUDE = 80.0


def holds_mask_constant(expr) -> bool:
    """Whether the element expression `expr` holds an infinite, nan or huge float constant."""
    if isinstance(expr, Constant):
        return isinstance(expr.value, float) and not abs(expr.value) < MASK_MAGNITUDE
    return any(holds_mask_constant(a) for a in getattr(expr, "args", ()))


def masking_buffers(program: LoopProgram) -> frozenset[str]:
    """Names of the computed buffers of `program` whose values may be masking: computed with a
    masking constant, or by a kernel reading such a buffer, transitively. Library calls end the
    chain: attention consumes its mask, a matmul mixes it into finite sums, so the layers after
    them (a SiLU's exp) keep libmvec's exp. Within kernels it over-approximates (a sum of exps of
    masked scores is no mask): the cost of a wrong yes is our exp where libmvec's would be a
    little faster."""
    masking: set[str] = set()
    for buffer in program.buffers:
        if isinstance(buffer, ComputedBuffer):
            value = buffer.body.value
            if holds_mask_constant(value) or any(load.buffer in masking for load in loads(value)):
                masking.add(buffer.name)
    return frozenset(masking)


def may_see_masked_values(group, masking: frozenset[str]) -> bool:
    """Whether the kernel computing `group` (computed buffers) may feed masked values to exp."""
    return any(buffer.name in masking for buffer in group)
