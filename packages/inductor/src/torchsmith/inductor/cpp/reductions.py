"""C++ for `Reduction` bodies: chunked vector partials, per-thread partials, Welford, argmax/argmin.

The innermost reduction dim is cut into chunks of `CHUNK` elements. Each chunk is reduced into a
fresh partial by vectorized loops over explicit lanes (`LANE_VECTORS` vector accumulators of 8 float
lanes each), and the chunk's partial is combined into the kernel's running state. max and min keep
an int nan flag per lane beside the value (a vector max drops a nan). For a float32
sum the state is a double: one double add per 4096 elements costs nothing, and the two-level
(lanes, then chunks) summation keeps the error below eager's cascade sum without a double per element.

Welford: a chunk computes its sum, its mean, and the sums of deviations and squared deviations from
that mean (a second, vectorized pass over the chunk while it sits in L1; the deviations' sum corrects
the rounding of the float mean), and Chan's formula merges
(count, mean, M2) into the state. So variance is one pass over memory, shifted per chunk (exact on
data with a large mean and a small spread), and still vectorized.

argmax/argmin: per chunk, the best value (a vectorized max or min with a nan flag), then, only when it
beats the state, its first position (a vectorized test per block, a scalar scan of the block that
hits); a scan that kept (value, position) per lane stalled on masked stores.

When the outer loops have too little work to thread (`x.sum()`), the reduction itself is split: the
chunks (and outer reduction dims) are divided among OpenMP threads with a static schedule, each
thread keeps its own state, and the states are combined in thread order (deterministic results).

Reduction types (loop_ir.REDUCTION_TYPES): sum, prod, max, min (nan propagates), welford_mean and
welford_m2 (the mean and the sum of squared deviations of the same value; a group holding both with
equal ranges and value computes them together), argmax and argmin (int64 index into the reduction
ranges flattened row-major; first index on ties; the first nan wins, as torch does).
"""

import re

import sympy
import torch

from torchsmith.inductor.cpp import build
from torchsmith.inductor.cpp.dtypes import cpp_limit, cpp_type, store_code, type_size
from torchsmith.inductor.cpp.expr import BodyWriter, cpp_index
from torchsmith.inductor.errors import CodegenError
from torchsmith.inductor.loop_ir.index_math import index_expressions
from torchsmith.inductor.loop_ir.program import Reduction, loads, reduction_vars

CHUNK = 4096
# Sums, max, min and Welford's passes keep their reduction variables in this many independent vector
# accumulators of explicit lanes (`_lane_loop`): one accumulator makes each step wait on the previous
# one's latency.
LANE_VECTORS = 2
# Reductions over several dims prefetch the next run of the innermost one when it is at most this long.
PREFETCH_RUN = 2048
PAGE = 4096
# Rows this short reduce in 256-bit vectors even where 512-bit ones exist (`_short_row_simdlen`).
SHORT_ROW = 256
# argmax/argmin look for the best value's first position in blocks of this many elements.
ARG_BLOCK = 64
# Per-thread partial states live in fixed arrays of this many entries (threads beyond it are not used).
MAX_THREADS = 64


def _state(kind: str, value_dtype: torch.dtype, result_dtype: torch.dtype) -> list[tuple[str, str, str]]:
    """The running state of a reduction: (suffix, C++ type, initial value) per variable."""
    v = cpp_type(value_dtype)
    floating = value_dtype.is_floating_point
    if kind in ("sum", "prod"):
        p = cpp_type(result_dtype)
        acc = "double" if p == "float" and kind == "sum" else p
        return [("s", acc, "0" if kind == "sum" else "1")]
    if kind in ("max", "min"):
        if value_dtype == torch.bool:
            return [("s", "bool", "false" if kind == "max" else "true")]
        init = cpp_limit(value_dtype, "lowest" if kind == "max" else "max")
        return [("s", v, init), ("nan", "bool", "false")] if floating else [("s", v, init)]
    if kind in ("welford_mean", "welford_m2"):
        if not floating:
            raise CodegenError(f"a {kind} reduction needs a floating-point value, got {value_dtype}")
        return [("n", "double", "0"), ("mean", "double", "0"), ("m2", "double", "0")]
    if kind in ("argmax", "argmin"):
        return [
            ("v", v, cpp_limit(value_dtype, "lowest" if kind == "argmax" else "max")),
            ("i", "int64_t", "0"),
        ]
    raise CodegenError(f"unknown reduction type {kind!r}")


def _combine(kind: str, dst: str, src: str, value_dtype: torch.dtype) -> str:
    """The statement merging state `src` (a later part of the reduction) into state `dst`."""
    if kind == "sum":
        return f"{dst}_s += {src}_s;"
    if kind == "prod":
        return f"{dst}_s *= {src}_s;"
    if kind in ("max", "min"):
        if value_dtype == torch.bool:
            return f"{dst}_s = {dst}_s {'||' if kind == 'max' else '&&'} {src}_s;"
        cmp = ">" if kind == "max" else "<"
        code = f"{dst}_s = {src}_s {cmp} {dst}_s ? {src}_s : {dst}_s;"
        return code + (f" {dst}_nan = {dst}_nan || {src}_nan;" if value_dtype.is_floating_point else "")
    if kind.startswith("welford"):
        return f"ts::welford_combine({dst}_n, {dst}_mean, {dst}_m2, {src}_n, {src}_mean, {src}_m2);"
    is_max = "true" if kind == "argmax" else "false"
    return (
        f"if (ts::arg_better<{is_max}>({src}_v, {src}_i, {dst}_v, {dst}_i)) "
        f"{{ {dst}_v = {src}_v; {dst}_i = {src}_i; }}"
    )


def _result(kind: str, acc: str, value_dtype: torch.dtype, dtype: torch.dtype) -> str:
    """The final value of state `acc` for a reduction of `kind`, in `dtype`'s compute type."""
    t = cpp_type(dtype)
    if kind in ("sum", "prod"):
        return f"static_cast<{t}>({acc}_s)"
    if kind in ("max", "min"):
        if value_dtype.is_floating_point:
            return f"({acc}_nan ? {cpp_limit(dtype, 'nan')} : {acc}_s)"
        return f"{acc}_s"
    if kind.startswith("welford"):
        # An empty reduction has no mean: torch gives nan for both.
        part = "mean" if kind == "welford_mean" else "m2"
        return f"({acc}_n > 0 ? static_cast<{t}>({acc}_{part}) : {cpp_limit(dtype, 'nan')})"
    return f"{acc}_i"


def _short_row_simdlen(lo: str, hi: str, short: bool = False) -> str:
    """` simdlen(8)` for a row of at most SHORT_ROW elements (`short`: known to be): there the
    horizontal reduction of one wide vector costs more than the loop saves with it (argmax over 64
    channels)."""
    short = short or (lo.isdigit() and hi.isdigit() and int(hi) - int(lo) <= SHORT_ROW)
    return " simdlen(8)" if short and build.native_vector_bytes() > 32 else ""


class ReductionEmitter:
    """Writes one reduction (or a welford mean/M2 pair sharing its value) into `lines`."""

    def __init__(self, body: Reduction, pointer_of, lines: list[str], counter: list[int], side_store=None):
        self.body, self.pointer_of, self.lines, self.counter = body, pointer_of, lines, counter
        # (C++ element over the reduction variables, dtype): where each value is also stored, for
        # a row producer computed inside this reduction's loop (see codegen._folded_producers).
        self.side_store = side_store
        self.kind = "welford" if body.reduction_type.startswith("welford") else body.reduction_type
        self.value_dtype = body.value.dtype
        self.acc = f"a{counter[0]}"
        counter[0] += 1
        self.rvars = reduction_vars(len(body.reduction_ranges))

    # ---- pieces ------------------------------------------------------------------------------------

    def _value(self, indent: str, hoisted: list[str] | None = None, hoisted_indent: str = "") -> str:
        writer = BodyWriter(
            self.pointer_of, self.lines, indent, self.counter, self.rvars[-1], hoisted, hoisted_indent
        )
        value = writer.value(self.body.value)
        if self.side_store is not None:
            target, dtype = self.side_store
            self.lines.append(f"{indent}{target} = {store_code(value, dtype)};")
        return value

    def _simd_loop(
        self, indent: str, lo: str, hi: str, clause: str, update, lanes=None, flag=None, short: bool = False
    ) -> None:
        """A vectorized loop of the innermost reduction var over [lo, hi); `update(value)` -> stmt.
        What does not depend on the loop var is computed once, before the loop. `lanes` ({reduction
        variable: C++ type}): the variables are kept in explicit lanes (`_lane_loop`, which takes
        `flag`). `short`: the loop runs at most SHORT_ROW times."""
        if lanes:
            self._lane_loop(indent, lo, hi, clause, update, lanes, flag)
            return
        v = self.rvars[-1]
        start = len(self.lines)
        self.lines.append(f"{indent}#pragma omp simd {clause}{_short_row_simdlen(lo, hi, short)}".rstrip())
        self.lines.append(f"{indent}for (int64_t {v} = {lo}; {v} < {hi}; ++{v}) {{")
        hoisted: list[str] = []
        self.lines.append(f"{indent}  {update(self._value(indent + '  ', hoisted, indent))}")
        self.lines.append(f"{indent}}}")
        self.lines[start:start] = hoisted

    def _lane_loop(self, indent: str, lo: str, hi: str, clause: str, update, lanes: dict, flag=None) -> None:
        """The loop of `_simd_loop` with explicit lanes: each reduction variable in `LANE_VECTORS`
        arrays of `w` lanes, each array filling one vector register (`native_vector_bytes`). A step reads
        `LANE_VECTORS * w` elements in one simd loop of `w`, each array taking one of its vectors: the
        accumulators are independent (no step waits on the previous one's latency), and each array
        is one vector at fixed places, which GCC keeps in a register (one array of several vectors
        is a loop of several iterations, whose lanes GCC leaves in memory: a store and a reload per
        step). Then one vector at a time into the first array, the arrays and lanes combined by the
        clause's operators, and the tail (fewer than `w`) one element at a time. GCC's own loop for
        a `reduction` clause keeps one vector accumulator, and around a short row spends more than
        in it.

        `flag` (name, value C++ type, update without the flag, flag update from a list of values):
        in a step, the variable `name` is kept in one array, updated once from all the step's values
        (max and min test their values for nan two at a time) instead of once per value."""
        v, lines, vectors = self.rvars[-1], self.lines, LANE_VECTORS
        ops = {name.strip(): op for op, names in re.findall(r"reduction\(([^:]+):([^)]+)\)", clause)
               for name in names.split(",")}  # fmt: skip
        w = max(1, build.native_vector_bytes() // max(type_size(t) for t in lanes.values()))
        step_size = vectors * w
        # A row of known length gets only the loops it runs (and only the arrays they touch).
        known = int(hi) - int(lo) if lo.isdigit() and hi.isdigit() else None
        steps = known is None or known >= step_size
        rest = None if known is None else known % step_size if steps else known
        one_vector = rest is None or rest >= w
        tail = known is None or known % w != 0
        if not (steps or one_vector):
            lines.append(f"{indent}for (int64_t {v} = {lo}; {v} < {hi}; ++{v}) {{")
            lines.append(f"{indent}  {update(self._value(indent + '  '))}")
            lines.append(f"{indent}}}")
            return
        flag = flag if steps else None
        flag_name = flag[0] if flag else None

        def arrays(name: str) -> int:
            return 1 if not steps or name == flag_name else vectors

        lb = f"{next(iter(lanes))}_j"  # named after the first variable: unique in the kernel
        for name, t in lanes.items():
            declared = ", ".join(f"{name}_l{k}[{w}]" for k in range(arrays(name)))
            lines.append(f"{indent}{t} {declared};")
            inits = " ".join(f"{name}_l{k}[{lb}] = {name};" for k in range(arrays(name)))
            lines.append(f"{indent}for (int {lb} = 0; {lb} < {w}; ++{lb}) {{ {inits} }}")
        hoisted: list[str] = []
        hoisted_at = len(lines)
        i2, i3 = indent + "  ", indent + "    "

        def lane_update(ind: str, k: int, offset: str, names: list[str], update) -> str:
            """Element `lb_r + offset + lb` into array `k` of `names`; returns its value."""
            lines.append(f"{ind}const int64_t {v} = {lb}_r{offset} + {lb};")
            # Lane copies under the variables' own names: `update` reads and writes them unchanged.
            lines.extend(f"{ind}{lanes[name]} {name} = {name}_l{k}[{lb}];" for name in names)
            value = self._value(ind, hoisted, indent)
            lines.append(f"{ind}{update(value)}")
            lines.extend(f"{ind}{name}_l{k}[{lb}] = {name};" for name in names)
            return value

        def step(count: int) -> None:
            lines.append(f"{i2}#pragma omp simd")
            lines.append(f"{i2}for (int64_t {lb} = 0; {lb} < {w}; ++{lb}) {{")
            if count == 1:
                lane_update(i3, 0, "", list(lanes), update)
            else:
                names = [name for name in lanes if name != flag_name]
                each = flag[2] if flag else update
                if flag:
                    lines.append(f"{i3}{flag[1]} {', '.join(f'{lb}_v{k}' for k in range(count))};")
                for k in range(count):  # each value in a scope of its own: the same names
                    lines.append(f"{i3}{{")
                    value = lane_update(i3 + "  ", k, f" + {k * w}" if k else "", names, each)
                    if flag:
                        lines.append(f"{i3}  {lb}_v{k} = {value};")
                    lines.append(f"{i3}}}")
                if flag:
                    name = flag_name
                    lines.append(f"{i3}{lanes[name]} {name} = {name}_l0[{lb}];")
                    lines.append(f"{i3}{flag[3]([f'{lb}_v{k}' for k in range(count)])}")
                    lines.append(f"{i3}{name}_l0[{lb}] = {name};")
            lines.append(f"{i2}}}")

        lines.append(f"{indent}int64_t {lb}_r = {lo};")
        if steps:
            lines.append(f"{indent}for (; {lb}_r + {step_size} <= {hi}; {lb}_r += {step_size}) {{")
            step(vectors)
            lines.append(f"{indent}}}")
        if one_vector:
            lines.append(f"{indent}for (; {lb}_r + {w} <= {hi}; {lb}_r += {w}) {{")
            step(1)
            lines.append(f"{indent}}}")
        lines[hoisted_at:hoisted_at] = hoisted
        # Arrays, then the lanes of the first, fold in halves (a tree: each step one vector
        # operation; a float sum may not be reordered into one, and a chain of dependent adds would
        # cost more than the row).
        for name in lanes:
            op = ops[name]

            def fold(dst: str, src: str, op=op) -> str:
                if op in ("max", "min"):
                    return f"{dst} = {src} {'>' if op == 'max' else '<'} {dst} ? {src} : {dst};"
                return f"{dst} {op}= {src};"

            gap = 1
            while gap < arrays(name):
                for k in range(0, arrays(name) - gap, 2 * gap):
                    step_code = fold(f"{name}_l{k}[{lb}]", f"{name}_l{k + gap}[{lb}]")
                    lines.append(f"{indent}for (int {lb} = 0; {lb} < {w}; ++{lb}) {step_code}")
                gap *= 2
            if op in ("|", "&"):  # exact in any order: one loop, which GCC folds better than halves
                step_code = fold(name, f"{name}_l0[{lb}]")
                lines.append(f"{indent}for (int {lb} = 0; {lb} < {w}; ++{lb}) {step_code}")
                continue
            half = w // 2
            while half:
                step_code = fold(f"{name}_l0[{lb}]", f"{name}_l0[{lb} + {half}]")
                lines.append(f"{indent}for (int {lb} = 0; {lb} < {half}; ++{lb}) {step_code}")
                half //= 2
            lines.append(f"{indent}{fold(name, f'{name}_l0[0]')}")
        if tail:
            lines.append(f"{indent}for (int64_t {v} = {lb}_r; {v} < {hi}; ++{v}) {{")
            lines.append(f"{indent}  {update(self._value(indent + '  '))}")
            lines.append(f"{indent}}}")

    def _chunk(self, indent: str, lo: str, hi: str, state_kind: str) -> None:
        """Reduce elements [lo, hi) of the innermost reduction dim into the state `self.acc`."""
        a, vd = self.acc, self.value_dtype
        p = f"{a}p"
        if state_kind in ("sum", "prod"):
            t, op = cpp_type(self._result_dtype), "+" if state_kind == "sum" else "*"
            self.lines.append(f"{indent}{t} {p}_s = {0 if op == '+' else 1};")
            self._simd_loop(
                indent, lo, hi, f"reduction({op}:{p}_s)", lambda v: f"{p}_s {op}= {v};", {f"{p}_s": t}
            )
        elif state_kind in ("max", "min") and vd == torch.bool:
            op = "|" if state_kind == "max" else "&"
            init = "false" if state_kind == "max" else "true"
            self.lines.append(f"{indent}bool {p}_s = {init};")
            self._simd_loop(indent, lo, hi, f"reduction({op}:{p}_s)", lambda v: f"{p}_s = {p}_s {op} {v};")
        elif state_kind in ("max", "min"):
            for suffix, t, init in _state(state_kind, vd, vd):
                # An int flag, not a bool: its lanes match the float lanes (a bool flag made GCC mix
                # 64 byte-lanes with 16 float-lanes, and the max loop ran at a third of the speed).
                t, init = ("int32_t", "0") if suffix == "nan" else (t, init)
                self.lines.append(f"{indent}{t} {p}_{suffix} = {init};")
            cmp = ">" if state_kind == "max" else "<"
            clause = f"reduction({state_kind}:{p}_s)"

            def best(v):
                return f"{p}_s = {v} {cmp} {p}_s ? {v} : {p}_s;"

            def update(v):
                # A vector max drops a nan: keep a nan flag beside it.
                return best(v) + (f" {p}_nan = {p}_nan | ({v} != {v});" if vd.is_floating_point else "")

            def any_nan(values):  # one unordered test per two values
                pairs = [values[i : i + 2] for i in range(0, len(values), 2)]
                tests = [f"__builtin_isunordered({x[0]}, {x[1]})" if len(x) == 2 else f"({x[0]} != {x[0]})"
                         for x in pairs]  # fmt: skip
                return f"{p}_nan = {p}_nan | {' | '.join(tests)};"

            lanes, flag = {f"{p}_s": cpp_type(vd)}, None
            if vd.is_floating_point:
                clause += f" reduction(|:{p}_nan)"
                lanes[f"{p}_nan"] = "int32_t"
                flag = (f"{p}_nan", cpp_type(vd), best, any_nan)
            self._simd_loop(indent, lo, hi, clause, update, lanes, flag)
        elif state_kind == "welford":
            t = cpp_type(vd)
            self.lines.append(f"{indent}{t} {p}_sum = 0;")
            self._simd_loop(
                indent, lo, hi, f"reduction(+:{p}_sum)", lambda v: f"{p}_sum += {v};", {f"{p}_sum": t}
            )
            self.lines.append(f"{indent}const {t} {p}_cnt = static_cast<{t}>({hi} - {lo});")
            self.lines.append(f"{indent}const {t} {p}_cm = {p}_sum / {p}_cnt;")
            self.lines.append(f"{indent}{t} {p}_q = 0, {p}_e = 0;")
            self._simd_loop(
                indent, lo, hi, f"reduction(+:{p}_q, {p}_e)",
                lambda v: f"{{ const {t} d = {v} - {p}_cm; {p}_q += d * d; {p}_e += d; }}",
                {f"{p}_q": t, f"{p}_e": t},
            )  # fmt: skip
            # `cm` carries the rounding error of the float sum; the deviations' own sum `e` corrects
            # mean and M2 for it (M2 about cm = M2 about the mean + e^2/n).
            self.lines.append(
                f"{indent}ts::welford_combine({a}_n, {a}_mean, {a}_m2, {p}_cnt, "
                f"{p}_cm + static_cast<double>({p}_e) / {p}_cnt, "
                f"{p}_q - static_cast<double>({p}_e) * {p}_e / {p}_cnt);"
            )
            return
        else:
            self._arg_chunk(indent, lo, hi, state_kind)
            return
        self.lines.append(f"{indent}{_combine(state_kind, a, p, vd)}")

    def _arg_chunk(self, indent: str, lo: str, hi: str, state_kind: str) -> None:
        """argmax / argmin over [lo, hi) in two vectorized passes: the chunk's best value (and whether
        it holds a nan); then, only when that beats the state (a nan beats anything but an earlier
        nan; an equal value loses to the state's earlier position), the first position holding it,
        found block by block (a vector test per `ARG_BLOCK` elements, a scalar scan of the block that
        hits). The chunk sits in cache for the second pass."""
        a, vd, v, lines = self.acc, self.value_dtype, self.rvars[-1], self.lines
        p, t, floating = f"{a}p", cpp_type(vd), vd.is_floating_point
        is_max = state_kind == "argmax"
        cmp, op = (">", "max") if is_max else ("<", "min")
        lines.append(f"{indent}{t} {p}_m = {cpp_limit(vd, 'lowest' if is_max else 'max')};")
        clause = f"reduction({op}:{p}_m)"
        if floating:
            lines.append(f"{indent}int32_t {p}_nan = 0;")
            clause += f" reduction(|:{p}_nan)"

        def best(value):
            code = f"{p}_m = {value} {cmp} {p}_m ? {value} : {p}_m;"
            return code + (f" {p}_nan = {p}_nan | ({value} != {value});" if floating else "")

        self._simd_loop(indent, lo, hi, clause, best)
        if floating:
            beats = f"{p}_nan ? ({a}_v == {a}_v) : ({p}_m {cmp} {a}_v)"
            found = lambda value: f"({p}_nan ? ({value} != {value}) : ({value} == {p}_m))"  # noqa: E731
        else:
            beats = f"{p}_m {cmp} {a}_v"
            found = lambda value: f"({value} == {p}_m)"  # noqa: E731
        lines.append(f"{indent}if ({beats}) {{")
        i2, i3, i4 = indent + "  ", indent + "    ", indent + "      "
        lines.append(f"{i2}int64_t {p}_at = {lo};")
        lines.append(f"{i2}for (int64_t {p}_b = {lo}; {p}_b < {hi}; {p}_b += {ARG_BLOCK}) {{")
        lines.append(f"{i3}const int64_t {p}_e = ts::imin({p}_b + {ARG_BLOCK}, {hi});")
        lines.append(f"{i3}int32_t {p}_hit = 0;")
        self._simd_loop(i3, f"{p}_b", f"{p}_e", f"reduction(|:{p}_hit)",
                        lambda value: f"{p}_hit = {p}_hit | {found(value)};",
                        short=ARG_BLOCK <= SHORT_ROW)  # fmt: skip
        lines.append(f"{i3}if ({p}_hit) {{")
        lines.append(f"{i4}for (int64_t {v} = {p}_b; {v} < {p}_e; ++{v}) {{")
        value = self._value(i4 + "  ")
        lines.append(f"{i4}  if ({found(value)}) {{ {p}_at = {v}; break; }}")
        lines.append(f"{i4}}}")
        lines.append(f"{i4}break;")
        lines.append(f"{i3}}}")
        lines.append(f"{i2}}}")
        lines.append(f"{i2}const int64_t {v} = {p}_at;")
        best_value = f"({p}_nan ? {cpp_limit(vd, 'nan')} : {p}_m)" if floating else f"{p}_m"
        lines.append(f"{i2}{a}_v = {best_value};")
        lines.append(f"{i2}{a}_i = {cpp_index(self._linear_index())};")
        lines.append(f"{indent}}}")

    def _linear_index(self) -> sympy.Expr:
        index, stride = sympy.Integer(0), sympy.Integer(1)
        for v, r in reversed(list(zip(self.rvars, self.body.reduction_ranges))):
            index, stride = index + v * stride, stride * r
        return index

    # ---- the whole reduction ----------------------------------------------------------------------

    def emit(self, indent: str, stores: list[tuple[str, str, torch.dtype]], parallel_if: str | None) -> None:
        """Reduce, then store: `stores` is (reduction type, target element, dtype) per output.
        `parallel_if`: None for one thread, else the C++ condition ("" = always) for splitting
        the reduction among threads."""
        kind, vd = self.kind, self.value_dtype
        self._result_dtype = stores[0][2]
        state_kind = stores[0][0] if kind != "welford" else "welford"
        state = _state(stores[0][0], vd, self._result_dtype)
        a, lines = self.acc, self.lines
        for suffix, t, init in state:
            lines.append(f"{indent}{t} {a}_{suffix} = {init};")
        ranges = self.body.reduction_ranges
        last = cpp_index(ranges[-1])
        if parallel_if is None:
            for depth, (v, r) in enumerate(zip(self.rvars[:-1], ranges[:-1])):
                lines.append(f"{indent}{'  ' * depth}for (int64_t {v} = 0; {v} < {cpp_index(r)}; ++{v}) {{")
            inner = indent + "  " * (len(ranges) - 1)
            c, size = f"{a}c", sympy.sympify(ranges[-1])
            lines += self._prefetch_next_run(inner)
            if size.is_Integer and int(size) <= CHUNK:  # one chunk: no chunk loop around it
                self._chunk(inner, "0", last, state_kind)
            else:
                lines.append(f"{inner}for (int64_t {c} = 0; {c} < {last}; {c} += {CHUNK}) {{")
                self._chunk(inner + "  ", c, f"ts::imin({c} + {CHUNK}, {last})", state_kind)
                lines.append(f"{inner}}}")
            for depth in reversed(range(len(ranges) - 1)):
                lines.append(f"{indent}{'  ' * depth}}}")
        else:
            self._emit_parallel(indent, state, state_kind, parallel_if)
        for kind_k, target, dtype in stores:
            lines.append(f"{indent}{target} = {store_code(_result(kind_k, a, vd, dtype), dtype)};")

    def _prefetch_next_run(self, indent: str) -> list[str]:
        """Prefetches of the cache lines of the next outer reduced position's run: where a reduction
        over several dims reads short contiguous runs far apart (`x.var((0, 2))` of a [64, 256, 257]
        tensor: runs of 257 floats 257 KB apart), each run starts on a page the hardware prefetcher
        has not seen, and the reads wait on memory without them. Nothing for one reduced dim, runs
        longer than `PREFETCH_RUN` elements (the prefetcher catches up within them), runs less than
        a page apart, or indirect loads."""
        ranges, rvars = self.body.reduction_ranges, self.rvars
        size = sympy.sympify(ranges[-1])
        if len(ranges) < 2 or not size.is_Integer or int(size) > PREFETCH_RUN:
            return []
        if index_expressions(self.body.value) is None:
            return []
        outer, inner = rvars[-2], rvars[-1]
        following = sympy.Min(outer + 1, sympy.sympify(ranges[-2]) - 1)
        lines, seen, pf = [], set(), f"{self.acc}_pf"
        for load in loads(self.body.value):
            index = sympy.expand(sympy.sympify(load.index))
            jump = index.coeff(outer)  # from one run to the next, in elements
            if index.coeff(inner) != 1 or not jump.is_Integer or (load.buffer, index) in seen:
                continue
            if abs(int(jump)) * load.dtype.itemsize <= PAGE:  # the next run is on the same or next page
                continue
            seen.add((load.buffer, index))
            step = max(1, 64 // load.dtype.itemsize)  # elements per cache line
            at = cpp_index(index.xreplace({outer: following, inner: sympy.Symbol(pf)}))
            loop = f"for (int64_t {pf} = 0; {pf} < {int(size)}; {pf} += {step})"
            lines.append(f"{indent}{loop} __builtin_prefetch(&{self.pointer_of[load.buffer]}[{at}]);")
        return lines

    def _emit_parallel(self, indent: str, state, state_kind: str, parallel_if: str) -> None:
        a, lines, ranges = self.acc, self.lines, self.body.reduction_ranges
        last = cpp_index(ranges[-1])
        lines.append(f"{indent}{{")
        i2 = indent + "  "
        lines.append(f"{i2}const int64_t {a}_chunks = ({last} + {CHUNK - 1}) / {CHUNK};")
        work = " * ".join([cpp_index(r) for r in ranges[:-1]] + [f"{a}_chunks"])
        lines.append(f"{i2}const int64_t {a}_work = {work};")
        for suffix, t, _ in state:
            lines.append(f"{i2}{t} {a}_{suffix}_part[{MAX_THREADS}];")
        lines.append(f"{i2}int {a}_threads = 1;")
        condition = f" if({parallel_if})" if parallel_if else ""
        lines.append(f"{i2}#pragma omp parallel num_threads(ts::threads({MAX_THREADS})){condition}")
        lines.append(f"{i2}{{")
        i3 = i2 + "  "
        t_acc = f"{a}t"
        for suffix, t, init in state:
            lines.append(f"{i3}{t} {t_acc}_{suffix} = {init};")
        lines.append(f"{i3}#pragma omp for schedule(static)")
        w = f"{a}_w"
        lines.append(f"{i3}for (int64_t {w} = 0; {w} < {a}_work; ++{w}) {{")
        i4 = i3 + "  "
        # Decode the flat work index: chunk of the innermost dim, then the outer reduction dims.
        lines.append(f"{i4}const int64_t {a}c = ({w} % {a}_chunks) * {CHUNK};")
        lines.append(f"{i4}int64_t {a}_rest = {w} / {a}_chunks;")
        for v, r in reversed(list(zip(self.rvars[:-1], ranges[:-1]))):
            lines.append(f"{i4}const int64_t {v} = {a}_rest % {cpp_index(r)};")
            lines.append(f"{i4}{a}_rest /= {cpp_index(r)};")
        saved, self.acc = self.acc, t_acc
        self._chunk(i4, f"{a}c", f"ts::imin({a}c + {CHUNK}, {last})", state_kind)
        self.acc = saved
        lines.append(f"{i3}}}")
        lines.append(f"{i3}const int {a}_tid = omp_get_thread_num();")
        lines.append(f"{i3}if ({a}_tid == 0) {a}_threads = omp_get_num_threads();")
        for suffix, _, _ in state:
            lines.append(f"{i3}{a}_{suffix}_part[{a}_tid] = {t_acc}_{suffix};")
        lines.append(f"{i2}}}")
        lines.append(f"{i2}for (int {a}_k = 0; {a}_k < {a}_threads; ++{a}_k) {{")
        for suffix, t, _ in state:
            lines.append(f"{i2}  const {t} {a}k_{suffix} = {a}_{suffix}_part[{a}_k];")
        lines.append(f"{i2}  {_combine(state_kind, a, f'{a}k', self.value_dtype)}")
        lines.append(f"{i2}}}")
        lines.append(f"{indent}}}")
