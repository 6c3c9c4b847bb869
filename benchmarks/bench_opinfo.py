"""The OpInfo sweep: every OpInfo of torch's test database through torchsmith.compile and through
torch.compile (both with their inductor backend, CPU) against eager, in one run.

Per op and compiler: pass, wrong, error or fallback (tests/opinfo/opinfo_sweep.py says what each
means), over float32, int64 and bfloat16 samples where the op supports them. Writes
benchmarks/results/opinfo.{md,json}: the counts, every op torchsmith gets wrong first, then the ops
where torchsmith errors or falls back and torch.compile passes.

    python benchmarks/bench_opinfo.py                    # hours on two cores: every op, both compilers
    python benchmarks/bench_opinfo.py --only torchsmith  # torchsmith's column alone
    python benchmarks/bench_opinfo.py --ops add,softmax --samples 1
"""

import argparse
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
    parser.add_argument("--quick", action="store_true", help="20 ops, one sample: a smoke run")
    options = parser.parse_args(argv)
    warnings.simplefilter("ignore")
    ops = opinfo_sweep.op_database()
    if options.ops:
        wanted = set(options.ops.split(","))
        ops = [op for op in ops if op.name in wanted or f"{op.name}.{op.variant_test_name}" in wanted]
    if options.quick:
        ops, options.samples = ops[:20], 1
    compilers = [options.only] if options.only else list(COMPILERS)
    rows, start = {}, time.time()
    for i, op in enumerate(ops):
        for name in compilers:
            result = opinfo_sweep.sweep_op(COMPILERS[name](), op, samples_per_dtype=options.samples)
            rows.setdefault(result.op, {})[name] = result
        print(f"[{i + 1}/{len(ops)} {time.time() - start:.0f}s] " + "  ".join(
            f"{n}: {r.status}" for n, r in rows[result.op].items()) + f"  {result.op}", flush=True)
    write(rows, compilers, options, time.time() - start)
    return 0


def write(rows: dict, compilers: list, options, seconds: float) -> None:
    totals = {c: dict.fromkeys(opinfo_sweep.ORDER, 0) for c in compilers}
    for by_compiler in rows.values():
        for c, r in by_compiler.items():
            totals[c][r.status] += 1
    if options.quick or options.ops:
        print(json.dumps(totals, indent=1))
        return
    info = common.machine()
    record = {"machine": info, "seconds": round(seconds), "samples_per_dtype": options.samples,
              "totals": totals,
              "ops": {op: {c: {"status": r.status, "samples": r.samples, "problem": r.first_problem}
                           for c, r in by_compiler.items()} for op, by_compiler in rows.items()}}
    common.RESULTS.mkdir(exist_ok=True)
    (common.RESULTS / "opinfo.json").write_text(json.dumps(record, indent=1) + "\n")
    lines = ["# OpInfo sweep: torch's op samples through torchsmith.compile and torch.compile (CPU)", "",
             f"{info['date']}, {info['cpu']}, torch {info['torch']}, {len(rows)} OpInfos, up to "
             f"{options.samples} samples per dtype (float32, int64, bfloat16), {seconds / 60:.0f} min.", "",
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
