"""IR speed: build, verify, print, parse, JSON dump and load a 10,000-node graph (best of N runs).

    python benchmarks/bench_ir.py            # 10,000 nodes, best of 3 (after one warm-up run)
    python benchmarks/bench_ir.py --quick    # 2,000 nodes, best of 2

The graph comes from `torchsmith.ir.random_graph` (aten and torch-level ops, symbolic shapes,
every kind of constant). "build" replays it through the public `GraphBuilder` with explicit output
types, which is what a capture or lowering stage does. Each of the IR steps should take well under a
second on a 2-core machine; to_fx / from_fx are listed too, but their time is mostly fx's own
(node creation and Python code generation in `GraphModule.recompile`).

Writes benchmarks/results/ir.md (a table with the machine) and benchmarks/results/ir.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import sympy
from common import RESULTS, machine  # benchmarks/ is on sys.path when this script runs

import torchsmith.ir as ir
from torchsmith.ir import Graph, GraphBuilder, format_graph, from_fx, parse_graph, to_fx, verify
from torchsmith.ir.random_graph import random_graph
from torchsmith.ir.serialize import dumps, loads

BUDGET_SECONDS = 1.0  # the bar for the IR steps: "each well under a second"
_BUILDER_KEYWORDS = {"out_type", "out_name", "source"}


def rebuild(graph: Graph) -> Graph:
    """The same graph, built again node by node through GraphBuilder.op with explicit types."""
    b = GraphBuilder(graph.name)
    for value in graph.inputs:
        b.input(value.name, value.type)
    for node in graph.nodes:
        if _BUILDER_KEYWORDS & {k for k, _ in node.kwargs}:
            b.add_node(node)  # a kwarg that GraphBuilder.op would take for its own
            continue
        types = [v.type for v in node.outputs]
        names = [v.name for v in node.outputs]
        single = len(types) == 1
        b.op(
            node.op, *node.args, out_type=types[0] if single else types,
            out_name=names[0] if single else names, source=node.source, **dict(node.kwargs),
        )
    return b.build(*graph.outputs).replace(stamps=graph.stamps)


def measure(fn, repeat: int) -> list[float]:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return times


def machine_info() -> dict:
    """The machine and the versions this benchmark depends on (common.machine)."""
    return machine({"sympy": sympy.__version__, "torchsmith-ir": ir.__version__})


def run(num_nodes: int, repeat: int, seed: int) -> dict:
    steps: list[dict] = []

    def step(name: str, fn, *, required: bool = True, note: str = ""):
        runs = repeat if required else 1  # fx steps are slow and only for reference
        try:
            fn()  # warm caches (parse_type, sympy printing), which a real compiler has warm as well
            times = measure(fn, runs)
        except Exception as e:  # a benchmark reports a broken step instead of stopping
            first = str(e).splitlines()[0] if str(e) else ""
            error = f"{type(e).__name__}: {first}"[:200]
            steps.append({"step": name, "error": error, "required": required})
            print(f"{name:<24} FAILED {steps[-1]['error']}")
            return
        best = min(times)
        steps.append({
            "step": name, "best_s": best, "median_s": statistics.median(times), "runs": runs,
            "required": required, "note": note,
        })
        median = statistics.median(times)
        print(f"{name:<24} best {best * 1e3:8.1f} ms   median {median * 1e3:8.1f} ms  {note}")

    start = time.perf_counter()
    graph = random_graph(seed, num_nodes)
    generate_s = time.perf_counter() - start
    print(f"graph: {len(graph.nodes)} nodes, {len(graph.inputs)} inputs, generated in {generate_s:.2f} s")
    if format_graph(rebuild(graph)) != format_graph(graph):
        raise SystemExit("rebuild() did not reproduce the graph: the benchmark would measure the wrong thing")

    step("build (GraphBuilder)", lambda: rebuild(graph))
    step("verify", lambda: verify(graph))
    text = format_graph(graph)
    step("print (format_graph)", lambda: format_graph(graph), note=f"{len(text) / 1e6:.2f} MB of text")
    parsed_exact = _exact(lambda: parse_graph(text), graph)
    step("parse (parse_graph)", lambda: parse_graph(text), note=parsed_exact)
    document = dumps(graph)
    step("JSON dumps", lambda: dumps(graph), note=f"{len(document) / 1e6:.2f} MB of JSON")
    step("JSON loads", lambda: loads(document), note=_exact(lambda: loads(document), graph))
    step("to_fx", lambda: to_fx(graph), required=False, note="mostly fx's own node creation and codegen")
    gm = to_fx(graph)
    step("from_fx", lambda: from_fx(gm), required=False, note=_exact(lambda: from_fx(gm), graph))
    return {
        "benchmark": "ir", "nodes": len(graph.nodes), "inputs": len(graph.inputs), "seed": seed,
        "generate_s": generate_s, "budget_s": BUDGET_SECONDS, "machine": machine_info(), "steps": steps,
    }


def _exact(fn, graph: Graph) -> str:
    """Compared as text: NaN constants make `==` on graphs false even for identical graphs."""
    try:
        return "round trip exact" if format_graph(fn()) == format_graph(graph) else "round trip NOT exact"
    except Exception as e:
        return f"round trip failed: {type(e).__name__}"


def markdown(result: dict) -> str:
    m = result["machine"]
    lines = [
        "# IR benchmark",
        "",
        f"A {result['nodes']}-node graph from `random_graph(seed={result['seed']})` with {result['inputs']} "
        "inputs; best and median of the timed runs, each step after one untimed warm-up run. "
        "Written by `benchmarks/bench_ir.py`.",
        "",
        f"Machine: {m['cpu']}, {m['cpu_count']} CPUs, {m['platform']}; Python {m['python']}, "
        f"torch {m['torch']}, sympy {m['sympy']}, torchsmith-ir {m['torchsmith-ir']}; {m['date']}.",
        "",
        "| step | best (ms) | median (ms) | runs | under 1 s | note |",
        "|---|---:|---:|---:|:---:|---|",
    ]
    for s in result["steps"]:
        if "error" in s:
            lines.append(f"| {s['step']} | | | | | {s['error']} |")
            continue
        ok = "yes" if s["best_s"] < result["budget_s"] else "**no**"
        ok = ok if s["required"] else f"({ok})"
        best, median = s["best_s"] * 1e3, s["median_s"] * 1e3
        lines.append(f"| {s['step']} | {best:.1f} | {median:.1f} | {s['runs']} | {ok} | {s['note']} |")
    lines += ["", "Steps in parentheses are fx interop, for reference: most of their time is torch.fx's own."]
    return "\n".join(lines) + "\n"


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true", help="2,000 nodes, 2 runs (results are not written)")
    args = parser.parse_args(argv)
    if args.quick:
        args.nodes, args.repeat = 2_000, 2
    result = run(args.nodes, args.repeat, args.seed)
    if not args.quick:
        RESULTS.mkdir(parents=True, exist_ok=True)
        (RESULTS / "ir.json").write_text(json.dumps(result, indent=2) + "\n")
        (RESULTS / "ir.md").write_text(markdown(result))
        print(f"wrote {RESULTS / 'ir.md'} and {RESULTS / 'ir.json'}")
    slow = [s["step"] for s in result["steps"] if s["required"] and s.get("best_s", 0) >= result["budget_s"]]
    if slow:
        print(f"over the {result['budget_s']} s budget: {', '.join(slow)}")
    return result


if __name__ == "__main__":
    main()
