"""C++ code generation: a `LoopProgram` -> one translation unit with one `extern "C"` function per
kernel.

A kernel is a group of buffers that share one outer (pointwise) iteration space (the scheduler hands
over fused groups; by default every buffer is its own group, except a welford mean/M2 pair, which
is computed together). The loop nest is emitted once per group; inside it each buffer emits its own
body (a reduction as chunked inner loops, `cpp_reductions`), so fusing pointwise and reduction buffers
only changes the grouping, not this emitter. Element expressions print through `cpp_expr`, dtypes
through `cpp_types` (16-bit floats are stored as 16 bits and computed in float).
"""

from dataclasses import dataclass, replace

import sympy

from torchsmith.inductor.cpp import indirect as cpp_indirect
from torchsmith.inductor.cpp import vector_math
from torchsmith.inductor.cpp.build import KERNEL_MARK
from torchsmith.inductor.cpp.column_reduction import emit_column_kernel, is_column_reduction, merge_kept_dims
from torchsmith.inductor.cpp.cross_reduction import cross_parts, emit_cross_kernel
from torchsmith.inductor.cpp.dtypes import cpp_type, storage_type, store_code
from torchsmith.inductor.cpp.expr import BodyWriter, cpp_index
from torchsmith.inductor.cpp.indirect import INDIRECT_PRELUDE, uses_indirect
from torchsmith.inductor.cpp.local import kernel_locals, localize
from torchsmith.inductor.cpp.masking import masking_buffers, may_see_masked_values
from torchsmith.inductor.cpp.prelude import CPP_PRELUDE
from torchsmith.inductor.cpp.prologue import split_prologue
from torchsmith.inductor.cpp.reductions import ReductionEmitter
from torchsmith.inductor.cpp.rng import RANDOM_PRELUDE, uses_random
from torchsmith.inductor.cpp.scatter import emit_scatter_kernel
from torchsmith.inductor.errors import CodegenError
from torchsmith.inductor.loop_ir.program import (
    ComputedBuffer,
    Load,
    LoopProgram,
    Pointwise,
    Reduction,
    Scatter,
    index_vars,
    loads,
    reduction_vars,
    substitute,
)
from torchsmith.ir.codegen_text import IdentifierNamer, cpp_comment, identifier

__all__ = ["Group", "Kernel", "cpp_index", "cpp_type", "emit_kernel", "generate_cpp", "local_buffers"]

# Below this many elements of work a kernel runs on one thread: OpenMP's fork/join costs more.
PARALLEL_THRESHOLD = 32768
# A group holding a reduction with fewer outer iterations than this (statically) is threaded inside
# its members instead of across the outer loop: `x.sum()` has one outer iteration, `x.sum(0)` of a
# [4096, 8] tensor has 8, a softmax of 2 long rows has 2.
SPLIT_REDUCTION_BELOW = 64


@dataclass(frozen=True, slots=True)
class Kernel:
    """One generated function: its C name, the buffers it writes and reads (pointer order)."""

    name: str
    writes: tuple[str, ...]
    reads: tuple[str, ...]


def _work(ranges) -> sympy.Expr:
    total = sympy.Integer(1)
    for r in ranges:
        total = total * r
    return total


def _outer_ranges(group: tuple[ComputedBuffer, ...]) -> tuple:
    """The loops a group shares: the shortest member ranges, which every member's ranges extend.
    A lone pointwise buffer keeps its last dim as its own loop so that loop can be vectorized."""
    first = group[0].body
    if len(group) == 1 and isinstance(first, Pointwise) and len(first.ranges) > 1:
        return first.ranges[:-1]
    if (
        len(first.ranges) > 1
        and all(isinstance(b.body, Pointwise) for b in group)
        and all(len(b.body.ranges) == len(first.ranges) for b in group)
        and all(sympy.expand(x - y) == 0 for b in group for x, y in zip(b.body.ranges, first.ranges))
    ):
        # Pointwise siblings over equal ranges: each member keeps the last dim as its own simd loop.
        return first.ranges[:-1]
    outer = min((b.body.ranges for b in group), key=len)
    for b in group:
        prefix = b.body.ranges[: len(outer)]
        if len(prefix) != len(outer) or any(sympy.expand(x - y) != 0 for x, y in zip(prefix, outer)):
            raise CodegenError(
                f"buffer {b.name} with ranges {list(b.body.ranges)} cannot share the loops "
                f"{list(outer)} of its group {[m.name for m in group]}"
            )
    return outer


def joint_pointwise(group) -> bool:
    """Whether `group` is pointwise siblings over equal ranges: computed in one shared innermost
    (vectorized) loop, each member's value and store in one iteration, so subexpressions they share
    are computed once (gelu's value and its derivative both need `erf(x / sqrt(2))`). Members must
    not read each other: in one iteration a later element of a sibling is not stored yet."""
    first = group[0].body
    if len(group) < 2 or not first.ranges:
        return False
    names = {b.name for b in group}
    return all(
        isinstance(b.body, Pointwise)
        and len(b.body.ranges) == len(first.ranges)
        and all(sympy.expand(sympy.sympify(x) - y) == 0 for x, y in zip(b.body.ranges, first.ranges))
        and not any(ld.buffer in names for ld in loads(b.body.value))
        for b in group
    )


def _same_loops(group: tuple[ComputedBuffer, ...]) -> bool:
    """Whether `group` holds a reduction and all its members loop over the same kept dims."""
    first = group[0].body.ranges
    return any(isinstance(b.body, Reduction) for b in group) and all(
        isinstance(b.body, (Reduction, Pointwise))
        and len(b.body.ranges) == len(first)
        and all(sympy.expand(x - y) == 0 for x, y in zip(b.body.ranges, first))
        for b in group
    )


def _threads_inside(group: tuple[ComputedBuffer, ...], outer) -> bool:
    """Whether the group's members are threaded one by one (reductions split among threads,
    pointwise members across their own loops) because its outer loops are too few to thread."""
    if not any(isinstance(b.body, Reduction) for b in group):
        return False
    outer_work = sympy.sympify(_work(outer))
    return bool(outer_work.is_Integer and int(outer_work) < SPLIT_REDUCTION_BELOW)


def _work_condition(work) -> str | None:
    """The C++ `if` condition for threading `work` elements: "" (always), None (never), or a test."""
    work = sympy.sympify(work)
    if work.is_Integer:
        return "" if int(work) >= PARALLEL_THRESHOLD else None
    return f"{cpp_index(work)} >= {PARALLEL_THRESHOLD}"


def _welford_key(buffer: ComputedBuffer):
    """Buffers with equal keys compute the same reduction state (a welford mean and M2 pair)."""
    body = buffer.body
    if isinstance(body, Reduction) and body.reduction_type.startswith("welford"):
        return ("welford", body.ranges, body.reduction_ranges, body.value)
    return buffer.name


def emit_kernel(
    name: str,
    group: tuple[ComputedBuffer, ...],
    program: LoopProgram,
    local: frozenset[str] = frozenset(),
    masking: frozenset[str] | None = None,
) -> tuple[Kernel, str]:
    """`_emit_kernel`, with exp chosen for a kernel that may see masked values (vector_math.INLINE):
    one holding an infinite or huge constant (masked_fill with -inf, a -1e9 fill) or reading a buffer
    computed from one (`masking`: `cpp.masking.masking_buffers(program)`, computed when not given)."""
    if isinstance(group[0].body, Scatter):  # a scheduler group of its own (scheduler._cannot_join)
        return emit_scatter_kernel(name, group[0], program)
    if masking is None:
        masking = masking_buffers(program)
    with vector_math.masked_values(may_see_masked_values(group, masking)):
        return _emit_kernel(name, group, program, local)


def _emit_kernel(
    name: str, group: tuple[ComputedBuffer, ...], program: LoopProgram, local: frozenset[str] = frozenset()
) -> tuple[Kernel, str]:
    """The C++ function computing the buffers of `group`, in order, in one loop nest.

    The members share the outer loops (`_outer_ranges`); inside them each member loops over its
    remaining dims and, for a reduction, its reduction dims. A member reads what an earlier member
    stored in the same outer iteration straight from memory: the scheduler only groups buffers
    whose reads stay inside that iteration (softmax rows, layer-norm rows). A `welford_mean` and a
    `welford_m2` buffer of the same value and ranges in one group are computed by one reduction.
    Members named in `local` (see `local_buffers`) live in arrays of the outer iteration, not memory.
    A prologue (`cpp/prologue.py`) is computed whole first, its local members in arrays of the call.
    """
    prologue, group = split_prologue(group)
    if prologue:
        # the prologue's arrays hold whole buffers (depth 0): every member's loads of them rewritten
        everything, prologue_arrays = localize(prologue + group, local & {b.name for b in prologue}, 0)
        prologue, group = everything[: len(prologue)], everything[len(prologue) :]
    else:
        prologue_arrays = []
    cross = cross_parts(group)
    if cross is None and _same_loops(group):
        # One loop over kept dims that every read and store sees as one run (a channels-last
        # reduction over C: 25088 rows, not 8 x 56 x 56 collapsed loops).
        group = merge_kept_dims(group)
    # A cross kernel's rows and columns share no outer loop; it keeps no buffer local.
    outer = () if cross else _outer_ranges(group)
    group, arrays = localize(group, local, len(outer)) if not cross else (group, [])
    dtypes = {b.name: b.layout.dtype for b in program.buffers} | {
        i.name: i.layout.dtype for i in program.inputs
    }
    every = prologue + group
    members = {b.name for b in every}
    writes = tuple(b.name for b in every if b.name not in local)
    reads = tuple(
        dict.fromkeys(ld.buffer for b in every for ld in loads(b.body.value) if ld.buffer not in members)
    )
    # One namer per kernel: buffers whose names differ only in punctuation get different pointers.
    namer = IdentifierNamer(program.symbols)
    pointer_of = {n: namer.name(f"out_{n}") for n in writes} | {n: namer.name(f"in_{n}") for n in reads}
    pointer_of |= {n: namer.name(f"l_{n}") for n, _, _ in arrays + prologue_arrays}
    params = [f"{storage_type(dtypes[n])}* __restrict__ {pointer_of[n]}" for n in writes]
    params += [f"const {storage_type(dtypes[n])}* __restrict__ {pointer_of[n]}" for n in reads]
    params += [f"int64_t {s}" for s in program.symbols]
    lines = [f'extern "C" void {name}({", ".join(params)}) {{']
    lines += [f"  {t} {pointer_of[n]}[{size}];" for n, t, size in prologue_arrays]
    counter = [0]
    for member in prologue:  # one thread: a few thousand elements at most; a block of its own
        lines.append("  {")
        _emit_member([member], 0, pointer_of, lines, "    ", counter, inside=False)
        lines.append("  }")
    if cross:
        emit_cross_kernel(group, pointer_of, lines, _work_condition, _row_emitter(cross[0], pointer_of))
        lines.append("}")
        return Kernel(name, writes, reads), "\n".join(lines)
    if is_column_reduction(group):
        emit_column_kernel(group, pointer_of, lines, _work_condition)
        lines.append("}")
        return Kernel(name, writes, reads), "\n".join(lines)
    if joint_pointwise(group):
        _emit_joint(group, pointer_of, lines)
        lines.append("}")
        return Kernel(name, writes, reads), "\n".join(lines)
    biggest = max(group, key=lambda b: len(b.body.ranges) + len(getattr(b.body, "reduction_ranges", ())))
    total_work = _work(biggest.body.ranges) * _work(getattr(biggest.body, "reduction_ranges", ()))
    inside = _threads_inside(group, outer)
    # A lone 1-d pointwise loop is both the threaded and the vectorized loop.
    body = group[0].body
    simd_outer = len(group) == 1 and isinstance(body, Pointwise) and len(body.ranges) == len(outer) == 1
    outer_simd = (index_vars(1)[0], len(lines), "  ") if simd_outer else None
    if outer:
        pragma = None if inside else _parallel_pragma(len(outer), total_work, simd_outer)
        if pragma or simd_outer:
            lines.append(f"  {pragma or '#pragma omp simd'}")
    for depth, (v, r) in enumerate(zip(index_vars(len(outer)), outer)):
        lines.append(f"{'  ' * (depth + 1)}for (int64_t {v} = 0; {v} < {cpp_index(r)}; ++{v}) {{")
    indent = "  " * (len(outer) + 1)
    # Declared inside the outer loop body: private to the thread running that iteration.
    lines += [f"{indent}{t} {pointer_of[n]}[{size}];" for n, t, size in arrays]
    done: set = set()
    folded = _folded_producers(group, len(outer), {n for n, _, _ in arrays})
    producers = {p.name for p in folded.values()}
    for buffer in group:
        if buffer.name in producers:
            continue
        key = _welford_key(buffer)
        if key in done:
            continue
        done.add(key)
        partners = [b for b in group if _welford_key(b) == key]
        producer = folded.get(buffer.name)
        _emit_member(partners, len(outer), pointer_of, lines, indent, counter, inside, outer_simd, producer)
    for depth in reversed(range(len(outer))):
        lines.append(f"{'  ' * (depth + 1)}}}")
    lines.append("}")
    return Kernel(name, writes, reads), "\n".join(lines)


def _folded_producers(group, shared: int, local: set[str]) -> dict[str, ComputedBuffer]:
    """{reduction name: producer} for each local row producer that the next member reduces as it
    is (softmax's `exp(x - max)` then its sum): the producer's values are computed and stored
    inside the reduction's loop, one pass over the row instead of two. Only a one-dim row read at
    its own index, by a reduction with no welford partner."""
    folded: dict[str, ComputedBuffer] = {}
    for producer, reduction in zip(group, group[1:]):
        body = reduction.body
        if producer.name not in local or not isinstance(producer.body, Pointwise):
            continue
        if not isinstance(body, Reduction) or len(body.reduction_ranges) != 1 or len(body.ranges) != shared:
            continue
        if body.reduction_type.startswith("welford") or len(producer.body.ranges) != shared + 1:
            continue
        row = reduction_vars(1)[0]
        if body.value != Load(producer.name, row, producer.layout.dtype):
            continue
        if sympy.expand(sympy.sympify(producer.body.ranges[-1]) - body.reduction_ranges[0]) != 0:
            continue
        # The reduction's loop keeps explicit lanes of its value type: loads of another width (a
        # bool mask's bytes) in the same lanes leave GCC's loop scalar.
        width = producer.layout.dtype.itemsize
        if any(ld.dtype.itemsize != width for ld in loads(producer.body.value)):
            continue
        folded[reduction.name] = producer
    return folded


def _row_emitter(rows: list[ComputedBuffer], pointer_of):
    """What a cross kernel calls to write its row members' statements for one row (`i0`): each
    reduction (a welford pair once), pointwise producer and epilogue as in a row kernel's outer
    iteration. Producers that do not read each other share one vectorized loop (`joint_pointwise`),
    placed where the last of them is: only the column sums, after the row, read them."""
    producers = [b for b in rows if isinstance(b.body, Pointwise) and len(b.body.ranges) == 2]
    joint = len(producers) > 1 and joint_pointwise(producers)

    def emit(lines: list[str], indent: str, counter) -> None:
        done: set = set()
        for buffer in rows:
            if joint and buffer in producers:
                if buffer is producers[-1]:
                    _emit_joint_row(producers, pointer_of, lines, indent, counter)
                continue
            key = _welford_key(buffer)
            if key in done:
                continue
            done.add(key)
            partners = [b for b in rows if _welford_key(b) == key]
            _emit_member(partners, 1, pointer_of, lines, indent, counter, False)

    return emit


def _emit_joint_row(group, pointer_of, lines: list[str], indent: str, counter) -> None:
    """One row (`i0`) of pointwise siblings over [N, C]: one simd loop over `i1` computing all."""
    v, size = index_vars(2)[1], group[0].body.ranges[1]
    at = len(lines)
    lines.append(f"{indent}#pragma omp simd")
    lines.append(f"{indent}for (int64_t {v} = 0; {v} < {cpp_index(size)}; ++{v}) {{")
    hoisted: list[str] = []
    writer = BodyWriter(pointer_of, lines, indent + "  ", counter, v, hoisted, indent)
    values = [writer.value(b.body.value) for b in group]
    for b, value in zip(group, values):
        lines.append(f"{indent}  {_store_target(b, pointer_of)} = {store_code(value, b.layout.dtype)};")
    lines.append(f"{indent}}}")
    lines[at:at] = hoisted


def _emit_joint(group: tuple[ComputedBuffer, ...], pointer_of, lines: list[str]) -> None:
    """The loop nest of pointwise siblings (`joint_pointwise`): outer loops threaded, the last dim the
    vectorized loop, and in its body one writer for all members (shared subexpressions once)."""
    ranges = group[0].body.ranges
    variables = index_vars(len(ranges))
    outer = ranges[:-1]
    # A 1-d nest: its one loop is both the threaded and the vectorized loop.
    pragma = _parallel_pragma(len(outer), _work(ranges), simd=not outer)
    if pragma and outer:
        lines.append(f"  {pragma}")
    for depth, (v, r) in enumerate(zip(variables, ranges)):
        loop_indent = "  " * (depth + 1)
        if depth == len(ranges) - 1:
            # Values that do not change along the vectorized loop go before its pragma.
            at, hoisted_indent = len(lines), loop_indent
            lines.append(f"{loop_indent}{pragma if pragma and not outer else '#pragma omp simd'}")
        lines.append(f"{loop_indent}for (int64_t {v} = 0; {v} < {cpp_index(r)}; ++{v}) {{")
    indent = "  " * (len(ranges) + 1)
    origins = " + ".join(dict.fromkeys(b.origin or b.name for b in group))
    lines.append(f"{indent}// {_comment(origins)}")
    hoisted: list[str] = []
    writer = BodyWriter(pointer_of, lines, indent, [0], variables[-1], hoisted, hoisted_indent)
    values = [writer.value(b.body.value) for b in group]
    for b, value in zip(group, values):
        lines.append(f"{indent}{_store_target(b, pointer_of)} = {store_code(value, b.layout.dtype)};")
    lines[at:at] = hoisted
    for depth in reversed(range(len(ranges))):
        lines.append(f"{'  ' * (depth + 1)}}}")


def _parallel_pragma(depth: int, work, simd: bool) -> str | None:
    """The OpenMP pragma threading the `depth` outer loops, or None when the work is too small."""
    head = "#pragma omp parallel for" + (" simd" if simd else "")
    head += f" collapse({depth})" if depth > 1 else ""
    work = sympy.sympify(work)
    if work.is_Integer:
        return head if int(work) >= PARALLEL_THRESHOLD else None
    return f"{head} if({cpp_index(work)} >= {PARALLEL_THRESHOLD})"


def _store_target(buffer: ComputedBuffer, pointer_of) -> str:
    layout = buffer.layout
    store = sum((v * s for v, s in zip(index_vars(len(layout.shape)), layout.strides)), sympy.Integer(0))
    return f"{pointer_of[buffer.name]}[{cpp_index(store)}]"


def _emit_member(
    buffers: list[ComputedBuffer],
    shared: int,
    pointer_of,
    lines: list[str],
    indent: str,
    counter,
    inside: bool,
    outer_simd: tuple | None = None,
    producer: ComputedBuffer | None = None,
) -> None:
    """One buffer's loops beyond the `shared` outer ones, its body and its store (several buffers
    only for a welford pair, which share body and ranges). `inside`: thread this member itself.
    `outer_simd`: (loop var, line position, indent) of the kernel's outer loop when that loop is
    the vectorized one (a lone 1-d pointwise buffer)."""
    buffer = buffers[0]
    body = buffer.body
    origins = " + ".join(dict.fromkeys(b.origin or b.name for b in buffers))
    lines.append(f"{indent}// {_comment(origins)}")
    extra = list(zip(index_vars(len(body.ranges)), body.ranges))[shared:]
    work = _work(r for _, r in extra) * _work(getattr(body, "reduction_ranges", ()))
    threaded = _work_condition(work) if inside else None
    header_at = None
    for depth, (v, r) in enumerate(extra):
        simd = isinstance(body, Pointwise) and depth == len(extra) - 1
        if depth == len(extra) - 1:
            header_at = len(lines)
        if depth == 0 and threaded is not None:
            condition = f" if({threaded})" if threaded else ""
            lines.append(f"{indent}#pragma omp parallel for{' simd' if simd else ''}{condition}")
        elif simd:
            # Iterations are independent and buffers never alias: let the compiler vectorize.
            lines.append(f"{indent}{'  ' * depth}#pragma omp simd")
        lines.append(f"{indent}{'  ' * depth}for (int64_t {v} = 0; {v} < {cpp_index(r)}; ++{v}) {{")
    inner_indent = indent + "  " * len(extra)
    if isinstance(body, Pointwise):
        # Hoist what the innermost loop does not change to just before that loop's header.
        if extra:
            inner_var, at, at_indent = extra[-1][0], header_at, indent + "  " * (len(extra) - 1)
        else:
            inner_var, at, at_indent = outer_simd if outer_simd else (None, None, "")
        # No loop of its own and not the vectorized outer loop: nothing to hoist out of.
        hoisted: list[str] | None = [] if at is not None else None
        writer = BodyWriter(pointer_of, lines, inner_indent, counter, inner_var, hoisted, at_indent)
        value = writer.value(body.value)
        if hoisted:
            lines[at:at] = hoisted
        lines.append(
            f"{inner_indent}{_store_target(buffer, pointer_of)} = {store_code(value, buffer.layout.dtype)};"
        )
    else:
        stores = [(b.body.reduction_type, _store_target(b, pointer_of), b.layout.dtype) for b in buffers]
        side_store = None
        if producer is not None:  # the producer's row, computed and stored in this loop
            last, row = index_vars(shared + 1)[-1], reduction_vars(1)[0]
            body = replace(body, value=substitute(producer.body.value, {last: row}))
            target = _store_target(producer, pointer_of).replace(f"[{last}]", f"[{row}]")
            side_store = (target, producer.layout.dtype)
        emitter = ReductionEmitter(body, pointer_of, lines, counter, side_store)
        emitter.emit(inner_indent, stores, threaded if not extra else None)
    for depth in reversed(range(len(extra))):
        lines.append(f"{indent}{'  ' * depth}}}")


Group = tuple[ComputedBuffer, ...]


def default_groups(program: LoopProgram) -> list[Group]:
    """One group per computed buffer, except that a welford mean/M2 pair shares one group."""
    groups: list[list[ComputedBuffer]] = []
    pair_of: dict = {}
    for b in program.buffers:
        if not isinstance(b, ComputedBuffer):
            continue
        key = _welford_key(b)
        if key != b.name and key in pair_of:
            pair_of[key].append(b)
            continue
        groups.append([b])
        pair_of[key] = groups[-1]
    return [tuple(g) for g in groups]


def local_buffers(program: LoopProgram, groups: list[Group]) -> frozenset[str]:
    """The buffers of `groups` that their kernel keeps in arrays of its outer iteration instead of
    memory (cpp_local): softmax's row max, exp values and sum. The memory plan gives them no storage."""

    def layout_of(group):
        prologue, main = split_prologue(group)
        # Members threaded one by one (few outer iterations) share the iteration's arrays: still fine.
        if len(main) < 2 or is_column_reduction(main) or cross_parts(main) is not None:
            return len(prologue), None
        return len(prologue), _outer_ranges(main)

    return kernel_locals(program, groups, layout_of)


def generate_cpp(
    program: LoopProgram, groups: list[Group] | None = None, local: frozenset[str] = frozenset()
) -> tuple[str, list[tuple[Kernel, Group]]]:
    """The translation unit of `program`: one kernel per group of computed buffers (default:
    `default_groups`; the scheduler passes fused groups), returned with each kernel and its group.
    Buffers in `local` (from `local_buffers`) stay inside their kernel: no pointer, no storage."""
    if groups is None:
        groups = default_groups(program)
    parts = [
        f"// torchsmith inductor: graph {_comment(program.name)}",
        CPP_PRELUDE,
        INDIRECT_PRELUDE if uses_indirect(program) else "",
        RANDOM_PRELUDE if uses_random(program) else "",
        vector_math.declarations(),
    ]
    # Kernels share nothing but the head, so the builder may compile them in parts; not when the
    # indirect-load prelude is in the head, unless it declares itself safe to repeat in every part
    # (`cpp_indirect.SPLIT_SAFE`: one error record per library, an extern "C" defined once).
    split_safe = not uses_indirect(program) or getattr(cpp_indirect, "SPLIT_SAFE", False)
    mark = KERNEL_MARK + "\n" if split_safe else ""
    kernels = []
    masking = masking_buffers(program)
    for k, group in enumerate(groups):
        # named after the first member of its loops (a prologue computes only inputs to them)
        name = f"kernel{k}_{identifier(split_prologue(group)[1][0].name)}"
        kernel, code = emit_kernel(name, tuple(group), program, local, masking)
        parts.append(mark + code)
        kernels.append((kernel, tuple(group)))
    return "\n\n".join(parts) + "\n", kernels


def _comment(text: str) -> str:
    """User text for a C++ comment. `@` is escaped too: the builder splits a unit at the marker
    comment `KERNEL_MARK`, which no origin may spell."""
    return cpp_comment(text).replace("@", "\\x40")
