"""The scheduler: groups the buffers of a loop program into kernels (vertical and horizontal fusion).

A kernel is a group of computed buffers sharing outer loops (see `cpp_codegen.emit_kernel`): each
member loops over its remaining dims inside them and reads what earlier members stored in the same
outer iteration. Buffers are taken in program order; each joins an existing kernel when

- vertical: the kernel computes one of the buffers it reads (softmax's max, sum and division; layer
  norm's statistics and normalization; a reduction's epilogue), or
- horizontal: the kernel reads the same data (one pass over it for siblings),

and the join is legal: every member's loops extend the shortest member's loops, each cross-member
read stays inside the current outer iteration, and the kernel runs after everything else it reads.
Every decision, taken or refused, is a `FusionDecision` with its reason, logged at INFO on
`torchsmith.inductor.fusion` (`TORCHSMITH_LOGS=fusion`).
"""

import logging
from dataclasses import dataclass

import sympy

from torchsmith.inductor.cpp.codegen import PARALLEL_THRESHOLD, SPLIT_REDUCTION_BELOW, joint_pointwise
from torchsmith.inductor.cpp.column_reduction import column_like
from torchsmith.inductor.cpp.cross_reduction import cross_parts
from torchsmith.inductor.cpp.prologue import split_prologue
from torchsmith.inductor.loop_ir.index_math import split_index, variable_ranges
from torchsmith.inductor.loop_ir.program import (
    Buffer,
    ComputedBuffer,
    ExternCall,
    Indirect,
    LoopProgram,
    Pointwise,
    Reduction,
    Scatter,
    index_var,
    loads,
)
from torchsmith.inductor.triton.cross import cross_parts as row_block_parts
from torchsmith.ir.symbolic import format_dim

fusion_log = logging.getLogger("torchsmith.inductor.fusion")

# A kernel stops growing here: one huge loop body compiles slowly and spills registers.
MAX_GROUP_SIZE = 32
# Horizontal fusion looks this many kernels back: joining a far earlier kernel computes a buffer long
# before its use, which keeps its memory alive longer for little gain.
HORIZONTAL_WINDOW = 8


@dataclass(frozen=True, slots=True)
class FusionDecision:
    """One fusion considered: `kind` is "inline" (producer computed inside the consumer), "vertical"
    (consumer joins the producer's kernel) or "horizontal" (siblings reading the same data share
    a kernel), or "layout" (a graph's convolutions run channels-last: channels_last.py); `taken` says
    whether it was done and `reason` why (or why not)."""

    kind: str
    producer: str
    consumer: str
    taken: bool
    reason: str

    def __str__(self) -> str:
        verdict = "fused" if self.taken else "refused"
        if self.kind == "layout":  # a layout choice (channels_last.py), not a fusion
            verdict = "chosen" if self.taken else "not chosen"
        return f"{self.kind} {self.producer} -> {self.consumer}: {verdict}: {self.reason}"


def log_decision(decision: FusionDecision) -> None:
    """Log one decision on `torchsmith.inductor.fusion` (INFO)."""
    if fusion_log.isEnabledFor(logging.INFO):
        fusion_log.info("%s", decision)


@dataclass(frozen=True, slots=True)
class Schedule:
    """The execution order of a program: each step is a kernel group (computed buffers, in order)
    or a one-element tuple holding an extern call; `decisions` are the grouping decisions."""

    steps: tuple[tuple[Buffer, ...], ...]
    decisions: tuple[FusionDecision, ...]

    @property
    def groups(self) -> list[tuple[ComputedBuffer, ...]]:
        """The kernel groups, in execution order (what `generate_cpp` takes)."""
        return [step for step in self.steps if isinstance(step[0], ComputedBuffer)]

    def __str__(self) -> str:
        lines = []
        for k, step in enumerate(self.steps):
            kind = "extern" if isinstance(step[0], ExternCall) else "kernel"
            lines.append(f"step {k} {kind}: {', '.join(b.name for b in step)}")
        return "\n".join(lines)


def reads_of(buffer: Buffer) -> set[str]:
    """The buffers (and inputs) `buffer` reads."""
    if isinstance(buffer, ExternCall):
        return {arg.buffer for arg in buffer.args}
    return {load.buffer for load in loads(buffer.body.value)}


def _same_dims(a, b) -> bool:
    return len(a) == len(b) and all(sympy.expand(sympy.sympify(x) - y) == 0 for x, y in zip(a, b))


def _product(dims) -> sympy.Expr:
    total = sympy.Integer(1)
    for d in dims:
        total = total * d
    return sympy.sympify(total)


def _welford_key(buffer: ComputedBuffer):
    body = buffer.body
    if isinstance(body, Reduction) and body.reduction_type.startswith("welford"):
        return body.ranges, body.reduction_ranges, body.value
    return buffer.name


def _split_alone(members: list[ComputedBuffer], outer) -> str | None:
    """Why a big reduction should stay alone: with outer loops too few to thread, the emitter threads
    a lone reduction (or welford pair) across its reduction loop instead, which a group would lose."""
    work = _product(outer)
    if not work.is_Integer or int(work) >= SPLIT_REDUCTION_BELOW:
        return None
    if len({_welford_key(m) for m in members}) == 1:
        return None  # one reduction state (welford mean and M2): still split as one
    for m in members:
        if isinstance(m.body, Reduction):
            rwork = _product(m.body.reduction_ranges)
            if not rwork.is_Integer or int(rwork) >= PARALLEL_THRESHOLD:
                return (
                    f"{m.name} reduces {format_dim(rwork)} elements in only {int(work)} outer iteration(s): "
                    "alone, it is threaded across its reduction loop"
                )
    return None


def _has_indirect(expr) -> bool:
    if isinstance(expr, Indirect):
        return True
    return any(_has_indirect(a) for a in getattr(expr, "args", ()))


def _column_mix(members: list[ComputedBuffer]) -> str | None:
    """Why a column reduction (vectorized across its kept dim, cpp/column_reduction.py) cannot share a
    kernel with a sibling row reduction: one loop nest cannot vectorize both, and the pair would fall
    back to the strided loop, so each reads the input in its own kernel. (Column sums beside row
    reductions of one 2-D input share a pass over its rows instead: `cross_parts`, checked first.)"""
    reductions = [m for m in members if isinstance(m.body, Reduction)]
    columns = [m for m in reductions if column_like(m.body)]
    rows = [m for m in reductions if not column_like(m.body)]
    if columns and rows:
        return (
            f"{columns[0].name} reduces a strided dim (vectorized across its kept dim) and {rows[0].name} "
            "a contiguous one: one loop nest cannot vectorize both"
        )
    return None


def _cpp_only_refusal(members: list[ComputedBuffer], outer) -> str | None:
    """Refusals that only the C++ emitter needs (its threading and vectorization of loop nests)."""
    threaded_alone = _split_alone(members, outer)
    if threaded_alone:
        return threaded_alone
    if all(isinstance(m.body, Pointwise) and len(m.body.ranges) == len(outer) for m in members):
        if not joint_pointwise(members) and len(outer) < 2:
            # Siblings share one vectorized loop (codegen.joint_pointwise); a member reading another
            # could read an element not stored yet, and one loop per member would lose the 1-d
            # nest's vectorized loop. (With more dims each member loops over the last one itself,
            # inside the shared others: codegen._outer_ranges. A Triton kernel computes such members
            # in registers.)
            return "pointwise loops of equal shape, one reading another, would lose their vectorized loop"
    for m in members:
        if isinstance(m.body, Pointwise) and len(m.body.ranges) == len(outer) and _has_indirect(m.body.value):
            # The C++ emitter places hoisted statements of such a member after their use.
            return f"{m.name} has indirect loads without a loop of its own inside the shared loops"
    return None


def _cannot_join(group: list[ComputedBuffer], buffer: ComputedBuffer, target: str) -> str | None:
    """Why `buffer` cannot join the kernel `group` of `target` ("cpp" or "triton"), or None when it can."""
    if len(group) >= MAX_GROUP_SIZE:
        return f"the kernel already holds {MAX_GROUP_SIZE} buffers"
    members = [*group, buffer]
    scatter = next((m for m in members if isinstance(m.body, Scatter)), None)
    if scatter is not None:
        return f"{scatter.name} writes at data-chosen positions: a scatter loop is a kernel of its own"
    if target == "cpp" and cross_parts(members) is not None:
        return None  # row and column reductions of one input: one pass (cpp/cross_reduction.py)
    if target == "triton":
        blocked = row_block_parts(members)
        if blocked is not None:
            # Row-block partials of a column reduction share the row reductions' read
            # (triton/cross.py); the row members must still fit one row kernel.
            rows, partials = blocked
            if buffer in partials:
                return None
            if reads_of(buffer) & {p.name for p in partials}:
                return "it reads column partials that every program of the kernel writes a part of"
            group, members = [m for m in group if m in rows], rows
    if target == "cpp":
        prologue, main = split_prologue(members)
        if prologue:  # computed whole before the loops of the rest, which are checked as a group
            if len(main) == 1:
                return None  # alone after its prologue: its loops as they would be without it
            group, members = list(main[:-1]), list(main)
    outer = min((m.body.ranges for m in members), key=len)
    shown = [format_dim(d) for d in outer]
    for m in members:
        if not _same_dims(m.body.ranges[: len(outer)], outer):
            return (
                f"loops {[format_dim(d) for d in m.body.ranges]} of {m.name} do not extend the "
                f"shared loops {shown}"
            )
    if not outer and any(m.body.ranges for m in members):
        return "no loop in common (a full reduction cannot share a loop with a tensor)"
    if target == "cpp":
        reason = _cpp_only_refusal(members, outer)
        if reason:
            return reason
    names = {m.name: m for m in group}
    ranges = variable_ranges(buffer)
    for load in dict.fromkeys(loads(buffer.body.value)):
        member = names.get(load.buffer)
        if member is None:
            continue
        layout = member.layout
        split = split_index(load.index, layout.shape, layout.strides, ranges)
        if split is None:
            return f"it reads {member.name} at {format_dim(load.index)}, not a per-dim affine index"
        for k in range(len(outer)):
            # A loop of one iteration: its variable is 0, whatever index names it (split_index gives 0).
            if outer[k] != 1 and sympy.expand(split[k] - index_var(k)) != 0:
                return (
                    f"it reads {member.name} at {format_dim(load.index)}, outside the outer iteration "
                    f"({index_var(k)} of loops {shown}) that computes it"
                )
    # Only siblings: a consumer joining its producer's kernel (a softmax over a strided dim) keeps its
    # rows in cache, worth more than the vectorized loop.
    sibling = not any(load.buffer in names for load in loads(buffer.body.value))
    return _column_mix(members) if target == "cpp" and sibling else None


def schedule(program: LoopProgram, target: str = "cpp") -> Schedule:
    """Group the buffers of `program` into kernels (in program order) and record every decision;
    `target` ("cpp" or "triton") is the code generator the groups are for."""
    steps: list[list[Buffer]] = []
    step_of: dict[str, int] = {}
    step_reads: list[set[str]] = []
    decisions: list[FusionDecision] = []

    def decide(kind: str, producer: str, consumer: str, taken: bool, reason: str) -> None:
        decision = FusionDecision(kind, producer, consumer, taken, reason)
        decisions.append(decision)
        log_decision(decision)

    for buffer in program.buffers:
        reads = reads_of(buffer)
        producers = sorted(name for name in reads if name in step_of)
        chosen = None
        if isinstance(buffer, ComputedBuffer):
            last = max((step_of[p] for p in producers), default=-1)
            for p in producers:
                j = step_of[p]
                if j < last and isinstance(steps[j][0], ComputedBuffer):
                    later = f"it also reads {steps[last][0].name}, computed after that kernel"
                    decide("vertical", p, buffer.name, False, later)
            # The kernel computing the last producer first (vertical), then later kernels (horizontal).
            nearest = max(last, len(steps) - 1 - HORIZONTAL_WINDOW)
            candidates = ([last] if last >= 0 else []) + list(range(len(steps) - 1, nearest, -1))
            for j in candidates:
                if not isinstance(steps[j][0], ComputedBuffer):
                    continue
                inside = [p for p in producers if step_of[p] == j]
                shared = sorted(reads & step_reads[j])
                if not inside and not shared:
                    continue
                kind = "vertical" if inside else "horizontal"
                partner = inside[0] if inside else next(m.name for m in steps[j] if reads_of(m) & reads)
                reason = _cannot_join(steps[j], buffer, target)
                if reason is None:
                    joined = [*steps[j], buffer]
                    outer = min((m.body.ranges for m in joined), key=len)
                    what = f"reads {', '.join(inside)}" if inside else f"reads {', '.join(shared)} too"
                    where = f"inside the shared loops {[format_dim(d) for d in outer]}"
                    prologue = split_prologue(joined)[0] if target == "cpp" else ()
                    if prologue:
                        where = f"computing {', '.join(p.name for p in prologue)} whole before its loops"
                    if target == "cpp" and cross_parts(joined) is not None:
                        where = "in one pass over the rows (row work and column sums)"
                    if target == "triton" and row_block_parts(joined) is not None:
                        where = "in one pass over blocks of rows (row reductions and column partials)"
                    decide(kind, partner, buffer.name, True, f"{what} {where}")
                    chosen = j
                    break
                decide(kind, partner, buffer.name, False, reason)
        if chosen is None:
            steps.append([buffer])
            step_reads.append(set())
            chosen = len(steps) - 1
        else:
            steps[chosen].append(buffer)
        step_of[buffer.name] = chosen
        step_reads[chosen] |= reads
    return Schedule(tuple(tuple(step) for step in steps), tuple(decisions))
