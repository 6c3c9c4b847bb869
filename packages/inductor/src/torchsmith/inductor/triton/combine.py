"""How each reduction type of the loop IR combines in Triton, in the two schedules of
triton_reduction: `reduce_row` (the whole row is one [XBLOCK, RBLOCK] block) and the looped form
(`LoopedAccumulator`: per-lane accumulators across the loop, combined across lanes after it).

Masked lanes (past the row's end, past the last row) take values that cannot change the result:
the identity of sum/prod/max/min, a zero count for Welford, a position past the row for argmax.
"""

from torchsmith.inductor.errors import CodegenError
from torchsmith.inductor.loop_ir.program import ComputedBuffer
from torchsmith.inductor.triton.index import compute_dtype, triton_dtype
from torchsmith.inductor.triton.ops import REDUCTIONS, reduction_identity

COMBINE_PRELUDE = """

@triton.jit
def ts_welford_combine(mean_a, m2_a, n_a, mean_b, m2_b, n_b):
    # Chan et al.'s merge of two (mean, M2, count) partial results; empty partials weigh 0.
    n = n_a + n_b
    delta = mean_b - mean_a
    w = tl.where(n == 0, 0.0, n_b / tl.where(n == 0, 1.0, n))
    return mean_a + delta * w, m2_a + m2_b + delta * delta * n_a * w, n


@triton.jit
def ts_argmax_combine(value_a, index_a, value_b, index_b):
    # torch.argmax: the larger value, nan counting as largest, the first position on ties.
    nan_a = value_a != value_a
    nan_b = value_b != value_b
    same = (value_a == value_b) | (nan_a & nan_b)
    a_wins = (value_a > value_b) | (nan_a & (value_b == value_b)) | (same & (index_a < index_b))
    return tl.where(a_wins, value_a, value_b), tl.where(a_wins, index_a, index_b)


@triton.jit
def ts_argmin_combine(value_a, index_a, value_b, index_b):
    nan_a = value_a != value_a
    nan_b = value_b != value_b
    same = (value_a == value_b) | (nan_a & nan_b)
    a_wins = (value_a < value_b) | (nan_a & (value_b == value_b)) | (same & (index_a < index_b))
    return tl.where(a_wins, value_a, value_b), tl.where(a_wins, index_a, index_b)
"""

ROW_POSITION = "(rindex + 0 * xindex).to(tl.int64)"  # a lane's position in the row, per row
PAST_THE_ROW = "9223372036854775807"


def _check(b: ComputedBuffer) -> str:
    kind = b.body.reduction_type
    if kind not in REDUCTIONS and kind not in ("welford_mean", "welford_m2", "argmax", "argmin"):
        raise CodegenError(f"{b.name}: no Triton form for reduction {kind!r}")
    return kind


def value_init(b: ComputedBuffer) -> str:
    """What masked lanes hold for argmax/argmin (the value's own extreme)."""
    kind = _check(b)
    value_dtype = b.body.value.dtype
    return reduction_identity("max" if kind == "argmax" else "min", value_dtype)


def reduce_row(emit, b: ComputedBuffer, value: str, mask: str, rnumel: str) -> str:
    """Whole-row reduction of the block `value`; `emit(code)` names a temporary. Returns the name of
    the [XBLOCK, 1] result."""
    kind = _check(b)
    out = triton_dtype(compute_dtype(b.layout.dtype))
    if kind in REDUCTIONS:
        masked = emit(f"tl.where({mask}, {value}, {reduction_identity(kind, b.layout.dtype)}).to({out})")
        return emit(f"{REDUCTIONS[kind][1].format(masked)}[:, None]")
    if kind in ("welford_mean", "welford_m2"):
        # The row is in registers: two exact passes (mean, then squared deviations) cost nothing extra.
        total = emit(f"tl.sum(tl.where({mask}, {value}, 0.0).to({out}), 1)[:, None]")
        mean = emit(f"{total} / ({rnumel})")
        if kind == "welford_mean":
            return mean
        deviation = emit(f"tl.where({mask}, {value} - {mean}, 0.0).to({out})")
        return emit(f"tl.sum({deviation} * {deviation}, 1)[:, None]")
    masked = emit(f"tl.where({mask}, {value}, {value_init(b)})")
    positions = emit(f"tl.where({mask}, {ROW_POSITION}, {PAST_THE_ROW})")
    pair = emit(f"tl.reduce(({masked}, {positions}), 1, ts_{kind}_combine)[1]")
    return emit(f"{pair}[:, None]")


class LoopedAccumulator:
    """Per-lane state of one reduction across the row loop: `init_lines()` before the loop,
    `update_lines(value)` inside it, `finish_lines()` after it (which define `self.result`).
    `shared`: a Welford member reading the running state another accumulator of the same `prefix`
    (and the same value) keeps; it adds no lines of its own until `finish_lines`.
    `column_count`: a Welford count per column lane ([1, RBLOCK]) instead of per element, for
    blocks of many rows whose masked rows are never stored: one division per column and step,
    shared by the block's rows, where the per-element update divides once per element."""

    def __init__(self, b: ComputedBuffer, prefix: str, shared: bool = False, column_count: bool = False):
        self.b, self.kind, self.prefix, self.shared = b, _check(b), prefix, shared
        self.column_count = column_count
        self.result = f"{prefix}_result_{self.kind}" if shared else f"{prefix}_result"

    def init_lines(self) -> list[str]:
        if self.shared:
            return []
        p, kind, shape = self.prefix, self.kind, "[XBLOCK, RBLOCK]"
        if kind in REDUCTIONS:
            dtype = triton_dtype(compute_dtype(self.b.layout.dtype))
            return [f"{p} = tl.full({shape}, {reduction_identity(kind, self.b.layout.dtype)}, {dtype})"]
        if kind.startswith("welford"):
            dtype = triton_dtype(compute_dtype(self.b.layout.dtype))  # float64 stays float64
            count_shape = "[1, RBLOCK]" if self.column_count else shape
            return [f"{p}_{k} = tl.zeros({shape}, {dtype})" for k in ("mean", "m2")] + [
                f"{p}_n = tl.zeros({count_shape}, {dtype})"
            ]
        dtype = triton_dtype(compute_dtype(self.b.body.value.dtype))
        return [
            f"{p}_value = tl.full({shape}, {value_init(self.b)}, {dtype})",
            f"{p}_index = tl.full({shape}, {PAST_THE_ROW}, tl.int64)",
        ]

    def update_lines(self, value: str) -> list[str]:
        if self.shared:
            return []
        p, kind, mask = self.prefix, self.kind, "xmask & rmask"
        if kind in REDUCTIONS:
            masked = f"tl.where({mask}, {value}, {reduction_identity(kind, self.b.layout.dtype)})"
            return [f"{p} = {REDUCTIONS[kind][0].format(p, masked)}"]
        if kind.startswith("welford") and self.column_count:
            return [
                f"{p}_count = {p}_n + tl.where(rmask, 1.0, 0.0)",
                f"{p}_step = 1.0 / tl.maximum({p}_count, 1.0)",
                f"{p}_delta = {value} - {p}_mean",
                f"{p}_mean = tl.where({mask}, {p}_mean + {p}_delta * {p}_step, {p}_mean)",
                f"{p}_m2 = tl.where({mask}, {p}_m2 + {p}_delta * ({value} - {p}_mean), {p}_m2)",
                f"{p}_n = {p}_count",
            ]
        if kind.startswith("welford"):
            return [
                f"{p}_count = {p}_n + tl.where({mask}, 1.0, 0.0)",
                f"{p}_delta = {value} - {p}_mean",
                f"{p}_mean = tl.where({mask}, {p}_mean + {p}_delta / tl.maximum({p}_count, 1.0), {p}_mean)",
                f"{p}_m2 = tl.where({mask}, {p}_m2 + {p}_delta * ({value} - {p}_mean), {p}_m2)",
                f"{p}_n = {p}_count",
            ]
        return [
            f"{p}_value, {p}_index = ts_{kind}_combine({p}_value, {p}_index, "
            f"tl.where({mask}, {value}, {value_init(self.b)}), "
            f"tl.where({mask}, {ROW_POSITION}, {PAST_THE_ROW}))"
        ]

    def finish_lines(self) -> list[str]:
        p, kind, r = self.prefix, self.kind, self.result
        if kind in REDUCTIONS:
            return [f"{r} = {REDUCTIONS[kind][1].format(p)}[:, None]"]
        if kind.startswith("welford"):
            pick = 0 if kind == "welford_mean" else 1
            n = f"tl.broadcast_to({p}_n, [XBLOCK, RBLOCK])" if self.column_count else f"{p}_n"
            combined = f"tl.reduce(({p}_mean, {p}_m2, {n}), 1, ts_welford_combine)"
            return [f"{r} = {combined}[{pick}][:, None]"]
        return [f"{r} = tl.reduce(({p}_value, {p}_index), 1, ts_{kind}_combine)[1][:, None]"]
