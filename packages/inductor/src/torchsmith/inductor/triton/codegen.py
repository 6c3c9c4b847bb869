"""Triton code generation: a `LoopProgram` and its groups of buffers -> one Python module holding
one `@triton.jit` kernel per group, plus the description the runtime launches each kernel by.

Groups are the scheduler's fusion decisions, as for the C++ backend (default: one buffer per
group). A pointwise group becomes a pointwise kernel (triton_pointwise), a group with a reduction a
row kernel (triton_reduction). A member is stored only when something outside its kernel reads it
(another kernel, an extern call, a graph output); the rest live in registers.
"""

import hashlib
import logging
from dataclasses import replace

from torchsmith.inductor.errors import CodegenError
from torchsmith.inductor.loop_ir.program import ComputedBuffer, ExternCall, LoopProgram, Reduction, loads
from torchsmith.inductor.runtime.triton_launch import interpreting
from torchsmith.inductor.triton.combine import COMBINE_PRELUDE
from torchsmith.inductor.triton.ops import REAL_LIBDEVICE, TRITON_PRELUDE
from torchsmith.inductor.triton.pointwise import emit_pointwise
from torchsmith.inductor.triton.reduction import emit_reduction
from torchsmith.inductor.triton.writer import TritonKernelSpec
from torchsmith.ir.codegen_text import identifier, python_comment

Group = tuple[ComputedBuffer, ...]
split_log = logging.getLogger("torchsmith.inductor.fusion")


def stored_buffers(program: LoopProgram, groups: list[Group]) -> set[str]:
    """Buffers that must reach memory: read by another group or an extern call, or returned."""
    group_of = {b.name: k for k, group in enumerate(groups) for b in group}
    needed = {v.buffer for v in program.outputs}
    for buffer in program.buffers:
        if isinstance(buffer, ExternCall):
            needed |= {a.buffer for a in buffer.args}
            continue
        for ld in loads(buffer.body.value):
            if group_of.get(ld.buffer) != group_of.get(buffer.name):
                needed.add(ld.buffer)
    return needed


def generate_triton(program: LoopProgram, groups: list[Group] | None = None) -> tuple[str, list]:
    """The module source of `program`'s kernels and `[(TritonKernelSpec, group), ...]`, in group order.

    >>> source, kernels = generate_triton(lower(prims_graph))   # doctest: +SKIP
    """
    if groups is None:
        groups = [(b,) for b in program.buffers if isinstance(b, ComputedBuffer)]
    groups = fit_groups(program, groups)
    stored = stored_buffers(program, groups)
    head = f"# torchsmith inductor: Triton kernels of graph {python_comment(program.name)}"
    module = _Module(head)
    kernels: list[tuple[TritonKernelSpec, Group]] = []
    for k, group in enumerate(groups):
        group = tuple(group)
        name = f"kernel{k}_{identifier(group[0].name)}"
        try:
            spec, code = _emitter(group)(name, group, program, stored)
        except CodegenError as error:
            raise CodegenError(f"graph {program.name}, kernel {name}: {error}") from None
        kernels.append((module.add(spec, code, group), group))
    return module.source(), kernels


def generate_folded(program: LoopProgram, groups: list[Group], folds: list) -> tuple[str, dict]:
    """The module source of the kernels of the groups computing the sources of `folds`
    (triton.folded_copy), each storing its source into the fold's target, and `{group index: spec}`.
    A group one such kernel cannot compute (a tiled one) is left out."""
    stored = stored_buffers(program, groups) - {f.host for f in folds if f.source.buffer == f.host}
    group_of = {b.name: k for k, group in enumerate(groups) for b in group}
    by_group: dict[int, dict] = {}
    for fold in folds:
        by_group.setdefault(group_of[fold.host], {}).setdefault(fold.host, []).append(fold)
    head = f"# torchsmith inductor: Triton kernels of graph {python_comment(program.name)} with folded copies"
    module = _Module(head)
    specs = {}
    for k, redirects in by_group.items():
        group = tuple(groups[k])
        name = f"kernel{k}_{identifier(group[0].name)}_folded"
        try:
            spec, code = emit_pointwise(name, group, program, stored, redirects)
        except CodegenError as error:
            split_log.info("group %s keeps its copies as library calls: %s", [b.name for b in group], error)
            continue
        specs[k] = module.add(spec, code, group)
    return module.source(), specs


class _Module:
    """A generated module's parts. A transformer's layers make the same kernels again (same code but
    for the origin comments): each distinct kernel is written, compiled and tuned once, and launched
    for every group."""

    def __init__(self, head: str):
        prelude = TRITON_PRELUDE
        if interpreting():
            # The interpreter has no libdevice: NumPy stands in (triton_interpret); GPUs use the real one.
            prelude = prelude.replace(
                REAL_LIBDEVICE, "from torchsmith.inductor.triton.interpret import libdevice"
            )
        self.parts = [head, prelude + COMBINE_PRELUDE]
        self.first_with: dict[str, str] = {}

    def add(self, spec: TritonKernelSpec, code: str, group: Group) -> TritonKernelSpec:
        """Add kernel `spec.name` of `code`, or point it at the same code added before; its spec."""
        name = spec.name
        same = _without_comments(code.replace(f"def {name}(", "def kernel(", 1))
        first = self.first_with.setdefault(same, name)
        if first == name:
            self.parts.append(code)
            return spec
        origins = ", ".join(f"%{b.name}" for b in group)
        self.parts.append(f"# {name} ({python_comment(origins)}): the code of {first}")
        return replace(spec, name=first)

    def source(self) -> str:
        return "\n\n\n".join(self.parts) + "\n"


def _without_comments(code: str) -> str:
    return "\n".join(line for line in code.splitlines() if not line.lstrip().startswith("#"))


def _emitter(group: Group):
    return emit_reduction if any(isinstance(b.body, Reduction) for b in group) else emit_pointwise


def fit_groups(program: LoopProgram, groups: list[Group]) -> list[Group]:
    """`groups` with each group one Triton kernel cannot compute split into single buffers (the
    scheduler groups for the C++ emitter, which may read a member back from memory; a Triton lane
    cannot read what another lane stored). Each split is logged with its reason."""
    everything = {b.name for b in program.buffers}
    fitted = []
    for group in groups:
        group = tuple(group)
        if len(group) > 1:
            try:
                _emitter(group)("probe", group, program, everything)
            except CodegenError as error:
                split_log.info("group %s runs as %d kernels: %s", [b.name for b in group], len(group), error)
                fitted += [(b,) for b in group]
                continue
        fitted.append(group)
    return fitted


def source_hash(source: str) -> str:
    return hashlib.sha256(source.encode()).hexdigest()[:24]
