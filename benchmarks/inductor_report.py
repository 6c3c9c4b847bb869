"""The numbers of bench_inductor.py as text: a profile of what torchsmith compiled, a one-line summary
per workload while the run goes, and the markdown table written to results/."""

from __future__ import annotations

from collections import Counter

from common import geomean

# Targets on a 2-core CPU (issue 6): geomean speedup at least torch.compile's, cold compile at most a
# fifth of torch.compile's, warm start under half a second per graph.
COLD_RATIO_TARGET = 0.2
WARM_PER_GRAPH_TARGET_S = 0.5


def profile_of(captured: int, errors: list[str], compiled: list) -> dict:
    """What torchsmith compiled, from the compiled graphs the inductor's device hook recorded:
    generated kernels, extern calls by op, ops that ran through their eager implementation, and the
    seconds of each compile step."""
    kernels, loop_buffers, externs, fallbacks, steps = 0, 0, Counter(), Counter(), Counter()
    compile_s = 0.0
    for graph, seconds in compiled:
        compile_s += seconds
        program = getattr(graph, "program", None)
        # `steps`: one tuple of buffers per generated kernel (loop buffers fused into it) or extern call.
        for step in getattr(graph, "steps", ()):
            if step and not hasattr(step[0], "kernel"):
                kernels += 1
                loop_buffers += len(step)
        for buffer in getattr(program, "buffers", ()):
            kernel = getattr(buffer, "kernel", None)
            if kernel is None:
                continue
            if getattr(buffer, "fallback", ""):
                fallbacks[kernel] += 1
            else:
                externs[kernel] += 1
        for op, _reason in getattr(program, "fallbacks", ()):
            fallbacks[op] += 1
        for step, s in getattr(graph, "timings", {}).items():
            steps[step] += s
    return {
        "captured": captured, "errors": errors, "compiled_graphs": len(compiled), "kernels": kernels,
        "loop_buffers": loop_buffers,
        "externs": dict(externs), "fallbacks": dict(fallbacks), "compile_s": compile_s,
        "compile_steps_s": dict(steps),
    }


def _status(row: dict) -> str:
    """How torchsmith's run went: ok, fell back (a graph ran eagerly), not compiled (capture found no
    graph: eager speed, counted as such), not built, or an error."""
    measure = row.get("measure", {})
    if "error" in measure:
        return "error"
    ts = measure.get("systems", {}).get("torchsmith")
    if ts is None:
        return "not built"
    if "error" in ts:
        return "error"
    profile = measure.get("profile", {})
    stats = measure.get("backend_stats", {})
    if profile.get("errors") or stats.get("backward_fallbacks"):
        return "fell back"
    if profile.get("captured") == 0:
        return "ok, not compiled (graph breaks: ran eagerly)"
    if profile.get("fallbacks"):
        return "ok, eager ops"
    return "ok"


def _ms(system: dict | None) -> str:
    return f"{system['median_s'] * 1e3:.3f}" if system and "median_s" in system else "-"


def _speedup(row: dict, system: str) -> float | None:
    systems = row.get("measure", {}).get("systems", {})
    eager, other = systems.get("eager", {}), systems.get(system, {})
    if "median_s" not in eager or "median_s" not in other:
        return None
    return eager["median_s"] / other["median_s"]


def _x(value: float | None) -> str:
    return f"{value:.2f}x" if value is not None else "-"


def _s(cell: dict | None, key: str = "first_call_s") -> str:
    if not cell:
        return "-"
    if "error" in cell:
        return "error"
    if cell.get("status") == "not built":
        return "not built"
    return f"{cell[key]:.2f}" if key in cell else "-"


def _err(system: dict | None) -> str:
    if not system:
        return "-"
    if "error" in system:
        return "error"
    close = "yes" if system.get("allclose") else "**NO**"
    return f"{system['max_abs_err']:.1e} ({close})"


def summarize(row: dict) -> str:
    """One line per workload while the run goes."""
    systems = row.get("measure", {}).get("systems", {})
    ts_err = systems.get("torchsmith", {})
    return (
        f"{row['workload']:<15} ms: eager {_ms(systems.get('eager')):>9}  torch.compile "
        f"{_ms(systems.get('torch.compile')):>9}  torchsmith {_ms(systems.get('torchsmith')):>9} "
        f"[{_status(row)}; err {_err(ts_err)}]  cold s: {_s(row.get('cold torch.compile'))} / "
        f"{_s(row.get('cold torchsmith'))}  warm s: {_s(row.get('warm torch.compile'))} / "
        f"{_s(row.get('warm torchsmith'))}"
        + (f"  measure error: {row['measure']['error']}" if "error" in row.get("measure", {}) else "")
    )


def _per_graph(cell: dict | None) -> str:
    if not cell or "first_call_s" not in cell or not cell.get("compiled_graphs"):
        return "-"
    return f"{cell['first_call_s'] / cell['compiled_graphs']:.2f}"


def _ratio(a: dict | None, b: dict | None) -> str:
    if not a or not b or "first_call_s" not in a or "first_call_s" not in b:
        return "-"
    return f"{a['first_call_s'] / b['first_call_s']:.2f}"


def _libraries(row: dict) -> str:
    cells = [row.get(f"{phase} torchsmith") or {} for phase in ("cold", "warm")]
    built = [str(c.get("build", {}).get("compiled", "-")) for c in cells]
    return " / ".join(built)


def _profile_cells(row: dict) -> list[str]:
    cell = row.get("cold torchsmith") or {}
    if "captured" not in cell:
        cell = row.get("measure", {}).get("profile", {})
    externs = ", ".join(f"{op.split('.')[-2] if op.count('.') > 1 else op} x{n}"
                        for op, n in sorted(cell.get("externs", {}).items()))
    fallbacks = ", ".join(f"{op} x{n}" for op, n in sorted(cell.get("fallbacks", {}).items()))
    steps = ", ".join(f"{k} {v:.2f}" for k, v in cell.get("compile_steps_s", {}).items())
    counts = [str(cell.get(key, "-")) for key in ("captured", "compiled_graphs", "kernels", "loop_buffers")]
    return counts + [externs or "-", fallbacks or "-", steps or "-"]


def _bandwidth(result: dict) -> list[str]:
    """Achieved bandwidth of the memory-bound workloads against the device's copy bandwidth."""
    copy = result.get("copy", {}).get("gbs")
    rows = [r for r in result["rows"] if r.get("memory_bound") and "io_bytes" in r.get("measure", {})]
    if not copy or not rows:
        return []
    lines = [
        "",
        "Memory-bound workloads: GB/s = (inputs + parameters + outputs) bytes / time, and in parentheses "
        f"the share of the copy bandwidth measured in this run ({copy:.1f} GB/s, `dst.copy_(src)`, "
        "read + write). Issue 7's bar (at least 80%) is for single memory-bound kernels: the "
        "bandwidth micro-suite below. These workloads can be compute-bound instead: the pointwise "
        "chain runs six transcendental functions per element.",
        "",
        "| workload | eager GB/s | torch.compile GB/s | torchsmith GB/s |",
        "|---|---:|---:|---:|",
    ]
    for row in rows:
        measure = row["measure"]
        cells = []
        for system in ("eager", "torch.compile", "torchsmith"):
            t = measure.get("systems", {}).get(system, {}).get("median_s")
            gbs = measure["io_bytes"] / t / 1e9 if t else None
            cells.append(f"{gbs:.1f} ({gbs / copy:.0%})" if gbs else "-")
        lines.append(f"| {row['workload']} | " + " | ".join(cells) + " |")
    return lines


def markdown(result: dict) -> str:
    """The results table: speed, correctness, cold and warm start, and what torchsmith compiled."""
    m, rows = result["machine"], result["rows"]
    gpu = f", GPU {m['gpu']}" if m.get("gpu") else ""
    mode = result.get("mode", "default")
    setting = f"{result['device']}, {result['dtype']}" + ("" if mode == "default" else f", mode={mode!r}")
    lines = [
        f"# Inductor benchmark: eager vs torch.compile vs torchsmith ({setting})",
        "",
        f"Command: `{result['command']}` (torchsmith backend `{result['backend']}`; whole run "
        f"{result['total_s']:.0f} s).",
        "",
    ]
    if result.get("cold_completed_by"):
        lines += [f"Cold processes that run did not reach or that failed ran afterwards: "
                  f"`{result['cold_completed_by']}`.", ""]
    lines += [
        f"Machine: {m['cpu']}, {m['cpu_count']} CPUs ({m['torch_threads']} torch threads){gpu}, "
        f"{m['platform']}; "
        f"Python {m['python']}, torch {m['torch']}, transformers {m.get('transformers')}, "
        f"torchsmith {m.get('torchsmith')}; {m['date']}.",
        "",
        f"Per-call time: median of {result['repeat']} rounds, the systems taking turns in each round, after "
        "warm-up; inference under `torch.no_grad()`, training = forward + backward + SGD step. Error: max "
        "abs difference from eager (outputs; for training the loss and every gradient), allclose at a "
        "tolerance relative to the largest output.",
        "",
        "| workload | eager ms | torch.compile ms | torchsmith ms | torch.compile speedup "
        "| torchsmith speedup | torchsmith status | torchsmith error (allclose) | torch.compile error |",
        "|---|---:|---:|---:|---:|---:|---|---|---|",
    ]
    speedups = {"torch.compile": [], "torchsmith": []}
    for row in rows:
        systems = row.get("measure", {}).get("systems", {})
        status = _status(row)
        for system in speedups:
            value = _speedup(row, system)
            ran_ok = system != "torchsmith" or status.startswith("ok")
            good = systems.get(system, {}).get("allclose") and ran_ok
            if value is not None and good:
                speedups[system].append(value)
        lines.append(
            f"| {row['title']} | {_ms(systems.get('eager'))} | {_ms(systems.get('torch.compile'))} "
            f"| {_ms(systems.get('torchsmith'))} | {_x(_speedup(row, 'torch.compile'))} "
            f"| {_x(_speedup(row, 'torchsmith'))} | {status} | {_err(systems.get('torchsmith'))} "
            f"| {_err(systems.get('torch.compile'))} |"
        )
    g_tc, g_ts = geomean(speedups["torch.compile"]), geomean(speedups["torchsmith"])
    lines += [
        "",
        "Geomean speedup over eager (workloads each system ran correctly; torchsmith only where status is "
        f"ok): torch.compile {_x(g_tc)} over {len(speedups['torch.compile'])}, torchsmith {_x(g_ts)} over "
        f"{len(speedups['torchsmith'])} of {len(rows)} workloads. Target: torchsmith at least "
        "torch.compile's.",
    ]
    lines += _bandwidth(result)
    if result.get("bandwidth"):
        from inductor_bandwidth import markdown as bandwidth_markdown

        lines += bandwidth_markdown(result["bandwidth"])
    lines += [
        "",
        "## Compile time",
        "",
        "First call in a new process (seconds): cold with empty caches, warm with the caches the cold run "
        f"filled. Targets: cold torchsmith at most {COLD_RATIO_TARGET:.0%} of torch.compile's, warm start "
        f"under {WARM_PER_GRAPH_TARGET_S} s per graph. Graphs: torch.compile's captured graphs; torchsmith's "
        "compiled graphs (forward and backward count apart). C++ libraries built: cold / warm. Training "
        "processes take one throwaway optimizer step before the timed one: torch's first optimizer step "
        "imports torch._dynamo (about a second), which eager pays as well.",
        "",
    ]
    if result.get("no_cold") and (result.get("quick") or result.get("no_warm")):
        lines += ["With --no-cold and no warm-start processes, the cold columns are the first calls in the "
                  "measuring process, caches empty (after eager; torch.compile first, then torchsmith): "
                  "cold compiles without the process start and imports.", ""]
    elif "--one-process" in result.get("command", ""):
        lines += ["With --one-process there are no warm-start processes: every workload is measured in one "
                  "process, and each cold column is a fresh process of its own, run after the measuring "
                  "one.", ""]
    elif result.get("quick") or result.get("no_warm"):
        lines += ["The warm start is read in the measuring process (torch.compile compiled "
                  "first, then torchsmith), not in a process of its own.", ""]
    lines += [
        "| workload | cold torch.compile | cold torchsmith | ratio | warm torch.compile | warm torchsmith "
        "| torch.compile graphs | torchsmith graphs | warm torchsmith per graph | libraries built |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    one_process = "--one-process" in result.get("command", "")
    in_measure = []  # --one-process rows whose cold process never ran: the measuring process's first call
    for row in rows:
        cold_tc, cold_ts = row.get("cold torch.compile"), row.get("cold torchsmith")
        warm_tc, warm_ts = row.get("warm torch.compile"), row.get("warm torchsmith")
        mark = ""
        if one_process and any((cell or {}).get("in_measure") for cell in (cold_tc, cold_ts)):
            mark = " *"
            in_measure.append(row["workload"])
        lines.append(
            f"| {row['workload']}{mark} | {_s(cold_tc)} | {_s(cold_ts)} | {_ratio(cold_ts, cold_tc)} "
            f"| {_s(warm_tc)} | {_s(warm_ts)} | {(warm_tc or {}).get('graphs', '-')} "
            f"| {(warm_ts or {}).get('compiled_graphs', '-')} | {_per_graph(warm_ts)} | {_libraries(row)} |"
        )
    if in_measure:
        lines += ["", f"\\* {', '.join(in_measure)}: the run was cut before its cold processes; these are "
                  "the first calls in the measuring process (torch.compile's first, after the workloads "
                  "above, its imports and compile workers already warm), not cold processes."]
    lines += [
        "",
        "## What torchsmith compiled",
        "",
        "From the cold run: graphs captured, prims graphs compiled, generated kernels (and the loop buffers "
        "fused into them), extern calls "
        "(library kernels called from the wrapper), ops that ran through their eager implementation, and "
        "compile seconds by step.",
        "",
        "| workload | captured | compiled | kernels | loop buffers | extern calls | eager-implemented ops "
        "| compile steps (s) |",
        "|---|---:|---:|---:|---:|---|---|---|",
    ]
    notes = []
    for row in rows:
        lines.append(f"| {row['workload']} | " + " | ".join(_profile_cells(row)) + " |")
        for key, cell in row.items():
            if isinstance(cell, dict) and "error" in cell:
                notes.append(f"{row['workload']}, {key}: {cell['error']}")
            for name, system in (cell.get("systems", {}) if isinstance(cell, dict) else {}).items():
                if "error" in system:
                    notes.append(f"{row['workload']}, {name}: {system['error']}")
            for error in (cell.get("errors", []) if isinstance(cell, dict) else []):
                notes.append(f"{row['workload']}, {key}, torchsmith backend: {error}")
        for w in row.get("measure", {}).get("warnings", []):
            notes.append(f"{row['workload']}, warning: {w}")
    if notes:
        lines += ["", "Errors and fallbacks:", ""] + [f"- {n}" for n in dict.fromkeys(notes)]
    return "\n".join(lines) + "\n"
