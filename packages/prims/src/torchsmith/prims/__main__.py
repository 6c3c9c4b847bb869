"""Command line: `python -m torchsmith.prims coverage [--json PATH]`."""

import argparse
import pathlib
import sys

import torchsmith.prims  # noqa: F401  (registers prims and decompositions)
from torchsmith.prims.coverage import coverage, format_table, to_json


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m torchsmith.prims", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    report = commands.add_parser(
        "coverage", help="which model-zoo ATen ops are decomposed, kept whole or missing"
    )
    report.add_argument("--json", metavar="PATH", help="also write the table as JSON to PATH")
    args = parser.parse_args(argv)
    rows = coverage()
    print(format_table(rows))
    if args.json:
        pathlib.Path(args.json).write_text(to_json(rows) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
