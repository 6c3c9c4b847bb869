"""The CPU reduction sweep (issue 21): sum / mean / var / vector_norm / amax / argmax over each axis of
2-D, 3-D and 4-D float32 tensors in several layouts, eager vs torch.compile vs torchsmith in one process.

    python benchmarks/bench_reductions.py                  # writes results/reductions_cpu.md (~5 min)
    python benchmarks/bench_reductions.py --only odd --rounds 5 --no-write   # rows whose name holds "odd"
    python benchmarks/bench_reductions.py --cpu-time     # one thread, CPU time: results/reductions_cpu_1t.md

Every row is one function `op(x, dim)` compiled by torch.compile and by torchsmith (backend "inductor")
and checked against eager (allclose; argmax exactly). Timing: the median over `--rounds` rounds of the
per-call time, the three systems taking turns in each round (a slow spell of the shared machine hits
all alike), 2 threads. GB/s counts the bytes a reduction must move (the input read once, the output
written once) and, in parentheses, the share of the copy bandwidth measured in the same process
(`dst.copy_(src)` of 2048x2048 float32, read + write). The table lists the rows where torchsmith is
slowest against torch.compile first. Not part of CI.

On a shared, loaded machine two OpenMP threads wait for each other at every barrier while the other
is descheduled, and wall-clock times fill with scheduler quanta; `--cpu-time` runs one thread and
measures the calling thread's CPU time (`time.thread_time`), which waiting for the CPU does not count.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import types

# Before torch loads: the generated kernels' OpenMP reads it once (torch.set_num_threads sets torch's own).
os.environ.setdefault("OMP_NUM_THREADS", "1" if "--cpu-time" in sys.argv else "2")

import torch  # noqa: E402
from common import RESULTS, calls_per_round, interleaved_times, machine, median, short_error  # noqa: E402

SYSTEMS = ("eager", "torch.compile", "torchsmith")


def _var(x, dim):
    return torch.var(x, dim=dim)


def _norm(x, dim):
    return torch.linalg.vector_norm(x, dim=dim)


OPS = {
    "sum": lambda x, dim: x.sum(dim),
    "mean": lambda x, dim: x.mean(dim),
    "var": _var,
    "norm": _norm,
    "amax": lambda x, dim: x.amax(dim),
    "argmax": lambda x, dim: x.argmax(dim),
}

# name -> (shape, layout); layout: "contiguous", "transposed" (the last two dims swapped, a view) or
# "channels_last" (NHWC storage of an NCHW tensor).
TENSORS = {
    "2d": ((2048, 2048), "contiguous"),
    "2d-T": ((2048, 2048), "transposed"),
    "odd": ((1000, 1531), "contiguous"),
    "3d": ((64, 256, 257), "contiguous"),
    "4d": ((8, 64, 56, 56), "contiguous"),
    "4d-CL": ((8, 64, 56, 56), "channels_last"),
}

# (tensor, dims, ops): argmax takes one dim, so multi-axis rows leave it out.
ALL = ("sum", "mean", "var", "norm", "amax", "argmax")
NO_ARG = ("sum", "mean", "var", "norm", "amax")
CASES = [
    ("2d", 0, ALL),
    ("2d", 1, ALL),
    ("2d", (0, 1), ("sum", "var", "amax")),
    ("2d-T", 0, ("sum", "var", "amax", "argmax")),
    ("2d-T", 1, ("sum", "var", "amax", "argmax")),
    ("odd", 0, ALL),
    ("odd", 1, ALL),
    ("3d", 0, ("sum", "var", "amax", "argmax")),
    ("3d", 1, ("sum", "var", "norm", "argmax")),
    ("3d", 2, ("sum", "var", "amax", "argmax")),
    ("3d", (0, 2), ("sum", "var")),
    ("4d", (0, 2, 3), ("sum", "var", "amax")),
    ("4d", (2, 3), ("mean", "amax")),
    ("4d", 1, ("sum", "amax", "argmax")),
    ("4d-CL", (0, 2, 3), ("sum", "var", "amax")),
    ("4d-CL", (2, 3), ("mean", "amax")),
    ("4d-CL", 1, ("sum", "amax", "argmax")),
]


def make_tensor(name: str) -> torch.Tensor:
    shape, layout = TENSORS[name]
    torch.manual_seed(0)
    if layout == "transposed":
        return torch.randn(*shape[:-2], shape[-1], shape[-2]).transpose(-1, -2)
    x = torch.randn(*shape)
    if layout == "channels_last":
        return x.contiguous(memory_format=torch.channels_last)
    return x


def workload(x):
    """Issue 21's workload: a row reduction and a column reduction of one input."""
    var, mean = torch.var_mean(x, dim=1)
    return var, mean, torch.linalg.vector_norm(x, dim=0)


def _fresh(op: str, fn, dim):
    """`fn(x, dim)` as a function with a code object of its own: both compilers cache per code object
    and stop recompiling one after a few variants, which shared code would reach within the sweep."""

    def bound(x, fn=fn, dim=dim):
        return fn(x, dim)

    code = bound.__code__.replace(co_name=f"{op}_{len(_FRESH)}")
    _FRESH.append(code)
    return types.FunctionType(code, bound.__globals__, code.co_name, bound.__defaults__)


_FRESH: list = []


def rows(only: str | None):
    """(row name, tensor name, function, description) per benchmark row."""
    out = []
    for tensor, dim, ops in CASES:
        for op in ops:
            fn = OPS[op]
            name = f"{op} {tensor} dim={dim}"

            out.append((name, tensor, _fresh(op, fn, dim)))
    out.append(("workload var_mean(dim=1)+norm(dim=0) 2d", "2d", workload))
    return [r for r in out if only is None or only in r[0]]


def _outputs(result) -> list[torch.Tensor]:
    return list(result) if isinstance(result, (tuple, list)) else [result]


def _check(expected, got) -> str:
    for e, g in zip(_outputs(expected), _outputs(got), strict=True):
        if e.dtype == torch.int64:
            if not torch.equal(e, g):
                return "wrong (index differs)"
        elif not torch.allclose(e, g, rtol=1e-4, atol=1e-4 * float(e.abs().max())):
            return f"wrong (max abs error {float((e - g).abs().max()):.1e})"
    return "ok"


def copy_bandwidth(rounds: int, cpu_time: bool = False) -> float:
    """GB/s of `dst.copy_(src)` on 2048x2048 float32 (bytes read + written)."""
    src, dst = torch.randn(2048, 2048), torch.empty(2048, 2048)
    calls = calls_per_round(lambda: dst.copy_(src), lambda: None)
    clock = time.thread_time if cpu_time else time.perf_counter
    times = interleaved_times({"copy": lambda: dst.copy_(src)}, rounds, calls, clock=clock)["copy"]
    return 2 * src.numel() * 4 / median(times) / 1e9


def run_row(name: str, tensor: str, fn, rounds: int, cpu_time: bool = False) -> dict:
    import torchsmith

    x = make_tensor(tensor)
    expected = fn(x)
    row = {"name": name, "shape": list(x.shape), "strides": list(x.stride())}
    fns = {"eager": lambda: fn(x)}
    compiled = {"torch.compile": torch.compile(fn), "torchsmith": torchsmith.compile(fn, backend="inductor")}
    for system, c in compiled.items():
        try:
            start = time.perf_counter()
            got = c(x)
            row[f"{system} compile s"] = time.perf_counter() - start
            row[f"{system} status"] = _check(expected, got)
            fns[system] = lambda c=c: c(x)
        except Exception as e:  # a failing system leaves its cells empty, the others still run
            row[f"{system} status"] = short_error(e)
    for f in fns.values():
        f()
    calls = calls_per_round(fns["eager"], lambda: None)
    clock = time.thread_time if cpu_time else time.perf_counter  # CPU seconds: one-thread runs only
    times = interleaved_times(fns, rounds, calls, clock=clock)
    for system, samples in times.items():
        row[f"{system} ms"] = median(samples) * 1e3
    moved = x.numel() * x.element_size() + sum(o.numel() * o.element_size() for o in _outputs(expected))
    row["bytes"] = moved
    return row


def _cell(row: dict, system: str, copy: float) -> tuple[str, str]:
    ms = row.get(f"{system} ms")
    if ms is None:
        return "-", "-"
    gbs = row["bytes"] / (ms / 1e3) / 1e9
    return f"{ms:.3f}", f"{gbs:.1f} ({gbs / copy:.0%})"


def markdown(
    rows_done: list[dict], info: dict, copy: float, rounds: int, seconds: float, cpu_time: bool = False
) -> str:
    def ratio(r):
        tc, ts = r.get("torch.compile ms"), r.get("torchsmith ms")
        return tc / ts if tc and ts else 0.0

    lines = [
        "# Reduction sweep: eager vs torch.compile vs torchsmith (cpu, float32)",
        "",
        f"Command: `python benchmarks/bench_reductions.py{' --cpu-time' if cpu_time else ''}` "
        f"(whole run {seconds:.0f} s).",
        "",
        f"Machine: {info['cpu']}, {info['cpu_count']} CPUs ({info['torch_threads']} torch threads, "
        f"OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS')}), {info['platform']}; Python "
        f"{info['python']}, torch {info['torch']}; {info['date']}.",
        "",
        f"Per-call time ({'CPU time of the one thread' if cpu_time else 'wall clock'}): median of "
        f"{rounds} rounds, the systems taking turns in each round. GB/s: input "
        "read once + output written once per call, and its share of the copy bandwidth measured in this "
        f"run ({copy:.1f} GB/s, `dst.copy_(src)` 2048x2048, read + write). `vs tc`: torch.compile's time "
        "over torchsmith's (above 1: torchsmith faster). Rows sorted by that ratio, losses first. "
        "Tensors: 2d 2048x2048, 2d-T its transpose (a view), odd 1000x1531, 3d 64x256x257, "
        "4d 8x64x56x56 NCHW, 4d-CL the same in channels-last storage.",
        "",
        "| row | eager ms | torch.compile ms | torchsmith ms | vs tc | vs eager | eager GB/s "
        "| torch.compile GB/s | torchsmith GB/s | status (tc / ts) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in sorted(rows_done, key=ratio):
        cells = {s: _cell(r, s, copy) for s in SYSTEMS}
        ts, eager = r.get("torchsmith ms"), r.get("eager ms")
        lines.append(
            f"| {r['name']} | {cells['eager'][0]} | {cells['torch.compile'][0]} | {cells['torchsmith'][0]} "
            f"| {ratio(r):.2f}x | {(eager / ts if ts else 0):.2f}x | {cells['eager'][1]} "
            f"| {cells['torch.compile'][1]} | {cells['torchsmith'][1]} "
            f"| {r.get('torch.compile status')} / {r.get('torchsmith status')} |"
        )
    ratios = [ratio(r) for r in rows_done if ratio(r)]
    if ratios:
        below = sum(1 for v in ratios if v < 1.0)
        lines += [
            "",
            f"Rows: {len(rows_done)}; torchsmith at least torch.compile's speed on {len(ratios) - below}, "
            f"below it on {below} (worst {min(ratios):.2f}x).",
        ]
    return "\n".join(lines) + "\n"


def main() -> int:
    raw = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=raw)
    parser.add_argument("--only", help="run the rows whose name contains this text")
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--no-write", action="store_true", help="print the table, write no file")
    parser.add_argument("--cpu-time", action="store_true", help="one thread, timed in its CPU time")
    args = parser.parse_args()
    if args.cpu_time:
        args.threads = 1
    torch.set_num_threads(args.threads)
    info = machine()
    start = time.perf_counter()
    copy = copy_bandwidth(args.rounds, args.cpu_time)
    done: list[dict] = []
    stem = "reductions_cpu_1t" if args.cpu_time else "reductions_cpu"
    out_md, out_json = RESULTS / f"{stem}.md", RESULTS / f"{stem}.json"
    for name, tensor, fn in rows(args.only):
        with torch.no_grad():
            row = run_row(name, tensor, fn, args.rounds, args.cpu_time)
        done.append(row)
        tc, ts = row.get("torch.compile ms"), row.get("torchsmith ms")
        status = f"{row.get('torch.compile status')} / {row.get('torchsmith status')}"
        print(f"{name}: eager {row.get('eager ms', 0):.3f} tc {tc or 0:.3f} ts {ts or 0:.3f} ms ({status})")
        if not args.no_write:  # rewritten after every row: a run cut short still leaves its table
            table = markdown(done, info, copy, args.rounds, time.perf_counter() - start, args.cpu_time)
            out_md.write_text(table)
            out_json.write_text(json.dumps({"machine": info, "copy_gbs": copy, "rows": done}, indent=1))
    print(markdown(done, info, copy, args.rounds, time.perf_counter() - start, args.cpu_time))
    return 0


if __name__ == "__main__":
    sys.exit(main())
