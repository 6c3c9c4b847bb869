"""Command line.

- `python -m torchsmith.prims coverage [--op TEXT] [--json PATH]`: every ATen op the decomposition
  and keep-whole tables hold, and the model zoo's ops, each decomposed, kept whole or missing.
- `python -m torchsmith.prims decompose FILE.json [--out F] [--keep OP,...] [--keep-missing]`: a verified ATen
  graph (e.g. `python -m torchsmith.autograd_aot ... --out DIR` output, or an IR dump's
  `NNN-aten-*.json`) decomposed to prims; printed in text form, or written as JSON to F for the next
  stage (`python -m torchsmith.inductor compile F`).
"""

import argparse
import pathlib
import sys

import torchsmith.prims  # noqa: F401  (registers prims and decompositions)
from torchsmith.ir import format_graph, save
from torchsmith.ir.cli import load_verified, run_guarded
from torchsmith.prims.coverage import coverage, format_table, select, to_json
from torchsmith.prims.decompose import decompose


def _coverage(args) -> int:
    rows = coverage() if args.op is None else select(coverage(), args.op)
    print(format_table(rows))
    if args.json:
        pathlib.Path(args.json).write_text(to_json(rows) + "\n")
    return 0


def _decompose(args) -> int:
    keep = frozenset(op.strip() for op in args.keep.split(",") if op.strip()) if args.keep else frozenset()
    graph = decompose(load_verified(args.file), keep, on_missing="keep" if args.keep_missing else "error")
    if args.out:
        save(graph, args.out)
        print(args.out)
    else:
        print(format_graph(graph))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m torchsmith.prims", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    report = commands.add_parser(
        "coverage", help="which ATen ops are decomposed, kept whole or missing (from the tables)"
    )
    report.add_argument("--op", metavar="TEXT", help="only ops whose name contains TEXT (aten.hypot)")
    report.add_argument("--json", metavar="PATH", help="also write the table as JSON to PATH")
    report.set_defaults(run=_coverage)
    lower = commands.add_parser("decompose", help="decompose an ATen graph (JSON) to prims")
    lower.add_argument("file", help="a graph as JSON (torchsmith.ir.save)")
    lower.add_argument("--out", metavar="F", help="write the prims graph as JSON to F instead of printing")
    lower.add_argument("--keep", metavar="OP,...", help="ATen ops to keep whole (e.g. aten.mm.default)")
    lower.add_argument("--keep-missing", action="store_true",
                       help="keep ops without a decomposition instead of failing (inductor calls them)")
    lower.set_defaults(run=_decompose)
    args = parser.parse_args(argv)
    return run_guarded(lambda: args.run(args), getattr(args, "file", "coverage"))


if __name__ == "__main__":
    sys.exit(main())
