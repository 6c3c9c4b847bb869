"""The OpInfo sweep: every OpInfo of torch's test database through torchsmith.compile and through
torch.compile (both with their inductor backend, CPU) against eager, in one run.

Per op and compiler: pass, wrong, error or fallback (tests/opinfo/opinfo_sweep.py says what each
means), over float32, int64 and bfloat16 samples where the op supports them. Writes
benchmarks/results/opinfo.{md,json}: the counts, every op torchsmith gets wrong first, then the ops
where torchsmith errors or falls back and torch.compile passes.

    python benchmarks/bench_opinfo.py                    # hours on two cores: every op, both compilers
    python benchmarks/bench_opinfo.py --only torchsmith  # torchsmith's column alone
    python benchmarks/bench_opinfo.py --ops add,softmax --samples 1
    python benchmarks/bench_opinfo.py --ops fft.fft,mul --dtypes complex64   # other dtypes than the three

Spread over processes (or machines) with shards, each writing its rows as it goes, then merge:

    python benchmarks/bench_opinfo.py --shard 3/16 --rows shard3.json   # resumes from shard3.json
    python benchmarks/bench_opinfo.py --merge shard*.json               # writes results/opinfo.*
"""

import argparse
import dataclasses
import json
import pathlib
import sys
import time
import warnings

ROOT = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT.parent / "tests" / "opinfo"))

import common  # noqa: E402
import opinfo_sweep  # noqa: E402

COMPILERS = {"torchsmith": opinfo_sweep.torchsmith_compiler, "torch.compile": opinfo_sweep.torch_compiler}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=sorted(COMPILERS), help="run one compiler")
    parser.add_argument("--ops", help="comma-separated OpInfo names (default: all)")
    parser.add_argument("--samples", type=int, default=2, help="samples per op and dtype")
    parser.add_argument("--dtypes", help="comma-separated dtypes to sweep (default: float32,int64,bfloat16)")
    parser.add_argument("--quick", action="store_true", help="20 ops, one sample: a smoke run")
    parser.add_argument("--shard", help="I/N: sweep every N-th op starting at the I-th (0-based)")
    parser.add_argument("--rows", help="JSON file of rows: written after every op, read to resume")
    parser.add_argument("--merge", nargs="+", metavar="ROWS", help="write the results from --rows files")
    options = parser.parse_args(argv)
    warnings.simplefilter("ignore")
    if options.merge:
        return merge(options)
    dtypes = opinfo_sweep.DTYPES
    if options.dtypes:
        dtypes = tuple(_dtype(name) for name in options.dtypes.split(","))
    try:
        import expecttest  # noqa: F401  (torch's OpInfo database imports it)
    except ImportError:
        sys.exit("bench_opinfo needs expecttest (pip install expecttest; on a machine without a package "
                 "index, copy its one-module package from a machine that has it onto PYTHONPATH)")
    ops = opinfo_sweep.op_database()
    if options.ops:
        wanted = set(options.ops.split(","))
        ops = [op for op in ops if op.name in wanted or f"{op.name}.{op.variant_test_name}" in wanted]
    if options.quick:
        ops, options.samples = ops[:20], 1
    if options.shard:
        index, count = (int(part) for part in options.shard.split("/"))
        ops = ops[index::count]
    compilers = [options.only] if options.only else list(COMPILERS)
    rows_file = pathlib.Path(options.rows) if options.rows else None
    rows, _, before = read_rows([rows_file]) if rows_file and rows_file.exists() else ({}, None, 0.0)
    start = time.time() - before
    for i, op in enumerate(ops):
        name_of_op = op.name if not op.variant_test_name else f"{op.name}.{op.variant_test_name}"
        if all(c in rows.get(name_of_op, {}) for c in compilers):
            continue
        for name in compilers:
            result = opinfo_sweep.sweep_op(COMPILERS[name](), op, dtypes, samples_per_dtype=options.samples)
            rows.setdefault(result.op, {})[name] = result
        print(f"[{i + 1}/{len(ops)} {time.time() - start:.0f}s] " + "  ".join(
            f"{n}: {r.status}" for n, r in rows[result.op].items()) + f"  {result.op}", flush=True)
        if rows_file:
            write_rows(rows_file, rows, time.time() - start)
    if not rows_file:
        write(rows, compilers, options, time.time() - start)
    return 0


def _dtype(name: str):
    """`torch.<name>` as a dtype, or exit naming the bad name."""
    import torch

    dtype = getattr(torch, name.strip().removeprefix("torch."), None)
    if not isinstance(dtype, torch.dtype):
        sys.exit(f"--dtypes: {name!r} is not a torch dtype (float32, int64, bfloat16, complex64, ...)")
    return dtype


def write_rows(path: pathlib.Path, rows: dict, seconds: float) -> None:
    """Every op's results so far, replaced atomically so a killed run leaves a readable file."""
    data = {"machine": common.machine(), "seconds": seconds,
            "rows": {op: {c: dataclasses.asdict(r) for c, r in by.items()} for op, by in rows.items()}}
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data) + "\n")
    tmp.replace(path)


def read_rows(paths) -> tuple[dict, dict | None, float]:
    """The rows of one or more --rows files merged, the machine they ran on, the longest shard's time."""
    rows, machine, seconds = {}, None, 0.0
    for path in paths:
        data = json.loads(pathlib.Path(path).read_text())
        machine, seconds = machine or data["machine"], max(seconds, data["seconds"])
        for op, by in data["rows"].items():
            for c, r in by.items():
                rows.setdefault(op, {})[c] = opinfo_sweep.OpResult(**r)
    return rows, machine, seconds


def merge(options) -> int:
    """Writes results/opinfo.{md,json} from shard row files, on the machine the shards ran on."""
    rows, machine, seconds = read_rows(options.merge)
    compilers = sorted({c for by in rows.values() for c in by}, key=list(COMPILERS).index)
    write(rows, compilers, options, seconds, machine, shards=len(options.merge))
    return 0


def write(rows: dict, compilers: list, options, seconds: float, machine: dict | None = None,
          shards: int = 1) -> None:
    totals = {c: dict.fromkeys(opinfo_sweep.ORDER, 0) for c in compilers}
    for by_compiler in rows.values():
        for c, r in by_compiler.items():
            totals[c][r.status] += 1
    if options.quick or options.ops:
        print(json.dumps(totals, indent=1))
        return
    info = machine or common.machine()
    spread = f" in {shards} processes" if shards > 1 else ""
    record = {"machine": info, "seconds": round(seconds), "samples_per_dtype": options.samples,
              "totals": totals,
              "ops": {op: {c: {"status": r.status, "samples": r.samples, "problem": r.first_problem}
                           for c, r in by_compiler.items()} for op, by_compiler in rows.items()}}
    common.RESULTS.mkdir(exist_ok=True)
    (common.RESULTS / "opinfo.json").write_text(json.dumps(record, indent=1) + "\n")
    lines = ["# OpInfo sweep: torch's op samples through torchsmith.compile and torch.compile (CPU)", "",
             f"{info['date']}, {info['cpu']}, torch {info['torch']}, {len(rows)} OpInfos, up to "
             f"{options.samples} samples per dtype ({options.dtypes or 'float32, int64, bfloat16'}), "
             f"{seconds / 60:.0f} min{spread}.", "",
             "| compiler | ops | " + " | ".join(opinfo_sweep.ORDER) + " |", "|---|---|---|---|---|---|"]
    for c in compilers:
        lines.append(f"| {c} | {sum(totals[c].values())} | " + " | ".join(
            str(totals[c][s]) for s in opinfo_sweep.ORDER) + " |")
    lines += ["", "## torchsmith: wrong results, then errors and fallbacks where torch.compile passes", "",
              "| op | torchsmith | torch.compile | first problem |", "|---|---|---|---|"]
    ours = [(op, by) for op, by in rows.items() if "torchsmith" in by]
    ours.sort(key=lambda item: opinfo_sweep.ORDER.index(item[1]["torchsmith"].status))
    for op, by in ours:
        r, other = by["torchsmith"], by.get("torch.compile")
        if r.status == "pass" or (r.status != "wrong" and other is not None and other.status != "pass"):
            continue
        problem = (r.first_problem or "").replace("|", "\\|")
        lines.append(f"| {op} | {r.status} | {other.status if other else '-'} | {problem} |")
    (common.RESULTS / "opinfo.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines[:12]))


if __name__ == "__main__":
    sys.exit(main())
