"""Prologues of C++ kernels: small pointwise buffers computed whole before the kernel's loops.

BatchNorm in eval mode reads `1 / sqrt(running_var + eps)` once per channel. Inlined into the
normalization it would run once per element (the inliner refuses broadcasts); as a buffer of its own
it is a kernel of a few dozen elements, and on a small image the call, the allocation and the
ctypes entry cost more than the normalization itself. Its loops cannot be the normalization's outer
loops either (8 channels are not the batch dim). So the scheduler may put it first in the kernel of a
buffer that reads it: the kernel computes it whole, into a stack array when no other kernel reads it
(`cpp/local.py`), then runs its own loop nest as it would without it.

A prologue member is a `Pointwise` buffer of at most `MAX_PROLOGUE_ELEMENTS` (static), and a group
has a prologue only where its members cannot all share loops: a group whose members share loops is
emitted as always, so the split read back from the group alone (`split_prologue`) is the one the
scheduler made.
"""

import sympy

from torchsmith.inductor.cpp.column_reduction import is_column_reduction
from torchsmith.inductor.cpp.cross_reduction import cross_parts
from torchsmith.inductor.loop_ir.program import ComputedBuffer, Pointwise

# Computed on one thread before the loops: a per-channel vector, not a tensor.
MAX_PROLOGUE_ELEMENTS = 4096


def _same_dims(a, b) -> bool:
    return len(a) == len(b) and all(sympy.expand(sympy.sympify(x) - y) == 0 for x, y in zip(a, b))


def share_loops(members) -> bool:
    """Whether every member's loops extend the shortest member's loops (and, where that is none,
    no member has a loop: a scalar cannot be an outer loop of a tensor)."""
    outer = min((m.body.ranges for m in members), key=len)
    if not outer:
        return not any(m.body.ranges for m in members)
    return all(_same_dims(m.body.ranges[: len(outer)], outer) for m in members)


def prologue_candidate(buffer: ComputedBuffer) -> bool:
    """Whether `buffer` may be computed whole before another buffer's loops."""
    if not isinstance(buffer.body, Pointwise):
        return False
    size = sympy.Integer(1)
    for r in buffer.body.ranges:
        size = size * sympy.sympify(r)
    return bool(size.is_Integer) and int(size) <= MAX_PROLOGUE_ELEMENTS


def split_prologue(group) -> tuple[tuple, tuple]:
    """`(prologue, main)`: the leading members computed whole before the loops and the members
    sharing the kernel's loops; `((), group)` for a group whose members all share loops (or one that
    cannot be split so)."""
    group = tuple(group)
    if len(group) < 2 or share_loops(group) or cross_parts(group) is not None or is_column_reduction(group):
        return (), group  # (row and column work of one pass share no loops either: cross_reduction.py)
    for k in range(1, len(group)):
        if not prologue_candidate(group[k - 1]):
            break
        if share_loops(group[k:]):
            return group[:k], group[k:]
    return (), group
