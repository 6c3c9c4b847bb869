"""The transformers zoo as a scoreboard: every model of tests/zoo, torchsmith against torch.compile.

    python benchmarks/bench_zoo.py                        # all models, results/zoo.{md,json}
    python benchmarks/bench_zoo.py --only bert,t5         # these rows only, merged into zoo.json
    python benchmarks/bench_zoo.py --quick                # the fast subset, 3 rounds, writes nothing

One process runs every model through the zoo harness (tests/zoo/zoo_harness.py): outputs equal to
eager at three sizes, torchsmith's graphs and graph breaks beside torch.compile's, the graphs
compiled over the three sizes, the training step and `generate()` where the zoo checks them, and,
at the first size, the first-call time (compile + first run) and the steady per-call time of eager,
torchsmith.compile (backend="inductor") and torch.compile (backend="inductor"), the three taking
turns each round (median of the rounds, after warm-up calls), under torch.no_grad() on the CPU.
torch._dynamo.reset() runs between models; torch.compile is the baseline only.

Both compilers start from empty disk caches (new temporary TORCHINDUCTOR_CACHE_DIR and
TORCHSMITH_CACHE_DIR, unless --keep-caches) and each compiles one small function before the first
model, so one-time set-up is not any model's first call. A kernel one model built can serve a later
model within the run, for both compilers alike.

Rows merge into benchmarks/results/zoo.json by model name after every model, and zoo.md is
rewritten from the whole file each time, so a run cut short (or an --only run) still leaves a full
table; a row records the date it was measured.
"""

from __future__ import annotations

import os
import sys
import tempfile

# Before torch is imported: the thread count of both compilers' OpenMP kernels, and empty caches.
_THREADS = "1"
for _i, _arg in enumerate(sys.argv):
    if _arg == "--threads" and _i + 1 < len(sys.argv):
        _THREADS = sys.argv[_i + 1]
os.environ["OMP_NUM_THREADS"] = _THREADS
if "--keep-caches" not in sys.argv:
    _CACHE = tempfile.mkdtemp(prefix="bench_zoo_")
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(_CACHE, "torchinductor")
    os.environ["TORCHSMITH_CACHE_DIR"] = os.path.join(_CACHE, "torchsmith")

import argparse  # noqa: E402
import dataclasses  # noqa: E402
import json  # noqa: E402
import pathlib  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402

import torch  # noqa: E402
from common import RESULTS, geomean, machine, prepare_native  # noqa: E402  (benchmarks/ is on sys.path)

import torchsmith  # noqa: E402

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "tests" / "zoo"))
from zoo_harness import Timing, problems_of, run_model  # noqa: E402
from zoo_models import BY_NAME, MODELS  # noqa: E402

JSON_PATH = RESULTS / "zoo.json"
MD_PATH = RESULTS / "zoo.md"


def warm_up_compilers() -> None:
    """Compile and run one small function with each compiler (imports, worker pools, the C++
    toolchain's first start), so that the first model's first call pays only its own compile."""
    import torch._dynamo

    def small(x):
        return torch.relu(x * 2.0 + 1.0).sum(-1)

    x = torch.randn(4, 8)
    with torch.no_grad():
        torchsmith.compile(small, backend="inductor")(x)
        torch.compile(small, backend="inductor")(x)
    torch._dynamo.reset()


def measure(entry, timing: Timing) -> dict:
    """One model's row (JSON-ready)."""
    start = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # transformers' deprecation notes would fill the log
        result = run_model(entry, timing=timing)
    row = dataclasses.asdict(result)
    row["family"] = entry.family
    row["problems"] = problems_of(result)
    row["measured"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    row["row_s"] = round(time.perf_counter() - start, 1)
    row["ratios"] = ratios(row)
    return row


def ratios(row: dict) -> dict:
    """Speedups (> 1: torchsmith faster) of the steady time against eager and against torch.compile,
    and torchsmith's first call over torch.compile's (> 1: torchsmith slower to start)."""

    def over(a, b):
        return a / b if a and b else None

    return {
        "steady_vs_eager": over(row["eager_ms"], row["steady_ms"]),
        "steady_vs_torch_compile": over(row["tc_steady_ms"], row["steady_ms"]),
        "torch_compile_vs_eager": over(row["eager_ms"], row["tc_steady_ms"]),
        "first_call_vs_torch_compile": over(row["first_call_s"], row["tc_first_call_s"]),
    }


def is_loss(row: dict) -> bool:
    """Wrong, more graphs or breaks than torch.compile, or slower than it in the steady state."""
    vs_tc = row["ratios"]["steady_vs_torch_compile"]
    return bool(row["problems"]) or vs_tc is None or vs_tc < 1.0


def ordered(rows: dict) -> list[dict]:
    """Losses first: rows with problems, then the slowest against torch.compile."""

    def key(row):
        vs_tc = row["ratios"]["steady_vs_torch_compile"]
        return (not row["problems"], vs_tc if vs_tc is not None else 0.0, row["name"])

    return sorted(rows.values(), key=key)


def _x(value) -> str:
    return f"{value:.2f}x" if value is not None else "-"


def _n(value, digits: int = 1) -> str:
    return f"{value:.{digits}f}" if value is not None else "-"


def _status(row: dict) -> str:
    if not row["problems"]:
        return "ok"
    if not row["correct"]:
        return "WRONG" if row["error"] and "differs" in row["error"] else "error"
    return "breaks" if any("graph" in p for p in row["problems"]) else "problem"


def render(report: dict) -> str:
    m, s, rows = report["machine"], report["settings"], report["rows"]
    lines = [
        "# The transformers zoo: torchsmith.compile vs torch.compile (inductor, CPU)",
        "",
        f"Machine: {m['cpu']}, {m['cpu_count']} CPUs ({m['torch_threads']} torch thread, "
        f"OMP_NUM_THREADS={s['threads']}), {m['platform']}; Python {m['python']}, torch {m['torch']}, "
        f"transformers {m['transformers']}, torchsmith {m['torchsmith']}; {m['date']} (last run; each "
        "row has its own date in zoo.json).",
        "The 2 cores are shared with other jobs: steady times are the median of "
        f"{s['rounds']} interleaved rounds (eager, torchsmith and torch.compile taking turns, "
        f"{s['warmup']} warm-up calls each), and first-call times carry that noise in full.",
        "",
        "Each row: correct = outputs equal to eager at three sizes (and the training step and "
        "`generate()` where the zoo checks them); graphs/breaks at the first size, torchsmith / "
        "torch.compile; graphs 3 sizes = graphs after all three sizes, torchsmith / torch.compile; steady ms "
        "at the first size; speedups > 1 mean torchsmith is faster; first call = compile + first "
        "run, torchsmith's over torch.compile's (> 1: torchsmith slower to start). Losses first.",
        "",
        "| model | family | correct | graphs ts/tc | breaks ts/tc | graphs 3 sizes ts/tc | eager ms | "
        "torchsmith ms | torch.compile ms | vs eager | vs torch.compile | tc vs eager | first call ts s "
        "| first call tc s | first call ts/tc |",
        "|---|---|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in ordered(rows):
        r = row["ratios"]
        lines.append(
            f"| {row['name']} | {row['family']} | {_status(row)} | {row['graphs']}/{_n(row['tc_graphs'], 0)} "
            f"| {row['breaks']}/{_n(row['tc_breaks'], 0)} "
            f"| {row['graphs_all_sizes']}/{_n(row.get('tc_graphs_all_sizes'), 0)} "
            f"| {_n(row['eager_ms'], 2)} | {_n(row['steady_ms'], 2)} | {_n(row['tc_steady_ms'], 2)} "
            f"| {_x(r['steady_vs_eager'])} | {_x(r['steady_vs_torch_compile'])} "
            f"| {_x(r['torch_compile_vs_eager'])} | {_n(row['first_call_s'])} "
            f"| {_n(row['tc_first_call_s'])} | {_x(r['first_call_vs_torch_compile'])} |"
        )
    lines += ["", "## Where we lose", ""] + summary(rows)
    problems = [row for row in ordered(rows) if row["problems"] or row["tc_error"]]
    if problems:
        lines += ["", "## Problems by model", ""]
        for row in problems:
            for p in row["problems"]:
                lines.append(f"- {row['name']}: {p}")
            if row["tc_error"]:
                lines.append(f"- {row['name']} (torch.compile itself): {row['tc_error']}")
    breaks = [row for row in ordered(rows) if row["break_reasons"]]
    if breaks:
        lines += ["", "## torchsmith's graph-break reasons", ""]
        for row in breaks:
            lines.append(f"- {row['name']}: " + "; ".join(row["break_reasons"]))
    return "\n".join(lines) + "\n"


def summary(rows: dict) -> list[str]:
    """Plain sentences: how many rows lose, and how."""
    all_rows = list(rows.values())
    wrong = sorted(r["name"] for r in all_rows if not r["correct"])
    broken = sorted(r["name"] for r in all_rows if r["correct"] and r["problems"])
    timed = [r for r in all_rows if r["ratios"]["steady_vs_torch_compile"] is not None]
    slower = sorted((r for r in timed if r["ratios"]["steady_vs_torch_compile"] < 1.0),
                    key=lambda r: r["ratios"]["steady_vs_torch_compile"])
    lines = [f"- {len(all_rows)} models; {len(all_rows) - len(wrong)} equal to eager everywhere checked."]
    if wrong:
        lines.append(f"- Not correct or not compiled ({len(wrong)}): {', '.join(wrong)}.")
    if broken:
        lines.append(f"- Correct but with more graphs/breaks than torch.compile or another problem "
                     f"({len(broken)}): {', '.join(broken)}.")
    if slower:
        named = ", ".join(f"{r['name']} {_x(r['ratios']['steady_vs_torch_compile'])}" for r in slower)
        lines.append(f"- Slower than torch.compile in the steady state ({len(slower)} of {len(timed)}): "
                     f"{named}.")
    vs_eager = geomean([r["ratios"]["steady_vs_eager"] for r in timed])
    vs_tc = geomean([r["ratios"]["steady_vs_torch_compile"] for r in timed])
    tc_eager = geomean([r["ratios"]["torch_compile_vs_eager"] for r in timed])
    first = geomean([r["ratios"]["first_call_vs_torch_compile"] for r in all_rows
                     if r["ratios"]["first_call_vs_torch_compile"]])
    lines.append(f"- Geometric means over {len(timed)} timed models: torchsmith {_x(vs_eager)} eager, "
                 f"torch.compile {_x(tc_eager)} eager, torchsmith {_x(vs_tc)} torch.compile; "
                 f"torchsmith's first call takes {_x(first)} torch.compile's.")
    return lines


def load(path: pathlib.Path) -> dict:
    if path.exists():
        return json.loads(path.read_text())
    return {"rows": {}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--only", default="", help="comma-separated model names (default: every model)")
    parser.add_argument("--quick", action="store_true", help="the fast subset, 3 rounds, writes nothing")
    parser.add_argument("--rounds", type=int, default=7, help="timed rounds per model")
    parser.add_argument("--warmup", type=int, default=3, help="warm-up calls of each system")
    parser.add_argument("--threads", type=int, default=int(_THREADS), help="torch and OpenMP threads")
    parser.add_argument("--keep-caches", action="store_true", help="use the compilers' usual disk caches")
    parser.add_argument("--out", type=pathlib.Path, default=JSON_PATH, help="the JSON to merge rows into")
    args = parser.parse_args()
    names = [n.strip() for n in args.only.split(",") if n.strip()]
    unknown = [n for n in names if n not in BY_NAME]
    if unknown:
        parser.error(f"unknown models {unknown}; the zoo has {sorted(BY_NAME)}")
    entries = [BY_NAME[n] for n in names] if names else [m for m in MODELS if m.fast or not args.quick]
    timing = Timing(rounds=3 if args.quick else args.rounds, warmup=args.warmup)
    torch.set_num_threads(args.threads)
    warm_up_compilers()
    native = prepare_native()

    import transformers

    report = {"rows": {}} if args.quick else load(args.out)
    versions = {"torchsmith": torchsmith.__version__, "transformers": transformers.__version__}
    report["machine"] = machine(versions)
    report["settings"] = {"rounds": timing.rounds, "warmup": timing.warmup, "threads": args.threads,
                          **native,
                          "grad": False, "sizes": "first of three (tests/zoo/zoo_models.py)"}
    for entry in entries:
        row = measure(entry, timing)
        report["rows"][entry.name] = row
        r = row["ratios"]
        print(f"{entry.name:14s} {_status(row):7s} graphs {row['graphs']}/{row['tc_graphs']} "
              f"breaks {row['breaks']}/{row['tc_breaks']} vs eager {_x(r['steady_vs_eager'])} "
              f"vs torch.compile {_x(r['steady_vs_torch_compile'])} first call "
              f"{_n(row['first_call_s'])}s/{_n(row['tc_first_call_s'])}s ({row['row_s']} s)", flush=True)
        if not args.quick:
            args.out.parent.mkdir(exist_ok=True)
            args.out.write_text(json.dumps(report, indent=1, sort_keys=True) + "\n")
            if args.out == JSON_PATH:
                MD_PATH.write_text(render(report))
    if args.quick:
        print(render(report))


if __name__ == "__main__":
    main()
