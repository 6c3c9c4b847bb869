"""C++ for reductions over a non-innermost dim (`x.sum(0)`, `x.amax(0)`, `x.var(0)`, `x.argmax(0)` of a
row-major [N, C] tensor; batch-norm statistics of a channels-last tensor): vectorized across the kept
dim instead of along the reduced one.

Reduced naively, each output element walks a column with stride C: no vectors, a cache miss per
element.

Here the kept innermost dim is cut into blocks of about `BLOCK` columns; for each block, the rows are
read in order, `ROWS` at a time, and one `#pragma omp simd` loop updates the block's per-column states
with them, for every reduction of the group at once (sibling reductions over the same ranges,
layer-norm backward's two column sums or a max beside a variance, share the row loop and read the
input once). Wide blocks and several rows per step keep many reads in flight: each row of a block
starts a new page, which the hardware prefetcher does not follow. Threads take blocks (and the other
kept dims). Per-column states, by reduction type:

- sum: float partials over `CHUNK` rows, added into double accumulators (the two-level summation of
  `reductions.py`);
- max, min: a running value that takes a nan and keeps it (eager propagates nan);
- argmax, argmin: a running value and the first index reaching it, a nan winning at its first index;
- welford mean and M2 (one state for the pair): per `CHUNK` rows, the chunk's mean from a float sum,
  then a second pass over the same rows (still in cache) summing deviations and squared deviations
  from it, merged into double (mean, M2) with Chan's formula, as the row reduction does.
"""

import logging
from dataclasses import replace

import sympy
import torch

from torchsmith.inductor.cpp.dtypes import cpp_limit, cpp_type, store_code, type_size
from torchsmith.inductor.cpp.expr import BodyWriter, cpp_index
from torchsmith.inductor.loop_ir.index_math import index_expressions, reads_as_one_run
from torchsmith.inductor.loop_ir.program import (
    ComputedBuffer,
    Layout,
    Pointwise,
    Reduction,
    index_var,
    index_vars,
    loads,
    map_indices,
    reduction_vars,
    substitute,
)

# What the code generator did with a group, beside the scheduler's fusion decisions.
fusion_log = logging.getLogger("torchsmith.inductor.fusion")

# Wide blocks: each row of a block is one run of reads that the hardware prefetcher follows, and a
# new page starts at every row (a block of 256 columns read 1 KB per page, and 1000x1531 float
# column sums ran at two thirds of the copy bandwidth).
BLOCK = 2048
DYNAMIC_BLOCK = 256  # columns per block when their number is a symbol
# The block's per-column states (on the stack, one set per thread) stay within this many bytes:
# kernels with many or wide states get narrower blocks.
STATE_BYTES = 256 * 1024
# Block widths are multiples of this (one AVX-512 vector); with few columns and nothing else to
# thread over, blocks narrow down to it on several threads so that `MIN_BLOCKS` blocks are shared.
NARROW_BLOCK = 16
MIN_BLOCKS = 2
ROWS = 4  # rows per step of the row loop
CHUNK = 128  # rows per float partial: short enough that the float sums stay within eager's error
# Below this many columns the lanes would mostly idle: the strided reduction (split among threads) wins.
MIN_COLUMNS = 16
COLUMN_KINDS = ("sum", "max", "min", "argmax", "argmin", "welford_mean", "welford_m2")


def _stride(index, var) -> sympy.Expr:
    return sympy.expand(sympy.sympify(index)).coeff(var)


def _same(xs, ys) -> bool:
    return len(xs) == len(ys) and all(sympy.expand(x - y) == 0 for x, y in zip(xs, ys))


def _value_fits(kind: str, dtype: torch.dtype) -> bool:
    if kind in ("sum", "welford_mean", "welford_m2"):
        return dtype.is_floating_point
    return dtype != torch.bool and not dtype.is_complex


def _run_columns(body: Reduction):
    """The number of columns `body`'s reads see as one run: its last kept dim times the kept dims
    before it that continue that run (what `merge_kept_dims` makes one)."""
    indices = index_expressions(body.value) or []
    columns, k = body.ranges[-1], len(body.ranges) - 1
    while k >= 1 and indices and reads_as_one_run(indices, index_var(k - 1), index_var(k), body.ranges[k]):
        columns, k = columns * body.ranges[k - 1], k - 1
    return columns


def column_like(body) -> bool:
    """Whether a reduction body reads along its last kept dim contiguously and along its innermost
    reduced dim with a stride: blocking over the kept dim vectorizes it (`x.sum(0)` of a row-major x)."""
    if not isinstance(body, Reduction) or body.reduction_type not in COLUMN_KINDS:
        return False
    if not body.ranges or not body.reduction_ranges or not _value_fits(body.reduction_type, body.value.dtype):
        return False
    columns = sympy.sympify(_run_columns(body))
    if columns.is_Integer and int(columns) < MIN_COLUMNS:
        return False
    i_last, r_last = index_var(len(body.ranges) - 1), reduction_vars(len(body.reduction_ranges))[-1]
    indices = [ld.index for ld in loads(body.value)]
    if not indices or any(
        s.name[:1] not in ("i", "r", "s") for index in indices for s in sympy.sympify(index).free_symbols
    ):
        return False  # indirect loads bind their own variables: keep the general path
    return any(_stride(i, i_last) == 1 for i in indices) and all(_stride(i, r_last) != 1 for i in indices)


def _split_group(group) -> tuple[list[ComputedBuffer], list[ComputedBuffer]]:
    """The reductions of `group` and its pointwise members, each in group order."""
    reductions = [b for b in group if isinstance(b.body, Reduction)]
    return reductions, [b for b in group if not isinstance(b.body, Reduction)]


def is_column_reduction(group: tuple[ComputedBuffer, ...]) -> bool:
    """Whether `group` is column-like reductions (`column_like`) over the same ranges, reading nothing
    the group computes, plus pointwise epilogues over those ranges (`sum / n` of a mean, a variance
    from M2, a dtype conversion), which run after all the reductions."""
    reductions, epilogues = _split_group(group)
    if not reductions or not all(column_like(b.body) for b in reductions):
        return False
    first = reductions[0].body
    if not all(_same(b.body.ranges, first.ranges) and _same(b.body.reduction_ranges, first.reduction_ranges)
               for b in reductions):  # fmt: skip
        return False
    members = {b.name for b in group}
    if any(ld.buffer in members for b in reductions for ld in loads(b.body.value)):
        return False
    return all(isinstance(m.body, Pointwise) and _same(m.body.ranges, first.ranges) for m in epilogues)


class _State:
    """The per-column state of one reduction (or one welford mean/M2 pair) of a column kernel."""

    def __init__(self, k: int, members: list[ComputedBuffer], block: int):
        self.k, self.members, self.block = k, members, block
        body = members[0].body
        self.body, self.value_dtype = body, body.value.dtype
        kind = body.reduction_type
        self.kind = "welford" if kind.startswith("welford") else kind
        self.vt = cpp_type(self.value_dtype)
        out = cpp_type(members[0].layout.dtype)
        self.acc_t = "double" if self.kind == "sum" and out == "float" else out

    def bytes_per_column(self) -> int:
        """The bytes of the state's arrays (`declare`, `chunk_start`, welford's `merge`) per column."""
        v, acc = type_size(self.vt), type_size(self.acc_t)
        sizes = {"sum": acc + v, "max": v, "min": v, "argmax": v + 8, "argmin": v + 8}
        return sizes.get(self.kind, 16 + 4 * v)  # welford: mean, M2; sum, cm, q, e

    def declare(self, ind: str) -> list[str]:
        k, b = self.k, self.block
        if self.kind == "sum":
            return [
                f"{ind}{self.acc_t} acc{k}[{b}];",
                f"{ind}for (int64_t jj = 0; jj < {b}; ++jj) acc{k}[jj] = 0;",
            ]
        if self.kind in ("max", "min"):
            init = cpp_limit(self.value_dtype, "lowest" if self.kind == "max" else "max")
            return [
                f"{ind}{self.vt} acc{k}[{b}];",
                f"{ind}for (int64_t jj = 0; jj < {b}; ++jj) acc{k}[jj] = {init};",
            ]
        if self.kind in ("argmax", "argmin"):
            init = cpp_limit(self.value_dtype, "lowest" if self.kind == "argmax" else "max")
            return [
                f"{ind}{self.vt} best{k}[{b}];",
                f"{ind}int64_t idx{k}[{b}];",
                f"{ind}for (int64_t jj = 0; jj < {b}; ++jj) {{ best{k}[jj] = {init}; idx{k}[jj] = 0; }}",
            ]
        return [
            f"{ind}double n{k} = 0;",
            f"{ind}double mean{k}[{b}], m2_{k}[{b}];",
            f"{ind}for (int64_t jj = 0; jj < {b}; ++jj) {{ mean{k}[jj] = 0; m2_{k}[jj] = 0; }}",
        ]

    def chunk_start(self, ind: str) -> list[str]:
        k, b = self.k, self.block
        if self.kind == "sum":
            return [
                f"{ind}{self.vt} part{k}[{b}];",
                f"{ind}for (int64_t jj = 0; jj < {b}; ++jj) part{k}[jj] = 0;",
            ]
        if self.kind == "welford":
            return [
                f"{ind}{self.vt} ws{k}[{b}];",
                f"{ind}for (int64_t jj = 0; jj < {b}; ++jj) ws{k}[jj] = 0;",
            ]
        return []

    def update(self, value: str, row_index: str) -> str:
        """The statement folding element `value` (of reduced position `row_index`) into column jj."""
        k, floating = self.k, self.value_dtype.is_floating_point
        if self.kind == "sum":
            return f"part{k}[jj] += {value};"
        if self.kind == "welford":
            return f"ws{k}[jj] += {value};"
        if self.kind in ("max", "min"):
            cmp = ">" if self.kind == "max" else "<"
            take = f"{value} {cmp} acc{k}[jj]" + (f" || {value} != {value}" if floating else "")
            return f"acc{k}[jj] = ({take}) ? {value} : acc{k}[jj];"
        cmp = ">" if self.kind == "argmax" else "<"
        # Positions arrive in increasing order: a strict comparison keeps the first on ties, and a nan
        # replaces anything but an earlier nan.
        better = f"{value} {cmp} best{k}[jj]" + (
            f" || ({value} != {value} && best{k}[jj] == best{k}[jj])" if floating else ""
        )
        return (
            f"{{ const bool take = {better}; best{k}[jj] = take ? {value} : best{k}[jj]; "
            f"idx{k}[jj] = take ? {row_index} : idx{k}[jj]; }}"
        )

    def chunk_end(self, ind: str, count: str) -> list[str]:
        """After a chunk of `count` rows: fold float partials into the state (sum; welford's first
        pass ends here, its second pass is `deviation_update`)."""
        k = self.k
        if self.kind == "sum":
            return [f"{ind}for (int64_t jj = 0; jj < jn; ++jj) acc{k}[jj] += part{k}[jj];"]
        if self.kind == "welford":
            t = self.vt
            return [
                f"{ind}const {t} cnt{k} = static_cast<{t}>({count});",
                f"{ind}{t} cm{k}[{self.block}], q{k}[{self.block}], e{k}[{self.block}];",
                f"{ind}for (int64_t jj = 0; jj < jn; ++jj) {{ cm{k}[jj] = ws{k}[jj] / cnt{k}; "
                f"q{k}[jj] = 0; e{k}[jj] = 0; }}",
            ]
        return []

    def update_rows(self, values: list[str], row_indices: list[str]) -> str:
        """The statements folding the elements of consecutive rows `values` into column jj: sums add
        them pairwise first (one partial update per `ROWS` rows), the others fold them in row order."""
        k = self.k
        if self.kind in ("sum", "welford") and len(values) == 4:
            target = f"part{k}" if self.kind == "sum" else f"ws{k}"
            return f"{target}[jj] += ({values[0]} + {values[1]}) + ({values[2]} + {values[3]});"
        return " ".join(self.update(v, i) for v, i in zip(values, row_indices))

    def deviation_update(self, value: str) -> str:
        k = self.k
        return f"{{ const {self.vt} d = {value} - cm{k}[jj]; q{k}[jj] += d * d; e{k}[jj] += d; }}"

    def deviation_rows(self, values: list[str], row_indices: list[str]) -> str:
        return " ".join(self.deviation_update(v) for v in values)

    def merge(self, ind: str) -> list[str]:
        """Chan's merge of a chunk's (count, mean, M2) into each column's state; `cm` carries the float
        sum's rounding error, which the deviations' own sum `e` corrects (as in reductions.py)."""
        k = self.k
        return [
            f"{ind}{{",
            f"{ind}  const double bn = cnt{k}, total = n{k} + bn;",
            f"{ind}  #pragma omp simd",
            f"{ind}  for (int64_t jj = 0; jj < jn; ++jj) {{",
            f"{ind}    const double bmean = cm{k}[jj] + static_cast<double>(e{k}[jj]) / bn;",
            f"{ind}    const double bm2 = q{k}[jj] - static_cast<double>(e{k}[jj]) * e{k}[jj] / bn;",
            f"{ind}    const double delta = bmean - mean{k}[jj];",
            f"{ind}    mean{k}[jj] += delta * (bn / total);",
            f"{ind}    m2_{k}[jj] += bm2 + delta * delta * (n{k} * bn / total);",
            f"{ind}  }}",
            f"{ind}  n{k} = total;",
            f"{ind}}}",
        ]

    def result(self, member: ComputedBuffer) -> str:
        k, dtype = self.k, member.layout.dtype
        t = cpp_type(dtype)
        if self.kind == "sum":
            return f"static_cast<{t}>(acc{k}[jj])"
        if self.kind in ("max", "min"):
            return f"acc{k}[jj]"
        if self.kind in ("argmax", "argmin"):
            return f"idx{k}[jj]"
        part = "mean" if member.body.reduction_type == "welford_mean" else "m2_"
        # An empty reduction has no mean: torch gives nan for both.
        return f"(n{k} > 0 ? static_cast<{t}>({part}{k}[jj]) : {cpp_limit(dtype, 'nan')})"


def _states(reductions: list[ComputedBuffer], block: int) -> list[_State]:
    """One state per reduction, a welford mean and M2 of the same value sharing one."""
    by_key: dict = {}
    for b in reductions:
        body = b.body
        key = ("welford", body.value) if body.reduction_type.startswith("welford") else b.name
        by_key.setdefault(key, []).append(b)
    return [_State(k, members, block) for k, members in enumerate(by_key.values())]


def _row_loop(lines, ind, r_last, states, pointer_of, outer_last, counter, update) -> None:
    """The chunk's rows [rc, rend): `ROWS` at a time, then one at a time, each step one simd loop over
    the block's columns calling `update(state, values, row positions)` per state. Several rows per
    step make fewer passes over the partial arrays and keep more row reads in flight (each row of a
    block starts a new page, which the prefetcher does not follow)."""
    lines.append(f"{ind}{{")
    i1 = ind + "  "
    lines.append(f"{i1}int64_t {r_last} = rc;")
    for rows in (ROWS, 1):
        step = (
            f"{r_last} + {rows} <= rend; {r_last} += {rows}" if rows > 1 else f"{r_last} < rend; ++{r_last}"
        )
        lines.append(f"{i1}for (; {step}) {{")
        i2 = i1 + "  "
        start = len(lines)
        lines.append(f"{i2}#pragma omp simd")
        lines.append(f"{i2}for (int64_t jj = 0; jj < jn; ++jj) {{")
        i3 = i2 + "  "
        lines.append(f"{i3}const int64_t {outer_last} = jb + jj;")
        hoisted: list[str] = []
        writer = BodyWriter(pointer_of, lines, i3, counter, outer_last, hoisted, i2)
        for state in states:
            values = [
                writer.value(substitute(state.body.value, {r_last: r_last + u}) if u else state.body.value)
                for u in range(rows)
            ]
            positions = [f"(rbase + {r_last} + {u})" for u in range(rows)]
            lines.append(f"{i3}{update(state, values, positions)}")
        lines.append(f"{i2}}}")
        lines[start:start] = hoisted
        lines.append(f"{i1}}}")
    lines.append(f"{ind}}}")


def _block(columns, other_work, column_bytes: int, min_blocks: int = 1) -> int:
    """Columns per block: about `BLOCK` (`DYNAMIC_BLOCK` for a symbolic number of columns), or fewer
    where the states' `column_bytes` per column would pass `STATE_BYTES` (at most 1.5 times that),
    split evenly, and narrower when the kernel would otherwise have fewer than `min_blocks` blocks
    to share among threads."""
    columns, other_work = sympy.sympify(columns), sympy.sympify(other_work)
    fits = min(BLOCK, STATE_BYTES * 2 // 3 // column_bytes)
    target = max(NARROW_BLOCK, fits // NARROW_BLOCK * NARROW_BLOCK)
    if not columns.is_Integer:
        # Unknown columns: a block narrow enough to share among threads and to zero per chunk.
        return min(target, DYNAMIC_BLOCK)
    n = int(columns)
    blocks = max(1, round(n / target))  # 257 columns: one block of 272, not 256 and a remainder of 1
    if other_work.is_Integer and int(other_work) * blocks < min_blocks:
        blocks = max(blocks, min(min_blocks // int(other_work) or 1, -(-n // NARROW_BLOCK)))
    width = -(-n // blocks)
    return max(NARROW_BLOCK, -(-width // NARROW_BLOCK) * NARROW_BLOCK)


def merge_kept_dims(group: tuple[ComputedBuffer, ...]) -> tuple[ComputedBuffer, ...]:
    """`group` with its last two kept dims made one wherever every read and every store sees them as
    one run (`x.sum(0)` of a [64, 256, 257] tensor: 65792 columns instead of 256 rows of 257, whose
    blocks would end in a one-column remainder), repeatedly. The buffers' layouts merge alike; only
    the code generator sees the merged group, the program keeps its shapes."""
    ranges = group[0].body.ranges
    while len(ranges) >= 2:
        k = len(ranges) - 1
        outer, inner, n = index_var(k - 1), index_var(k), ranges[k]
        indices: list = []
        for member in group:
            found = index_expressions(member.body.value)
            strides = member.layout.strides
            if (
                found is None
                or len(strides) != len(ranges)
                or sympy.expand(strides[k - 1] - n * strides[k]) != 0
            ):
                return group
            indices += found
        if not reads_as_one_run(indices, outer, inner, n):
            return group
        mapping = {outer: sympy.Integer(0), inner: outer}
        ranges = (*ranges[: k - 1], ranges[k - 1] * n)

        def merged(m: ComputedBuffer, k=k, mapping=mapping, ranges=ranges) -> ComputedBuffer:
            value = map_indices(m.body.value, lambda index: sympy.sympify(index).xreplace(mapping))
            lay = m.layout
            layout = Layout(ranges, (*lay.strides[: k - 1], lay.strides[k]), lay.dtype)
            return replace(m, layout=layout, body=replace(m.body, ranges=ranges, value=value))

        group = tuple(merged(m) for m in group)
    return group


def emit_column_kernel(
    group: tuple[ComputedBuffer, ...], pointer_of, lines: list[str], work_condition
) -> None:
    """The body of the kernel computing the column reductions of `group` and its epilogues (after
    the kernel's signature line)."""
    reductions, epilogues = _split_group(merge_kept_dims(group))
    body = reductions[0].body
    outer = index_vars(len(body.ranges))
    rvars = reduction_vars(len(body.reduction_ranges))
    columns = cpp_index(body.ranges[-1])
    states = _states(reductions, 0)
    column_bytes = sum(state.bytes_per_column() for state in states)
    block = _block(body.ranges[-1], sympy.Mul(*body.ranges[:-1]), column_bytes)
    narrow = _block(body.ranges[-1], sympy.Mul(*body.ranges[:-1]), column_bytes, MIN_BLOCKS)
    states = _states(reductions, block)
    if fusion_log.isEnabledFor(logging.INFO):
        fusion_log.info(
            "column kernel %s: reduces a strided dim in one read, vectorized across %s kept columns "
            "(blocks of %s, %d rows per step)", ", ".join(b.name for b in reductions),
            cpp_index(body.ranges[-1]), block if narrow == block else f"{block} or {narrow}", ROWS,
        )  # fmt: skip
    condition = work_condition(sympy.Mul(*body.ranges) * sympy.Mul(*body.reduction_ranges))
    collapse = f" collapse({len(outer)})" if len(outer) > 1 else ""
    width = str(block)
    if narrow != block and condition is not None:
        # Too few wide blocks to share: narrower ones when the kernel runs on several threads, the
        # wide one (longer simd loops) on one.
        lines.append(f"  const int64_t bw = ts::threads(2) > 1 ? {narrow} : {block};")
        width = "bw"
    if condition is not None:
        lines.append(f"  #pragma omp parallel for{collapse}{f' if({condition})' if condition else ''}")
    depth = 1
    for v, r in zip(outer[:-1], body.ranges[:-1]):
        lines.append(f"{'  ' * depth}for (int64_t {v} = 0; {v} < {cpp_index(r)}; ++{v}) {{")
        depth += 1
    ind = "  " * depth
    lines.append(f"{ind}for (int64_t jb = 0; jb < {columns}; jb += {width}) {{")
    ind2 = ind + "  "
    lines.append(f"{ind2}const int64_t jn = ts::imin({columns} - jb, {width});")
    for state in states:
        lines += state.declare(ind2)
    inner = ind2
    for v, r in zip(rvars[:-1], body.reduction_ranges[:-1]):
        lines.append(f"{inner}for (int64_t {v} = 0; {v} < {cpp_index(r)}; ++{v}) {{")
        inner += "  "
    last = cpp_index(body.reduction_ranges[-1])
    lines.append(f"{inner}for (int64_t rc = 0; rc < {last}; rc += {CHUNK}) {{")
    i3 = inner + "  "
    lines.append(f"{i3}const int64_t rend = ts::imin(rc + {CHUNK}, {last});")
    if any(s.kind in ("argmax", "argmin") for s in states):
        lines.append(f"{i3}const int64_t rbase = {cpp_index(_row_major(rvars[:-1], body.reduction_ranges))};")
    for state in states:
        lines += state.chunk_start(i3)
    counter = [0]
    r_last = rvars[-1]
    _row_loop(lines, i3, r_last, states, pointer_of, outer[-1], counter,
              lambda s, values, positions: s.update_rows(values, positions))  # fmt: skip
    for state in states:
        lines += state.chunk_end(i3, "rend - rc")
    welfords = [s for s in states if s.kind == "welford"]
    if welfords:
        _row_loop(lines, i3, r_last, welfords, pointer_of, outer[-1], counter,
                  lambda s, values, positions: s.deviation_rows(values, positions))  # fmt: skip
        for state in welfords:
            lines += state.merge(i3)
    lines.append(f"{inner}}}")
    for k in range(len(rvars) - 1):
        lines.append(f"{ind2}{'  ' * (len(rvars) - 2 - k)}}}")
    lines.append(f"{ind2}for (int64_t jj = 0; jj < jn; ++jj) {{")
    lines.append(f"{ind2}  const int64_t {outer[-1]} = jb + jj;")
    for state in states:
        for member in state.members:
            value = store_code(state.result(member), member.layout.dtype)
            lines.append(f"{ind2}  {_target(member, pointer_of)} = {value};")
    epilogue_counter = [1000]  # temporaries of the epilogues: names apart from the reductions'
    for member in epilogues:
        value = BodyWriter(pointer_of, lines, ind2 + "  ", epilogue_counter).value(member.body.value)
        lines.append(f"{ind2}  {_target(member, pointer_of)} = {store_code(value, member.layout.dtype)};")
    lines.append(f"{ind2}}}")
    lines.append(f"{ind}}}")
    for d in reversed(range(1, depth)):
        lines.append(f"{'  ' * d}}}")


def _row_major(outer_rvars, reduction_ranges) -> sympy.Expr:
    """The flat position of the first element of the innermost reduced dim's run: the outer reduced
    dims' variables times their row-major strides (argmax's index counts positions that way)."""
    index, stride = sympy.Integer(0), sympy.sympify(reduction_ranges[-1])
    for v, r in reversed(list(zip(outer_rvars, reduction_ranges[:-1]))):
        index, stride = index + v * stride, stride * r
    return index


def _target(buffer: ComputedBuffer, pointer_of) -> str:
    strides = buffer.layout.strides
    store = sum((v * s for v, s in zip(index_vars(len(strides)), strides)), sympy.Integer(0))
    return f"{pointer_of[buffer.name]}[{cpp_index(store)}]"
