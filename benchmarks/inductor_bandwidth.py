"""The bandwidth micro-suite of bench_inductor.py (--device cuda): single memory-bound kernels at sizes
far past the L2 cache, each run by eager, torch.compile and torchsmith, reported as GB/s (the fewest
bytes the kernel must move: inputs read once, outputs written once) and as a share of the copy
bandwidth `dst.copy_(src)` reaches in the same process. Issue 7's bar: at least 80% of copy.

Timing: CUDA events around `calls` back-to-back calls, the median of `rounds` rounds, the systems
taking turns in each round.
"""

from __future__ import annotations

import statistics
import time

import torch
import torch.nn.functional as F

ROWS, COLS = 32768, 4096  # 128 Mi elements: 512 MB in float32, 256 MB in bfloat16 (L2: 60 MB)


def _kernels(quick: bool):
    """name -> (title, function, input shapes, bytes moved per element of the first input)."""
    rows, cols = (256, 512) if quick else (ROWS, COLS)
    return {
        "copy": (f"copy {rows}x{cols} (dst.copy_(src))", None, [(rows, cols)], 2),
        "pointwise": (
            f"sigmoid(x) * y + 1, {rows}x{cols}",
            lambda x, y: torch.sigmoid(x) * y + 1,
            [(rows, cols), (rows, cols)],
            3,
        ),
        "softmax": (f"softmax {rows}x{cols}, last dim", lambda x: torch.softmax(x, -1), [(rows, cols)], 2),
        "layer_norm": (
            f"layer_norm {rows}x{cols} (weight, bias)",
            lambda x, w, b: F.layer_norm(x, (x.shape[-1],), w, b),
            [(rows, cols), (cols,), (cols,)],
            2,
        ),
        "column_sum": (f"x.sum(0), x {rows}x{cols}", lambda x: x.sum(0), [(rows, cols)], 1),
        "column_sum_wide": (f"x.sum(0), x {cols}x{rows}", lambda x: x.sum(0), [(cols, rows)], 1),
    }


def _time(fns: dict, calls: int, rounds: int, device: str) -> dict[str, float]:
    """Median seconds per call of each function, CUDA events (a host clock on CPU: smoke runs),
    systems interleaved per round."""
    samples = {name: [] for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            if device == "cpu":
                start_s = time.perf_counter()
                for _ in range(calls):
                    fn()
                samples[name].append((time.perf_counter() - start_s) / calls)
                continue
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            torch.cuda.synchronize()
            start.record()
            for _ in range(calls):
                fn()
            end.record()
            end.synchronize()
            samples[name].append(start.elapsed_time(end) / 1e3 / calls)
    return {name: statistics.median(times) for name, times in samples.items()}


def _error(expected: torch.Tensor, got: torch.Tensor, dtype) -> dict:
    e, g = expected.double(), got.double()
    scale = max(1.0, e.abs().max().item())
    tol = (1e-3 if dtype == torch.float32 else 3e-2) * scale
    worst = (e - g).abs().max().item()
    return {"max_abs_err": worst, "allclose": bool(worst <= tol)}


def run_suite(
    dtype: torch.dtype, quick: bool, rounds: int, only: list[str] | None = None, device: str = "cuda"
) -> dict:
    """Every kernel of the suite on the GPU in `dtype`: per system GB/s, share of copy, error, compile s."""
    torch.manual_seed(0)
    out = {"rows": [], "dtype": str(dtype).split(".")[-1]}
    calls = 3 if quick else 10
    copy_gbs = None
    for name, (title, fn, shapes, per_element) in _kernels(quick).items():
        if only and name not in only and name != "copy":
            continue
        row, gbs = _measure(name, title, fn, shapes, per_element, dtype, calls, rounds, copy_gbs, device)
        copy_gbs = gbs if fn is None else copy_gbs
        out["copy_gbs"] = copy_gbs
        out["rows"].append(row)
        if device != "cpu":
            torch.cuda.empty_cache()
    return out


def _measure(name, title, fn, shapes, per_element, dtype, calls, rounds, copy_gbs, device):
    """One kernel of the suite: its row, and (for the copy) the copy bandwidth."""
    import torchsmith

    sync = torch.cuda.synchronize if device != "cpu" else lambda: None
    inputs = [torch.randn(s, device=device).to(dtype) for s in shapes]
    nbytes = inputs[0].numel() * inputs[0].element_size() * per_element
    row = {"kernel": name, "title": title, "bytes": nbytes, "systems": {}}
    if fn is None:
        dst = torch.empty_like(inputs[0])
        seconds = _time({"eager": lambda: dst.copy_(inputs[0])}, calls, rounds + 2, device)["eager"]
        row["systems"]["eager"] = {"median_s": seconds, "gbs": nbytes / seconds / 1e9, "of_copy": 1.0}
        return row, nbytes / seconds / 1e9
    expected = fn(*inputs)
    systems = {"eager": fn}
    row["systems"]["eager"] = {}
    for system, wrap in (("torch.compile", torch.compile), ("torchsmith", torchsmith.compile)):
        try:
            compiled = wrap(fn)
            sync()
            start = time.perf_counter()
            got = compiled(*inputs)
            sync()
            row["systems"][system] = dict(
                _error(expected, got, dtype), first_call_s=time.perf_counter() - start
            )
            systems[system] = compiled
        except Exception as e:  # noqa: BLE001 - one system failing must not hide the others
            row["systems"][system] = {"error": f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"}
    steps = {system: (lambda f=f: f(*inputs)) for system, f in systems.items()}
    for step in steps.values():  # warm-up: autotuning, first launches
        step()
    for system, seconds in _time(steps, calls, rounds, device).items():
        gbs = nbytes / seconds / 1e9
        row["systems"][system].update(median_s=seconds, gbs=gbs)
        if copy_gbs:
            row["systems"][system]["of_copy"] = gbs / copy_gbs
    print(summarize_row(row), flush=True)
    return row, None


def summarize_row(row: dict) -> str:
    cells = []
    for system in ("eager", "torch.compile", "torchsmith"):
        cell = row["systems"].get(system, {})
        if "gbs" in cell:
            share = f" ({cell['of_copy']:.0%})" if "of_copy" in cell else ""
            cells.append(f"{system} {cell['gbs']:.0f} GB/s{share}")
        elif "error" in cell:
            cells.append(f"{system} error")
    return f"bandwidth {row['kernel']:<16} " + ", ".join(cells)


def markdown(suite: dict) -> list[str]:
    """The suite's table (lines), or nothing when it did not run."""
    if not suite or not suite.get("rows"):
        return []
    copy = suite.get("copy_gbs")
    lines = [
        "",
        "## Bandwidth micro-suite",
        "",
        f"Single memory-bound kernels in {suite.get('dtype')}, far past the 60 MB L2: GB/s = fewest bytes "
        "moved (inputs read once, outputs written once) / median time (CUDA events), and the share of the "
        f"copy bandwidth measured in the same process ({copy:.0f} GB/s). Issue 7's bar: torchsmith at "
        "least 80%."
        if copy
        else "Copy bandwidth not measured.",
        "",
        "| kernel | eager GB/s | torch.compile GB/s | torchsmith GB/s | torchsmith error (allclose) "
        "| first call s (torch.compile / torchsmith) |",
        "|---|---:|---:|---:|---|---|",
    ]
    for row in suite["rows"]:
        cells = []
        for system in ("eager", "torch.compile", "torchsmith"):
            cell = row["systems"].get(system, {})
            if "gbs" in cell:
                share = f" ({cell['of_copy']:.0%})" if "of_copy" in cell else ""
                cells.append(f"{cell['gbs']:.0f}{share}")
            else:
                cells.append("error" if "error" in cell else "-")
        ts = row["systems"].get("torchsmith", {})
        err = (
            "-"
            if "max_abs_err" not in ts
            else f"{ts['max_abs_err']:.1e} ({'yes' if ts['allclose'] else '**NO**'})"
        )
        first = " / ".join(
            f"{row['systems'].get(s, {}).get('first_call_s', float('nan')):.2f}"
            for s in ("torch.compile", "torchsmith")
        )
        lines.append(
            f"| {row['title']} | "
            + " | ".join(cells)
            + f" | {err} | {first if row['kernel'] != 'copy' else '-'} |"
        )
    errors = [
        f"- {row['kernel']}, {system}: {cell['error']}"
        for row in suite["rows"]
        for system, cell in row["systems"].items()
        if "error" in cell
    ]
    return lines + (["", *errors] if errors else [])
