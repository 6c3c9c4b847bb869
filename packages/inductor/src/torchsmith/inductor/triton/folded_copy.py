"""KV-cache writes folded into the kernel computing what they write.

A decode step updates each layer's key cache with `cache.index_copy_(2, pos, k)`, where `k` is the
rotary embedding's result, computed by a pointwise kernel. Run in place (`loop_ir.in_place`), the
update is still a library call of its own after that kernel: a launch per layer and step, and `k`
written to memory and read back. Where the graph's caller copies the call's result back into the
cache (the functionalized update) and nothing else reads `k`, the kernel computing `k` can store
each element straight into the cache, at the position `pos` names along the copied dim: the call
becomes an alias of the cache (`("alias", call, cache)` in the runtime's steps). The value
cache's update, whose source comes straight from a library matmul, rides along in the same kernel
(the same elements): it loads the values and stores them at the same positions.

`foldable_copies` finds those calls; `emit_pointwise(..., redirects=...)` writes the kernels.
"""

from dataclasses import dataclass, replace

import sympy
import torch

from torchsmith.inductor.loop_ir.program import (
    ComputedBuffer,
    ExternCall,
    Load,
    LoopProgram,
    Pointwise,
    TensorArg,
    TensorView,
    index_vars,
    loads,
)
from torchsmith.inductor.triton.group import drop_unit_vars

INDEX_COPY = "aten.index_copy.default"


@dataclass(frozen=True)
class FoldedCopy:
    """`call = index_copy(target, dim, index, source)` done by the kernel computing group member
    `host`: `host` itself is the source, or (a copy carried along) a member over the same elements
    whose kernel runs after the source is computed, and loads it."""

    call: str
    host: str
    source: TensorView
    target: TensorView
    dim: int
    index: TensorView

    def store_index(self, buffer: ComputedBuffer) -> tuple[Load, sympy.Expr]:
        """For element (i0, i1, ...) of `buffer` (the host): the load of its position along `dim`
        from the index tensor, and its place in the target without that dim's term."""
        variables = index_vars(len(buffer.layout.shape))
        units = drop_unit_vars(buffer)
        index = self.index
        position = sympy.sympify(index.offset + variables[self.dim] * index.strides[0]).xreplace(units)
        rest = sum(
            (v * s for k, (v, s) in enumerate(zip(variables, self.target.strides)) if k != self.dim),
            sympy.sympify(self.target.offset),
        )
        return Load(index.buffer, position, index.dtype), sympy.sympify(rest).xreplace(units)

    def source_load(self, buffer: ComputedBuffer) -> Load:
        """For element (i0, i1, ...) of the host `buffer`: the load of the same element of the
        source (a carried copy)."""
        variables = index_vars(len(buffer.layout.shape))
        view = self.source
        place = sum((v * s for v, s in zip(variables, view.strides)), sympy.sympify(view.offset))
        return Load(view.buffer, sympy.sympify(place).xreplace(drop_unit_vars(buffer)), view.dtype)


def foldable_copies(program: LoopProgram, groups, in_place: dict, step_of: dict) -> list[FoldedCopy]:
    """The in-place `index_copy` calls (`in_place`: `{call name: op}`) a pointwise kernel can do,
    with static sizes and a graph input as the index: where the source is a group member that
    nothing else reads from memory, its kernel stores it into the target; other calls ride along
    with such a kernel over the same elements that runs after their source is computed and before
    the call (`step_of`: the runtime step computing each buffer)."""
    members = {b.name: k for k, group in enumerate(groups) for b in group}
    buffers = {b.name: b for b in program.buffers}
    inputs = {b.name for b in program.inputs}
    outputs = {v.buffer for v in program.outputs}
    readers = _readers(program, members)
    own, others = [], []
    for call in program.buffers:
        if not (isinstance(call, ExternCall) and call.name in in_place and call.kernel == INDEX_COPY):
            continue
        fold = _fold(call, inputs)
        if fold is None:
            continue
        name = fold.source.buffer
        producer = buffers.get(name)
        whole = isinstance(producer, ComputedBuffer) and (
            (fold.source.shape, fold.source.strides, fold.source.offset)
            == (producer.layout.shape, producer.layout.strides, 0)
        )
        if (
            whole
            and name in members
            and name not in outputs
            and readers.get(name, set()) == {call.name}
            and all(isinstance(b.body, Pointwise) for b in groups[members[name]])
        ):
            own.append(fold)
        else:
            others.append(fold)
    folds = list(own)
    for fold in others:
        host = next((f.host for f in own if _carries(f, fold, buffers, step_of)), None)
        if host is not None:
            folds.append(replace(fold, host=host))
    return folds


def _carries(own: FoldedCopy, fold: FoldedCopy, buffers: dict, step_of: dict) -> bool:
    """Whether the kernel of `own`'s host can do `fold` too: the same elements, its source computed
    before that kernel runs, and that kernel before `fold`'s call."""
    host = buffers[own.host]
    if tuple(host.layout.shape) != tuple(fold.source.shape) or own.dim != fold.dim:
        return False
    kernel = step_of[own.host]
    return step_of.get(fold.source.buffer, -1) < kernel < step_of[fold.call]


def _fold(call: ExternCall, inputs: set) -> FoldedCopy | None:
    if len(call.args) != 3 or call.kwargs or len(call.params) != 4:
        return None
    first, dim, index_arg, source_arg = call.params
    if (first, index_arg, source_arg) != (TensorArg(0), TensorArg(1), TensorArg(2)) or not isinstance(
        dim, int
    ):
        return None
    target, index, source = call.args
    rank = len(target.shape)
    if rank == 0 or len(source.shape) != rank or len(index.shape) != 1 or source.dtype != target.dtype:
        return None
    dim %= rank
    if index.buffer not in inputs or index.dtype not in (torch.int64, torch.int32):
        return None
    dims = (
        *target.shape,
        *target.strides,
        target.offset,
        *source.shape,
        *source.strides,
        source.offset,
        *index.shape,
        *index.strides,
        index.offset,
    )
    if not all(sympy.sympify(d).is_Integer for d in dims):
        return None
    if any(k != dim and a != b for k, (a, b) in enumerate(zip(target.shape, source.shape))):
        return None
    if source.shape[dim] != index.shape[0]:
        return None
    return FoldedCopy(call.name, source.buffer, source, target, dim, index)


def _readers(program: LoopProgram, members: dict) -> dict[str, set[str]]:
    """Per buffer, the names of the extern calls and of the kernel buffers of other groups that
    read it (a member of its own group reads it in registers)."""
    out: dict[str, set[str]] = {}
    for b in program.buffers:
        if isinstance(b, ExternCall):
            for view in b.args:
                out.setdefault(view.buffer, set()).add(b.name)
        elif isinstance(b, ComputedBuffer):
            for ld in loads(b.body.value):
                if members.get(ld.buffer) != members.get(b.name):
                    out.setdefault(ld.buffer, set()).add(b.name)
    return out
