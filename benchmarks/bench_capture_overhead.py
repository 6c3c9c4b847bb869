"""Per-call overhead of compiled code with the eager backend: torchsmith against torch.compile.

    python benchmarks/bench_capture_overhead.py            # 1,000 calls per repeat, median of 15
    python benchmarks/bench_capture_overhead.py --quick    # 300 calls per repeat, median of 3

Two programs, each run plain (eager), through `torchsmith.compile(backend="eager")` and through
`torch.compile(backend="eager")` in the same process, with the same inputs:

- "small function": a few elementwise ops on a 4x4 tensor, so the time is almost all overhead
  (guards, argument handling, running the graph);
- "10-layer MLP": a module looping over 10 x Linear(32, 32) with ReLU after each, batch 8; its
  parameters are graph inputs, so the guards and the graph see 21 tensors per call.

Per-call time is the median over repeats of (time of N calls) / N, after warm-up calls, the three
variants taking turns within each repeat so that a slow spell of a shared machine hits all of them; under
`torch.no_grad()` and with one intra-op thread (on a shared 2-core machine more threads only add
noise; both compilers run the same ops). "overhead" is compiled minus eager. The cold time is the
first call of a freshly compiled function: capture, backend and the run itself; it is measured on
fresh code objects after each compiler has compiled one unrelated function, so imports and one-time
set-up are not counted. torch.compile is only the baseline here, never part of torchsmith.

Writes benchmarks/results/capture_overhead.md and benchmarks/results/capture_overhead.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch
from common import RESULTS, interleaved_times, machine  # benchmarks/ is on sys.path when this script runs

import torchsmith

COMPILERS = ("eager", "torchsmith", "torch.compile")

_SMALL_SOURCE = """
def small(x):
    y = x * 2.0 + 1.0
    return torch.relu(y).sin() - x
"""


def fresh_small():
    """A new function object with a new code object (compilers cache per code object)."""
    scope = {"torch": torch}
    exec(compile(_SMALL_SOURCE, "<bench small>", "exec"), scope)  # noqa: S102 - our own source
    return scope["small"]


_MLP_SOURCE = """
class MLP(torch.nn.Module):
    def __init__(self, width, depth):
        super().__init__()
        self.layers = torch.nn.ModuleList(torch.nn.Linear(width, width) for _ in range(depth))

    def forward(self, x):
        for layer in self.layers:
            x = torch.relu(layer(x))
        return x
"""


def fresh_mlp() -> torch.nn.Module:
    """A 10-layer MLP (Linear(32, 32) + ReLU) whose class, and so forward's code object, is new."""
    scope = {"torch": torch}
    exec(compile(_MLP_SOURCE, "<bench mlp>", "exec"), scope)  # noqa: S102 - our own source
    torch.manual_seed(0)
    return scope["MLP"](32, 10)


def compile_with(name: str, fn):
    if name == "eager":
        return fn
    if name == "torchsmith":
        return torchsmith.compile(fn, backend="eager")
    return torch.compile(fn, backend="eager")  # the baseline only


def per_call_us(fns: dict, x, calls: int, repeats: int, warmup: int) -> dict[str, list[float]]:
    """Per-call times in microseconds: `repeats` rounds, each timing `calls` calls of every function
    in turn (common.interleaved_times)."""
    for fn in fns.values():
        for _ in range(warmup):
            fn(x)
    runs = {name: (lambda f=fn: f(x)) for name, fn in fns.items()}
    samples = interleaved_times(runs, rounds=repeats, calls=calls)
    return {name: [t * 1e6 for t in times] for name, times in samples.items()}


def cold_ms(name: str, make, x) -> float:
    compiled = compile_with(name, make())
    start = time.perf_counter()
    compiled(x)
    return (time.perf_counter() - start) * 1e3


def check_same(programs: dict) -> None:
    """Each compiled program gives eager's result (a benchmark of wrong code would mean nothing)."""
    for label, (make, x) in programs.items():
        model = make()
        want = model(x)
        for name in COMPILERS[1:]:
            got = compile_with(name, model)(x)
            torch.testing.assert_close(got, want, msg=lambda m, n=name, lb=label: f"{lb}, {n}: {m}")


def run(quick: bool) -> dict:
    calls, repeats, warmup = (300, 3, 50) if quick else (1000, 15, 200)
    torch.set_num_threads(1)
    programs = {
        "small function": (fresh_small, torch.randn(4, 4)),
        "10-layer MLP": (fresh_mlp, torch.randn(8, 32)),
    }
    rows = {}
    with torch.no_grad():
        check_same(programs)
        for name in COMPILERS[1:]:  # one-time set-up of each compiler, not counted as cold time
            compile_with(name, fresh_small())(torch.randn(2, 2))
        for label, (make, x) in programs.items():
            row = {"cold_ms": {name: cold_ms(name, make, x) for name in COMPILERS[1:]}}
            model = make()
            compiled = {name: compile_with(name, model) for name in COMPILERS}
            row["samples_us"] = per_call_us(compiled, x, calls, repeats, warmup)
            row["per_call_us"] = {name: statistics.median(t) for name, t in row["samples_us"].items()}
            eager = row["per_call_us"]["eager"]
            row["overhead_us"] = {name: row["per_call_us"][name] - eager for name in COMPILERS[1:]}
            rows[label] = row
    return {
        "machine": machine({"torchsmith": torchsmith.__version__}),
        "settings": {"calls": calls, "repeats": repeats, "warmup": warmup, "grad": False},
        "results": rows,
    }


def render(report: dict) -> str:
    m, s = report["machine"], report["settings"]
    lines = [
        "# Per-call overhead, eager backend: torchsmith.compile vs torch.compile",
        "",
        f"Machine: {m['cpu']}, {m['cpu_count']} CPUs ({m['torch_threads']} torch thread), {m['platform']}; "
        f"Python {m['python']}, torch {m['torch']}, torchsmith {m['torchsmith']}; {m['date']}.",
        f"Median of {s['repeats']} repeats of {s['calls']} calls (the variants taking turns) after "
        f"{s['warmup']} warm-up calls, under torch.no_grad(). Overhead = compiled minus eager; "
        "cold = first call of a fresh function (capture + backend + run).",
        "",
        "| program | eager µs | torchsmith µs | torch.compile µs | torchsmith overhead µs "
        "| torch.compile overhead µs | torchsmith cold ms | torch.compile cold ms |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for label, row in report["results"].items():
        t, o, c = row["per_call_us"], row["overhead_us"], row["cold_ms"]
        lines.append(
            f"| {label} | {t['eager']:.1f} | {t['torchsmith']:.1f} | {t['torch.compile']:.1f} "
            f"| {o['torchsmith']:.1f} | {o['torch.compile']:.1f} "
            f"| {c['torchsmith']:.1f} | {c['torch.compile']:.1f} |"
        )
    lines += [
        "",
        "Best of the repeats (µs), less sensitive to other load on a shared machine:",
        "",
        "| program | eager | torchsmith | torch.compile |",
        "|---|---:|---:|---:|",
    ]
    for label, row in report["results"].items():
        best = {name: min(samples) for name, samples in row["samples_us"].items()}
        lines.append(
            f"| {label} | {best['eager']:.1f} | {best['torchsmith']:.1f} | {best['torch.compile']:.1f} |"
        )
    notes = [
        "",
        "Eager MLP time includes `nn.Module.__call__` for every layer, which both compilers replace by",
        "one graph call, so their overhead on it can be negative.",
    ]
    return "\n".join(lines + notes) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--quick", action="store_true", help="fewer calls and repeats")
    args = parser.parse_args()
    report = run(args.quick)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "capture_overhead.json").write_text(json.dumps(report, indent=2) + "\n")
    text = render(report)
    (RESULTS / "capture_overhead.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
