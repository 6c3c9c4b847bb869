"""The memory plan: which intermediate buffer takes whose storage, decided at compile time.

Steps run in schedule order. A buffer is dead after the last step that reads it; its storage then
goes into a pool keyed by (dtype, element count), and a later buffer of the same key takes it instead
of a new allocation. A pointwise member that reads a buffer dying in its own step only at the very
element it writes takes that buffer's storage in place (element k is read before k is written, and
no other element is touched). Graph inputs and the storage behind any graph output are never given
away. The wrapper follows the plan: `Allocation.donor` names the buffer whose tensor it re-views.
"""

from dataclasses import dataclass

import sympy
import torch

from torchsmith.inductor.loop_ir.program import (
    Buffer,
    ComputedBuffer,
    ExternCall,
    Layout,
    LoopProgram,
    Pointwise,
    index_vars,
    loads,
)

# Extern kernels whose result tensor is new storage that later buffers may take over (an
# `extern.output` result is a second output of an earlier call and may share its memory).
_NOT_DONORS = ("extern.output",)


@dataclass(frozen=True, slots=True)
class Allocation:
    """How `buffer` gets its memory: a new tensor (`donor` None) or the storage of the dead buffer
    `donor`; `in_place` when the donor is read by the very kernel that writes `buffer`."""

    buffer: str
    donor: str | None
    in_place: bool = False

    def __str__(self) -> str:
        if self.donor is None:
            return f"{self.buffer}: new"
        return f"{self.buffer}: reuses {self.donor}{' in place' if self.in_place else ''}"


@dataclass(frozen=True, slots=True)
class MemoryPlan:
    """`allocations` of every computed buffer; `frees[k]` the buffers whose tensors the wrapper drops
    after step k (their storage is never needed again)."""

    allocations: tuple[Allocation, ...]
    frees: tuple[tuple[str, ...], ...]

    @property
    def reused(self) -> int:
        """How many allocations the plan saves."""
        return sum(a.donor is not None for a in self.allocations)

    def donor_of(self) -> dict[str, str | None]:
        return {a.buffer: a.donor for a in self.allocations}

    def __str__(self) -> str:
        return "\n".join(map(str, self.allocations))


def storage_key(layout: Layout) -> tuple[torch.dtype, sympy.Expr]:
    """Buffers of one key can share storage: same dtype, same number of storage elements."""
    extent = sympy.Integer(1)
    for d, s in zip(layout.shape, layout.strides):
        extent += (sympy.sympify(d) - 1) * s
    numel = sympy.Integer(1)
    for d in layout.shape:
        numel *= d
    # An empty buffer has no storage to share; give it a key no other buffer has.
    if numel == 0:
        return layout.dtype, sympy.Symbol("empty")
    return layout.dtype, sympy.expand(extent)


def _store_index(buffer: ComputedBuffer):
    variables = index_vars(len(buffer.layout.shape))
    return sympy.expand(sum((v * s for v, s in zip(variables, buffer.layout.strides)), sympy.Integer(0)))


def _reads(buffer: Buffer) -> set[str]:
    if isinstance(buffer, ExternCall):
        return {arg.buffer for arg in buffer.args}
    return {load.buffer for load in loads(buffer.body.value)}


def _in_place_donor(member: ComputedBuffer, step: tuple, dying: set[str], key_of) -> str | None:
    """A buffer from an earlier step, dying in this one, that `member` (pointwise) alone reads, only at
    its own store index. (A buffer written in this very kernel is not taken over: the kernel's
    pointers are `__restrict__`, and the compiler may reorder one member's stores before another
    member's loads of the same memory.)"""
    if not isinstance(member.body, Pointwise):
        return None
    store = _store_index(member)
    member_loads = loads(member.body.value)
    in_step = {b.name for b in step}
    for name in sorted({ld.buffer for ld in member_loads} & dying - in_step):
        if key_of.get(name) != key_of[member.name]:
            continue
        if any(name in _reads(other) for other in step if other is not member):
            continue
        if all(sympy.expand(ld.index - store) == 0 for ld in member_loads if ld.buffer == name):
            return name
    return None


def _extend_through_aliases(steps, last_use: dict[str, int], pinned: set[str]) -> None:
    """An `extern.output` result is a further output of an earlier call, and torch may return it as a
    view of that call's result or arguments (split, unbind): they stay alive (or pinned) as long as it."""
    calls = {b.name: b for step in steps for b in step if isinstance(b, ExternCall)}
    for k, step in enumerate(steps):
        for b in step:
            if not isinstance(b, ExternCall) or b.kernel not in _NOT_DONORS:
                continue
            first = calls.get(b.args[0].buffer)
            aliases = {b.args[0].buffer} | (_reads(first) if first is not None else set())
            end = last_use.get(b.name, k)
            for name in aliases:
                if b.name in pinned:
                    pinned.add(name)
                last_use[name] = max(last_use.get(name, k), end)


def plan_memory(
    program: LoopProgram, steps: list[tuple[Buffer, ...]], local: frozenset[str] = frozenset()
) -> MemoryPlan:
    """The plan for running `steps` (the schedule's kernel groups and extern calls) in order.
    Buffers in `local` live inside their kernel (cpp_codegen.local_buffers): no storage at all."""
    never = len(steps)  # the step after the last: outputs stay alive past it
    last_use: dict[str, int] = {}
    for k, step in enumerate(steps):
        for buffer in step:
            for name in _reads(buffer):
                last_use[name] = k
    pinned = {view.buffer for view in program.outputs} | {b.name for b in program.inputs}
    for name in pinned:
        last_use[name] = never
    _extend_through_aliases(steps, last_use, pinned)
    key_of = {
        b.name: storage_key(b.layout)
        for step in steps
        for b in step
        if b.name not in local and (isinstance(b, ComputedBuffer) or b.kernel not in _NOT_DONORS)
    }
    storage_of: dict[str, str] = {}  # buffer -> the buffer that first allocated its storage
    pool: dict[tuple, list[str]] = {}
    allocations = []
    for k, step in enumerate(steps):
        dying = {n for n, last in last_use.items() if last == k and n in key_of and n not in pinned}
        for buffer in step:
            if isinstance(buffer, ExternCall):
                storage_of[buffer.name] = buffer.name
                continue
            if buffer.name in local:
                continue
            donor = _in_place_donor(buffer, step, dying, key_of)
            if donor is not None:
                dying.discard(donor)
            else:
                free = pool.get(key_of[buffer.name])
                donor = free.pop() if free else None
            allocations.append(Allocation(buffer.name, donor, donor is not None and donor in _reads(buffer)))
            storage_of[buffer.name] = storage_of[donor] if donor is not None else buffer.name
        # Unread buffers (dead on arrival) die in their own step too.
        unread = {b.name for b in step if b.name not in last_use and b.name not in pinned}
        dying |= unread & key_of.keys()
        for name in sorted(dying):
            pool.setdefault(key_of[name], []).append(name)
    # A storage is dropped after the last step that reads any buffer holding it.
    holders: dict[str, list[str]] = {}
    for name, root in storage_of.items():
        holders.setdefault(root, []).append(name)
    frees: list[list[str]] = [[] for _ in steps]
    step_of_def = {b.name: k for k, step in enumerate(steps) for b in step}
    for names in holders.values():
        if any(n in pinned for n in names):
            continue
        end = max(last_use.get(n, step_of_def[n]) for n in names)
        frees[end].extend(names)
    return MemoryPlan(tuple(allocations), tuple(tuple(sorted(f)) for f in frees))


def describe(plan: MemoryPlan) -> str:
    """One line for logs: how many buffers reuse storage."""
    in_place = sum(a.in_place for a in plan.allocations)
    total = len(plan.allocations)
    return f"{total} buffers, {plan.reused} reuse a dead buffer's storage ({in_place} in place)"

