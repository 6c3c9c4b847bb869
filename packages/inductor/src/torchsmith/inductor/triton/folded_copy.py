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
    Expr,
    ExternCall,
    Load,
    LoopProgram,
    Pointwise,
    TensorArg,
    TensorView,
    index_vars,
    loads,
    map_indices,
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
    # The pointwise buffer computing the index, where the kernel computes it itself (a model that
    # computes the positions again in every layer, after that layer's kernel would have run).
    index_producer: ComputedBuffer | None = None

    def reads(self, members: set[str]) -> list[str]:
        """The buffers the kernel reads for this copy, besides the members' own reads."""
        if self.index_producer is None:
            index = [self.index.buffer]
        else:
            index = [ld.buffer for ld in loads(self.index_producer.body.value)]
        return index + ([self.source.buffer] if self.source.buffer not in members else [])

    def store_index(self, buffer: ComputedBuffer) -> tuple[Expr, sympy.Expr]:
        """For element (i0, i1, ...) of `buffer` (the host): its position along `dim` (the index
        tensor's element, loaded or computed), and its place in the target without that dim's term."""
        variables = index_vars(len(buffer.layout.shape))
        units = drop_unit_vars(buffer)
        index = self.index
        if self.index_producer is None:
            place = sympy.sympify(index.offset + variables[self.dim] * index.strides[0]).xreplace(units)
            position = Load(index.buffer, place, index.dtype)
        else:  # a 1-d contiguous producer read whole: its element i0 is the copy's element along dim
            bind = {index_vars(1)[0]: sympy.sympify(variables[self.dim]).xreplace(units)}
            position = map_indices(self.index_producer.body.value, lambda e: sympy.sympify(e).xreplace(bind))
        rest = sum(
            (v * s for k, (v, s) in enumerate(zip(variables, self.target.strides)) if k != self.dim),
            sympy.sympify(self.target.offset),
        )
        return position, sympy.sympify(rest).xreplace(units)

    def source_load(self, buffer: ComputedBuffer) -> Load:
        """For element (i0, i1, ...) of the host `buffer`: the load of the same element of the
        source (a carried copy)."""
        variables = index_vars(len(buffer.layout.shape))
        view = self.source
        place = sum((v * s for v, s in zip(variables, view.strides)), sympy.sympify(view.offset))
        return Load(view.buffer, sympy.sympify(place).xreplace(drop_unit_vars(buffer)), view.dtype)


def foldable_copies(program: LoopProgram, groups, in_place: dict, step_of: dict) -> list[FoldedCopy]:
    """The in-place `index_copy` calls (`in_place`: `{call name: op}`) a pointwise kernel can do,
    with static sizes: where the source is a group member that nothing else reads from memory, its
    kernel stores it into the target; other calls ride along with such a kernel over the same
    elements. The kernel runs after the index (and a carried copy's source) is computed and before
    the call (`step_of`: the runtime step computing each buffer; graph inputs have none)."""
    members = {b.name: k for k, group in enumerate(groups) for b in group}
    buffers = {b.name: b for b in program.buffers}
    outputs = {v.buffer for v in program.outputs}
    readers = _readers(program, members)
    own, others = [], []
    for call in program.buffers:
        if not (isinstance(call, ExternCall) and call.name in in_place and call.kernel == INDEX_COPY):
            continue
        fold = _fold(call)
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
            fold = _index_ready(fold, name, buffers, members, step_of)
            if fold is not None:
                own.append(fold)
        else:
            others.append(fold)
    folds = list(own)
    for fold in others:
        for host_fold in own:
            carried = _carried(host_fold, fold, buffers, members, step_of)
            if carried is not None:
                folds.append(carried)
                break
    return folds


def _carried(own: FoldedCopy, fold: FoldedCopy, buffers: dict, members: dict, step_of: dict):
    """`fold` done by the kernel of `own`'s host too, or None: it needs the same elements, its
    source computed before that kernel runs, and that kernel before `fold`'s call."""
    host = buffers[own.host]
    if tuple(host.layout.shape) != tuple(fold.source.shape) or own.dim != fold.dim:
        return None
    if not _before(fold.source.buffer, own.host, step_of) or step_of[own.host] >= step_of[fold.call]:
        return None
    return _index_ready(replace(fold, host=own.host), own.host, buffers, members, step_of)


def _index_ready(fold: FoldedCopy, host: str, buffers: dict, members: dict, step_of: dict):
    """`fold` with its index readable in `host`'s kernel: computed before it, or computed by that
    kernel itself from its producer's expression (a pointwise 1-d buffer read whole, of buffers
    computed before); None where neither holds."""
    index = fold.index
    if _before(index.buffer, host, step_of) and members.get(index.buffer) != members[host]:
        return fold
    producer = buffers.get(index.buffer)
    if not isinstance(producer, ComputedBuffer) or not isinstance(producer.body, Pointwise):
        return None
    layout = producer.layout
    if (tuple(layout.shape), tuple(layout.strides)) != (tuple(index.shape), (1,)) or index.strides != (1,):
        return None
    if index.offset != 0 or not all(_before(ld.buffer, host, step_of) for ld in loads(producer.body.value)):
        return None
    return replace(fold, index_producer=producer)


def _before(buffer: str, host: str, step_of: dict) -> bool:
    """Whether `buffer` is computed by a step before the kernel of `host` (a graph input always)."""
    return step_of.get(buffer, -1) < step_of[host]


def _fold(call: ExternCall) -> FoldedCopy | None:
    if len(call.args) != 3 or call.kwargs or len(call.params) != 4:
        return None
    first, dim, *tensors = call.params
    if not isinstance(dim, int) or (first, *tensors) != (TensorArg(0), TensorArg(1), TensorArg(2)):
        return None
    target, index, source = call.args
    rank = len(target.shape)
    if rank == 0 or len(source.shape) != rank or len(index.shape) != 1 or source.dtype != target.dtype:
        return None
    dim %= rank
    if index.dtype != torch.int64:  # what index_copy takes (its positions scale strides in int64)
        return None
    views = (target, source, index)
    if not all(sympy.sympify(d).is_Integer for v in views for d in (*v.shape, *v.strides, v.offset)):
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
