"""Command line: `python -m torchsmith.inductor compile FILE.json [--out DIR] [--check] [--size s0=8]`
and `python -m torchsmith.inductor codegen LOOPS.json [--out DIR] [--build]`;
`python -m torchsmith.inductor pipeline` (or `--pipeline`) prints the steps of the CPU and GPU pipelines.

Both read and verify their input first; a file that is not valid is reported in one line on stderr
with exit status 2.

Compiles a prims (or ATen: it is decomposed first) graph stored as JSON, e.g. `python -m
torchsmith.prims decompose ... --out F` output or an IR dump's `NNN-prims-*.json`, and prints its loop
IR and generated C++; `--out DIR` writes them to `DIR/loops.txt` and `DIR/kernels.cpp` instead.
`--check` also runs the compiled code on random inputs of the graph's input types and compares the
outputs with the reference interpreter (eager PyTorch), exiting with status 1 when they differ.

`codegen` starts one step later: it reads a loop IR document (an IR dump's `NNN-loops-*.json`, perhaps
edited by hand, see `torchsmith.inductor.loop_ir.serialize`), schedules it and prints the fusion decisions
and the generated C++; `--build` also compiles the C++ with the system compiler.
"""

import argparse
import pathlib
import sys

import torch

from torchsmith.inductor.cpu_pipeline import compile_graph
from torchsmith.inductor.errors import InductorError
from torchsmith.inductor.loop_ir.program import format_program
from torchsmith.inductor.lowering.decompose import to_prims
from torchsmith.inductor.lowering.lower import lower
from torchsmith.ir import example_inputs, interpret
from torchsmith.ir.cli import fail, load_verified, run_guarded
from torchsmith.ir.codegen_text import cpp_comment


def parse_sizes(items: list[str]) -> dict[str, int]:
    """`["s0=8"]` -> `{"s0": 8}`; raises ValueError on a malformed item."""
    sizes = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name.strip() or not value.strip().isdigit():
            raise ValueError(f"--size takes NAME=INT (e.g. s0=8), got {item!r}")
        sizes[name.strip()] = int(value)
    return sizes


def check(compiled, graph, inputs) -> str | None:
    """None when `compiled` and the reference interpreter agree on `inputs`, else what differs."""
    expected = interpret(graph, *[x.clone() if isinstance(x, torch.Tensor) else x for x in inputs])
    got = compiled(*inputs)
    if len(got) != len(expected):
        return f"{len(got)} outputs, the interpreter returns {len(expected)}"
    for i, (a, b) in enumerate(zip(got, expected)):
        try:
            torch.testing.assert_close(a, b, equal_nan=True)
        except AssertionError as e:
            return f"output {i} differs from eager: {e}"
    return None


def _compile(args) -> int:
    import torchsmith.prims  # noqa: F401 - registers the prims ops the file's graph may use

    graph = load_verified(args.file)
    inputs = example_inputs(graph, parse_sizes(args.size), seed=args.seed)
    inputs = [x.detach() if isinstance(x, torch.Tensor) else x for x in inputs]
    try:
        compiled = compile_graph(graph, inputs)
    except InductorError as e:
        try:  # show how far it got: the loop IR, when only the code generation or the build failed
            print(format_program(lower(to_prims(graph))))
        except Exception:  # the lowering itself failed: the error below says where
            pass
        return fail(args.file, e)
    loops, source = format_program(compiled.program), compiled.source
    if args.out:
        out = pathlib.Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "loops.txt").write_text(loops + "\n")
        (out / "kernels.cpp").write_text(source)
        print(out / "loops.txt")
        print(out / "kernels.cpp")
    else:
        print(f"# loop IR of {graph.name}\n{loops}\n\n# C++ of {graph.name}\n{source}")
    if args.check:
        problem = check(compiled, graph, inputs)
        if problem is not None:
            print(f"check failed: {problem}", file=sys.stderr)
            return 1
        print(f"check: {graph.name} matches eager on random inputs", file=sys.stderr)
    return 0


def _codegen(args) -> int:
    from torchsmith.inductor.cpp.build import load_library
    from torchsmith.inductor.cpp.codegen import generate_cpp, local_buffers
    from torchsmith.inductor.fusion.scheduler import schedule
    from torchsmith.inductor.loop_ir.serialize import load_program

    program = load_program(args.file)
    plan = schedule(program)
    source, kernels = generate_cpp(program, plan.groups, local_buffers(program, plan.groups))
    if args.build and kernels:
        load_library(source)
    decisions = "\n".join(f"// {cpp_comment(d)}" for d in plan.decisions)
    if args.out:
        out = pathlib.Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "kernels.cpp").write_text(source)
        print(out / "kernels.cpp")
    else:
        print(f"// fusion decisions of {cpp_comment(program.name)}\n{decisions}\n\n{source}")
    if args.build:
        print(f"built: {len(kernels)} kernels of {program.name}", file=sys.stderr)
    return 0


def _pipeline(args) -> int:
    """Print both pipelines' steps, as their runner lists them."""
    import importlib.util

    from torchsmith.inductor.cpu_pipeline import CPU_PIPELINE

    print(f"CPU (C++) {CPU_PIPELINE}")
    if importlib.util.find_spec("triton") is None:
        print("GPU (Triton) pipeline: not available (pip install triton)")
        return 0
    from torchsmith.inductor.gpu_pipeline import GPU_PIPELINE

    print(f"GPU (Triton) {GPU_PIPELINE}")
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv == ["--pipeline"]:
        argv = ["pipeline"]
    parser = argparse.ArgumentParser(prog="python -m torchsmith.inductor", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    build = commands.add_parser("compile", help="print (or write) the loop IR and C++ of a graph")
    build.add_argument("file", help="a prims or ATen graph as JSON (torchsmith.ir.save)")
    build.add_argument("--out", metavar="DIR", help="write loops.txt and kernels.cpp into DIR")
    build.add_argument("--check", action="store_true", help="run it and compare with eager PyTorch")
    build.add_argument("--size", action="append", default=[], metavar="NAME=INT",
                       help="the example value of a size symbol (default: random in 2..5)")
    build.add_argument("--seed", type=int, default=0, help="seed of the random example inputs")
    build.set_defaults(run=_compile)
    codegen = commands.add_parser("codegen", help="print (or write) the C++ of a loop IR document")
    codegen.add_argument("file", help="loop IR as JSON (an IR dump's NNN-loops-*.json)")
    codegen.add_argument("--out", metavar="DIR", help="write kernels.cpp into DIR")
    codegen.add_argument("--build", action="store_true", help="also compile the C++ (checks that it builds)")
    codegen.set_defaults(run=_codegen)
    commands.add_parser("pipeline", help="print the steps of the CPU and GPU pipelines").set_defaults(
        run=_pipeline, file=None
    )
    args = parser.parse_args(argv)
    if args.command == "pipeline":
        return _pipeline(args)
    return run_guarded(lambda: args.run(args), args.file)


if __name__ == "__main__":
    sys.exit(main())
