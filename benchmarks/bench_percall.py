"""Per-call host time of compiled small models on the CPU: eager, torch.compile and torchsmith.

    python benchmarks/bench_percall.py                     # the six models, results/percall_cpu.{md,json}
    python benchmarks/bench_percall.py --only gpt2,llama   # these rows only, merged into percall_cpu.json
    python benchmarks/bench_percall.py --quick             # 3 rounds, writes nothing
    python benchmarks/bench_percall.py --clock thread      # CPU time of this thread (a busy shared machine)
    python benchmarks/bench_percall.py --only mobilenet_v2,resnet --quick   # any zoo model, its own inputs

The zoo's small configurations (tests/zoo/zoo_models.py: 2 layers, hidden 64) at batch 2 and
sequence 32, where a call is mostly host overhead: guards, the Python around the graphs, and the
library calls (matmul) made from the wrapper. Each model runs eagerly, through torch.compile
(inductor) and through torchsmith.compile (inductor) in one process under torch.no_grad() with one
thread (OMP_NUM_THREADS=1, torch.set_num_threads(1)); the three take turns every round and a time is
the median round. torch.compile is the baseline only.

torchsmith's call is then split by timing its pieces alone on the same inputs:
- guard: the guard functions of the cache entries the call hits;
- glue: the rest outside the compiled graphs (capture's generated code, autograd_aot's runtime,
  the backend wrappers): the call minus guard minus graph;
- graph: `CompiledGraph.__call__` of the inductor as it runs (a graph without size symbols runs its
  steps as one generated function);
- its kernel steps (C++ kernels through ctypes, with their output allocations) and extern steps
  (library calls: matmul, bmm, ...), timed one by one through the wrapper's step loop, so they carry
  that loop's Python too and can add up to more than the graph;
- extern op: the torch functions of the extern steps, timed inside the steps, so
  extern steps minus extern op is the Python each library call costs.
Step times come from a run with a timer around each step; what the timers cost is measured on steps
that do nothing and subtracted.
Not run in CI.
"""

from __future__ import annotations

import os
import sys
import tempfile

os.environ["OMP_NUM_THREADS"] = "1"  # before torch is imported: both compilers' OpenMP kernels
if "--keep-caches" not in sys.argv:
    _CACHE = tempfile.mkdtemp(prefix="bench_percall_")
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(_CACHE, "torchinductor")
    os.environ["TORCHSMITH_CACHE_DIR"] = os.path.join(_CACHE, "torchsmith")

import argparse  # noqa: E402
import json  # noqa: E402
import pathlib  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402

import torch  # noqa: E402
from common import RESULTS, interleaved_times, machine, prepare_native  # noqa: E402  (benchmarks/ is on sys.path)

import torchsmith  # noqa: E402
from torchsmith.capture.dispatch import CaptureSession  # noqa: E402
from torchsmith.inductor.loop_ir.program import ExternCall  # noqa: E402
from torchsmith.inductor.runtime import externs, wrapper  # noqa: E402

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "tests" / "zoo"))
from zoo_models import BY_NAME  # noqa: E402

MODELS = ("gpt2", "llama", "mistral", "qwen2", "bert", "t5")
BATCH, SEQ = 2, 32
JSON_PATH = RESULTS / "percall_cpu.json"
MD_PATH = RESULTS / "percall_cpu.md"


def inputs_of(name: str) -> dict:
    """Keyword arguments of one call: token ids (and a mask, and T5's decoder ids); for a model that
    takes no tokens (vision, audio), the zoo's own inputs at its smallest size."""
    if name not in MODELS:
        torch.manual_seed(0)
        return BY_NAME[name].inputs(0)
    g = torch.Generator().manual_seed(0)
    out = {"input_ids": torch.randint(3, 128, (BATCH, SEQ), generator=g)}
    if name != "gpt2":
        out["attention_mask"] = torch.ones(BATCH, SEQ, dtype=torch.long)
    if name == "t5":
        out["decoder_input_ids"] = torch.randint(3, 128, (BATCH, SEQ // 2), generator=g)
    return out


def same(a, b) -> None:
    """Raise unless the two model outputs hold equal tensors (a wrong program's time means nothing)."""
    ta = [v for v in (a.values() if hasattr(a, "values") else a) if isinstance(v, torch.Tensor)]
    tb = [v for v in (b.values() if hasattr(b, "values") else b) if isinstance(v, torch.Tensor)]
    assert len(ta) == len(tb), (len(ta), len(tb))
    for x, y in zip(ta, tb):
        torch.testing.assert_close(x, y, rtol=1e-4, atol=1e-4)


class Recorder:
    """One call of a torchsmith-compiled model with its pieces recorded: the (guard, L, G) of each
    code entered and the inductor graphs with their inputs."""

    def __init__(self):
        self.entered, self.graphs = [], []

    def record(self, fn, kwargs) -> None:
        run_code, graph_call = CaptureSession.run_code, wrapper.CompiledGraph.__call__
        rec = self

        def recording_run_code(session, code, globals_, closure, L, native):
            cache = session.caches.get(code)
            for entry in cache.entries if cache else ():
                if entry.guard(L, globals_):
                    # the run may rewrite the keyword dict in place (as the function did): keep a copy
                    snapshot = {k: dict(v) if type(v) is dict else v for k, v in L.items()}
                    rec.entered.append((entry.guard, snapshot, globals_))
                    break
            return run_code(session, code, globals_, closure, L, native)

        def recording_graph_call(cg, *inputs):
            rec.graphs.append((cg, inputs))
            return graph_call(cg, *inputs)

        CaptureSession.run_code = recording_run_code
        wrapper.CompiledGraph.__call__ = recording_graph_call
        try:
            fn(**kwargs)
        finally:
            CaptureSession.run_code = run_code
            wrapper.CompiledGraph.__call__ = graph_call


# what every time here is read from: wall time, or with --clock thread the thread's CPU time (slices
# other jobs take of a shared core are not counted)
CLOCK = time.perf_counter


def _per_call_us(fn, calls: int, rounds: int) -> float:
    times = []
    for _ in range(rounds):
        start = CLOCK()
        for _ in range(calls):
            fn()
        times.append((CLOCK() - start) / calls)
    return statistics.median(times) * 1e6


def step_times_us(cg, inputs, calls: int, rounds: int) -> dict[str, float]:
    """Microseconds per graph call of the whole graph (as it runs), its kernel steps, its extern
    steps and the torch functions those call, the steps from one run that times each of them through
    the wrapper's step loop (the parts are consistent on a machine whose load varies), less what the
    timers themselves cost (measured on steps that do nothing). The whole call runs the steps as one
    straight-line function, so graph minus steps is the Python that form leaves, and the steps carry
    the step loop's own Python. The extern steps' functions are timed inside the steps: each planned
    step's resolved function (`fn` in its closure) is swapped for a timed one; a step without one (an
    output pick) counts as Python."""
    sums = {"kernel": 0.0, "extern": 0.0, "op": 0.0, "graph": 0.0}
    # the call as it runs (a graph without size symbols: its straight-line form), before the steps
    # are swapped for timed ones (which makes it run its step loop)
    plain = _per_call_us(lambda: cg(*inputs), calls, rounds)
    original = cg._run
    clock = CLOCK

    def timed(run, kind):
        def step(*a):
            start = clock()
            run(*a)
            sums[kind] += clock() - start

        return step

    def timed_op(fn):
        def op(*a, **k):
            start = clock()
            try:
                return fn(*a, **k)
            finally:
                sums["op"] += clock() - start

        return op

    # What the timers themselves add: a timed step doing nothing records `inside`; a timed function
    # inside an extern step adds `around` to that step. Subtracted below, per step and per function.
    def noop(*a, **k):
        return None

    probe_calls = 20_000
    step_probe, op_probe = timed(noop, "kernel"), timed_op(noop)
    sums["kernel"] = sums["op"] = 0.0
    for _ in range(probe_calls):
        step_probe()
    inside = sums["kernel"] / probe_calls
    start = clock()
    for _ in range(probe_calls):
        op_probe()
    around = (clock() - start) / probe_calls
    start = clock()
    for _ in range(probe_calls):
        noop()
    around -= (clock() - start) / probe_calls
    sums["kernel"] = sums["op"] = 0.0

    swapped = []
    for run, step in zip(original, cg.steps, strict=True):
        names = run.__code__.co_freevars
        if isinstance(step[0], ExternCall) and "fn" in names:
            cell = run.__closure__[names.index("fn")]
            swapped.append((cell, cell.cell_contents))
            cell.cell_contents = timed_op(cell.cell_contents)
    cg._run = [
        timed(run, "extern" if isinstance(step[0], ExternCall) else "kernel")
        for run, step in zip(original, cg.steps, strict=True)
    ]
    try:
        samples = {kind: [] for kind in sums}
        for _ in range(rounds):
            sums["kernel"] = sums["extern"] = sums["op"] = 0.0
            start = clock()
            for _ in range(calls):
                cg(*inputs)
            sums["graph"] = clock() - start
            for kind in samples:
                samples[kind].append(sums[kind] / calls)
    finally:
        cg._run = original
        for cell, fn in swapped:
            cell.cell_contents = fn
    result = {kind: statistics.median(v) * 1e6 for kind, v in samples.items()}
    externs_timed = sum(isinstance(step[0], ExternCall) for step in cg.steps)
    result["kernel"] -= (len(cg.steps) - externs_timed) * inside * 1e6
    result["extern"] -= (externs_timed * inside + len(swapped) * around) * 1e6
    result["op"] -= len(swapped) * inside * 1e6
    result["graph"] = plain
    return result


def extern_calls(cg) -> dict[str, int]:
    """How many extern calls of each kernel the graph makes."""
    counts: dict[str, int] = {}
    for b in cg.program.buffers:
        if isinstance(b, ExternCall) and b.kernel != externs.OUTPUT_KERNEL:
            counts[b.kernel] = counts.get(b.kernel, 0) + 1
    return counts


def breakdown(compiled, kwargs, calls: int, rounds: int) -> dict:
    """torchsmith's per-call time split into its pieces (see the module docstring), microseconds."""
    rec = Recorder()
    rec.record(compiled, kwargs)
    if not all(g(L, G) for g, L, G in rec.entered):
        raise RuntimeError("a recorded guard does not hold on its recorded arguments: its time means nothing")
    guard = sum(_per_call_us(lambda g=g, L=L, G=G: g(L, G), calls, rounds) for g, L, G in rec.entered)
    parts = {"graph": 0.0, "kernel": 0.0, "extern": 0.0, "op": 0.0}
    by_kernel: dict[str, int] = {}
    for cg, x in rec.graphs:
        for kind, us in step_times_us(cg, x, calls, rounds).items():
            parts[kind] += us
        for kernel, n in extern_calls(cg).items():
            by_kernel[kernel] = by_kernel.get(kernel, 0) + n
    return {
        "guard_us": guard,
        "graph_us": parts["graph"],
        "kernel_steps_us": parts["kernel"],
        "extern_steps_us": parts["extern"],
        "extern_op_us": parts["op"],
        "extern_python_us": parts["extern"] - parts["op"],
        "guard_functions": len(rec.entered),
        "graphs": len(rec.graphs),
        "extern_calls": sum(by_kernel.values()),
        "extern_calls_by_kernel": by_kernel,
        "guard_exprs": sum(
            len(e.guard_set.exprs)
            for cache in compiled._session.caches.values()
            for e in cache.entries
            if any(e.guard is g for g, _, _ in rec.entered)
        ),
    }


def measure(name: str, rounds: int, warmup: int) -> dict:
    import torch._dynamo

    model = BY_NAME[name].build()
    kwargs = inputs_of(name)
    with torch.no_grad():
        expected = model(**kwargs)
        ts = torchsmith.compile(model)
        start = time.perf_counter()
        same(expected, ts(**kwargs))
        ts_first = time.perf_counter() - start
        torch._dynamo.reset()
        tc = torch.compile(model, backend="inductor")  # the baseline only
        start = time.perf_counter()
        same(expected, tc(**kwargs))
        tc_first = time.perf_counter() - start
        fns = {"eager": model, "torch.compile": tc, "torchsmith": ts}
        for fn in fns.values():
            for _ in range(warmup):
                fn(**kwargs)
        once = _per_call_us(lambda: model(**kwargs), 3, 1)
        calls = max(5, min(500, round(30_000 / once)))  # rounds of about 30 ms of eager time
        samples = interleaved_times({k: (lambda f=f: f(**kwargs)) for k, f in fns.items()}, rounds, calls,
                                    clock=CLOCK, rotate=True)
        row = {k: statistics.median(v) * 1e6 for k, v in samples.items()}
        row["best"] = {k: min(v) * 1e6 for k, v in samples.items()}
        parts = breakdown(ts, kwargs, calls, max(3, rounds // 2))
        torch._dynamo.reset()
    return {
        "name": name,
        "eager_us": row["eager"],
        "torch_compile_us": row["torch.compile"],
        "torchsmith_us": row["torchsmith"],
        "best_us": row["best"],
        "vs_torch_compile": row["torch.compile"] / row["torchsmith"],
        "first_call_s": {"torchsmith": ts_first, "torch.compile": tc_first},
        "breakdown": parts,
        "calls_per_round": calls,
        "measured": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }


def extern_micro(rounds: int) -> list[dict]:
    """Per extern kind at GPT-2's sizes: the torch function alone, `run_extern`'s general path and
    the planned step (`extern_plan.static_extern_step`), microseconds per call."""
    from torchsmith.inductor import compile_graph
    from torchsmith.inductor.runtime.extern_plan import static_extern_step
    from torchsmith.inductor.testing import make_graph

    f32 = torch.float32
    cases = {
        "mm [64, 64] @ [64, 128]": (
            {"x": ((64, 64), f32), "w": ((64, 128), f32)},
            lambda b, x, w: b.op("aten.mm.default", x, w),
        ),
        "addmm [64] + [64, 64] @ [64, 192]": (
            {"bias": ((192,), f32), "x": ((64, 64), f32), "w": ((64, 192), f32)},
            lambda b, bias, x, w: b.op("aten.addmm.default", bias, x, w),
        ),
        "bmm [8, 32, 16] @ [8, 16, 32]": (
            {"a": ((8, 32, 16), f32), "c": ((8, 16, 32), f32)},
            lambda b, a, c: b.op("aten.bmm.default", a, c),
        ),
    }
    rows = []
    for label, (types, body) in cases.items():
        cg = compile_graph(make_graph("extern", types, body))
        (call,) = [b for b in cg.program.buffers if isinstance(b, ExternCall)]
        inputs = [torch.randn(*shape) for shape, _ in types.values()]
        tensors = {b.name: t for b, t in zip(cg.program.inputs, inputs)}
        slot_of = {name: k for k, name in enumerate(tensors)}
        slot_of[call.name] = len(slot_of)
        layouts = {b.name: b.layout for b in (*cg.program.inputs, call)}
        step = static_extern_step(call, slot_of, layouts, [])
        values = [*tensors.values(), None]
        fn = externs.kernel_function(call.kernel)
        args = [tensors[v.buffer] for v in call.args]
        times = interleaved_times(
            {
                "op": lambda fn=fn, args=args: fn(*args),
                "general": lambda call=call, tensors=tensors: externs.run_extern(call, tensors, {}),
                "planned": lambda step=step, values=values: step(values, {}, [], {}),
            },
            rounds,
            2000,
            clock=CLOCK,
        )
        row = {"case": label, "kernel": call.kernel}
        row.update({k: statistics.median(v) * 1e6 for k, v in times.items()})
        rows.append(row)
        print(
            f"{label} ({call.kernel}): op {row['op']:.1f} us, run_extern {row['general']:.1f} us, "
            f"planned {row['planned']:.1f} us",
            flush=True,
        )
    return rows


def render(report: dict) -> str:
    m, s = report["machine"], report["settings"]
    rows = sorted(report["rows"].values(), key=lambda r: r["vs_torch_compile"])
    lines = [
        "# Per-call time of small models on the CPU: eager, torch.compile, torchsmith (inductor)",
        "",
        f"Machine: {m['cpu']}, {m['cpu_count']} CPUs shared with other jobs (1 torch thread, "
        f"OMP_NUM_THREADS=1), {m['platform']}; Python {m['python']}, torch {m['torch']}; {m['date']} "
        "(last run; each row has its own date in percall_cpu.json).",
        f"The zoo's configurations (2 layers, hidden 64) at batch {BATCH}, sequence {SEQ}, under "
        f"torch.no_grad(); median of {s['rounds']} rounds of about 30 ms of eager time, the three "
        f"systems taking turns each round (each round starting with the next one), "
        f"after {s['warmup']} warm-up calls each; "
        + ("times are this thread's CPU time (other jobs' slices of the shared cores left out). "
           if s.get("clock") == "thread" else "times are wall time. ")
        +
        "vs torch.compile > 1: torchsmith is faster. Losses first. Other jobs share the 2 cores: one run's "
        "ratios swing by about 20% between runs, so the best-of column and repeated runs read steadier. "
        "In the breakdown, glue is what is left of the call's median after the pieces timed alone, and "
        "carries that noise.",
        "",
        "| model | eager µs | torch.compile µs | torchsmith µs | vs torch.compile "
        "| best eager / tc / ts µs |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        b = r["best_us"]
        lines.append(
            f"| {r['name']} | {r['eager_us']:.0f} | {r['torch_compile_us']:.0f} | {r['torchsmith_us']:.0f} "
            f"| {r['vs_torch_compile']:.2f}x | {b['eager']:.0f} / {b['torch.compile']:.0f} / "
            f"{b['torchsmith']:.0f} |"
        )
    lines += [
        "",
        "## Where torchsmith's call goes (µs, each piece timed alone on the same inputs)",
        "",
        "guard: the guard functions run (expressions in them); glue: the call minus guard and graph "
        "(capture's generated code, autograd_aot's runtime, backend wrappers); graph: the inductor "
        "graph's call as it runs (its steps written out as one function). The steps are timed one by "
        "one through the wrapper's step loop, less the timers' own cost, so they also carry that "
        "loop's Python and may add up to more than the graph: C++ steps: kernels and their "
        "allocations; extern op: the library calls' torch functions alone; extern Python: what each "
        "library call costs around them.",
        "",
        "| model | call | guard (exprs) | glue | graph | C++ steps | extern op | extern Python "
        "(calls) | per extern call |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        p = r["breakdown"]
        glue = r["torchsmith_us"] - p["guard_us"] - p["graph_us"]
        per = p["extern_python_us"] / p["extern_calls"] if p["extern_calls"] else 0.0
        lines.append(
            f"| {r['name']} | {r['torchsmith_us']:.0f} | {p['guard_us']:.0f} ({p['guard_exprs']}) "
            f"| {glue:.0f} "
            f"| {p['graph_us']:.0f} | {p['kernel_steps_us']:.0f} | {p['extern_op_us']:.0f} "
            f"| {p['extern_python_us']:.0f} ({p['extern_calls']}) | {per:.1f} |"
        )
    before = report.get("before")
    if before:
        lines += [
            "",
            f"## Before this work (commit {before['commit']}, run {before['date']} on the same machine)",
            "",
            "Speed against torch.compile in the same process (> 1: torchsmith faster), so the machine's "
            "load cancels out as far as it can; the earlier commit also lacks other changes made since "
            "(lowering, fusion). Rows in percall_cpu_before.json.",
            "",
            "| model | before: torchsmith / torch.compile µs | vs torch.compile before "
            "| now: torchsmith / torch.compile µs | vs torch.compile now |",
            "|---|---:|---:|---:|---:|",
        ]
        for r in rows:
            b = before["rows"].get(r["name"])
            if b:
                lines.append(
                    f"| {r['name']} | {b['torchsmith_us']:.0f} / {b['torch_compile_us']:.0f} "
                    f"| {b['vs_torch_compile']:.2f}x "
                    f"| {r['torchsmith_us']:.0f} / {r['torch_compile_us']:.0f} "
                    f"| {r['vs_torch_compile']:.2f}x |"
                )
    if report.get("externs"):
        lines += [
            "",
            "## One library call from the wrapper (µs per call, GPT-2's sizes)",
            "",
            "op: the torch function alone; run_extern: the general path (views, parameters and output "
            "checks decided per call); planned: the step planned when a graph without size symbols "
            "is built.",
            "",
            "| call | kernel | op | run_extern | planned |",
            "|---|---|---:|---:|---:|",
        ]
        for r in report["externs"]:
            lines.append(
                f"| {r['case']} | {r['kernel']} | {r['op']:.1f} | {r['general']:.1f} | {r['planned']:.1f} |"
            )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", help="comma-separated model names")
    parser.add_argument("--quick", action="store_true", help="3 rounds, nothing written")
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--keep-caches", action="store_true", help="use the usual disk caches")
    parser.add_argument("--clock", choices=("wall", "thread"), default="wall",
                        help="wall time, or this thread's CPU time (for a machine other jobs share)")
    args = parser.parse_args()
    global CLOCK
    CLOCK = time.thread_time if args.clock == "thread" else time.perf_counter
    names = args.only.split(",") if args.only else list(MODELS)
    rounds, warmup = (3, 5) if args.quick else (args.rounds, 20)
    torch.set_num_threads(1)
    warnings.simplefilter("ignore")
    import transformers

    transformers.logging.set_verbosity_error()
    native = prepare_native()
    report = {"machine": machine(), "settings": {"rounds": rounds, "warmup": warmup, "clock": args.clock,
                                                 **native},
              "rows": {}}
    before_path = RESULTS / "percall_cpu_before.json"
    if before_path.exists():  # the same benchmark run at an earlier commit, kept for comparison
        before = json.loads(before_path.read_text())
        report["before"] = {"commit": before.get("commit", "?"), "date": before["machine"]["date"],
                            "rows": before["rows"]}
    if not args.quick and JSON_PATH.exists():
        report["rows"] = json.loads(JSON_PATH.read_text())["rows"]
    report["externs"] = extern_micro(rounds)
    for name in names:
        row = measure(name, rounds, warmup)
        report["rows"][name] = row
        p = row["breakdown"]
        print(
            f"{name}: eager {row['eager_us']:.0f} us, torch.compile {row['torch_compile_us']:.0f} us, "
            f"torchsmith {row['torchsmith_us']:.0f} us (guard {p['guard_us']:.0f}, "
            f"graph {p['graph_us']:.0f}: "
            f"C++ {p['kernel_steps_us']:.0f}, extern op {p['extern_op_us']:.0f} + Python "
            f"{p['extern_python_us']:.0f} over {p['extern_calls']} calls)",
            flush=True,
        )
        if not args.quick:
            JSON_PATH.write_text(json.dumps(report, indent=1) + "\n")
            MD_PATH.write_text(render(report))
    if args.quick:
        print(render(report))


if __name__ == "__main__":
    main()
