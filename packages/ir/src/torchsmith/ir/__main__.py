"""Command line: `python -m torchsmith.ir verify|print|run FILE`.

FILE is a graph as JSON (`torchsmith.ir.save`, an IR dump's `NNN-*.json`) or in text form (any
other file whose first word is `graph`). Every command reads and verifies the graph first; a file
that is not a valid graph is reported in one line on stderr with exit status 2.

- `verify FILE`: print `ok: graph NAME (N nodes)`.
- `print FILE`: print the graph's text form.
- `run FILE [--size s0=8] [--seed N]`: run it with the reference interpreter on random inputs of its
  declared input types and print the type of each output.
"""

import argparse
import pathlib
import sys

from torchsmith.ir.cli import run_guarded
from torchsmith.ir.interpreter import interpret
from torchsmith.ir.parser import parse_graph
from torchsmith.ir.sample_inputs import example_inputs
from torchsmith.ir.serialize import loads
from torchsmith.ir.text import format_graph
from torchsmith.ir.types import format_type, type_of
from torchsmith.ir.verifier import verify

# A graph file larger than this is refused before it is read.
MAX_FILE_BYTES = 256 * 2**20


def read_graph(path: str):
    """The verified graph in `path`, JSON or text form."""
    file = pathlib.Path(path)
    size = file.stat().st_size
    if size > MAX_FILE_BYTES:
        raise ValueError(f"the file has {size} bytes; graph files are at most {MAX_FILE_BYTES}")
    text = file.read_text(encoding="utf-8", errors="strict")
    graph = loads(text) if text.lstrip().startswith("{") else parse_graph(text)
    return verify(graph)


def parse_sizes(items: list[str]) -> dict[str, int]:
    """`["s0=8"]` -> `{"s0": 8}`; raises ValueError on a malformed item."""
    sizes = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name.strip() or not value.strip().isdigit() or len(value.strip()) > 18:
            raise ValueError(f"--size takes NAME=INT (e.g. s0=8), got {item!r}")
        sizes[name.strip()] = int(value)
    return sizes


def _verify(args) -> int:
    graph = read_graph(args.file)
    print(f"ok: graph {graph.name} ({len(graph.nodes)} nodes)")
    return 0


def _print(args) -> int:
    print(format_graph(read_graph(args.file)), end="")
    return 0


def _run(args) -> int:
    graph = read_graph(args.file)
    outputs = interpret(graph, *example_inputs(graph, parse_sizes(args.size), seed=args.seed))
    for value, out in zip(graph.outputs, outputs, strict=True):
        print(f"%{value.name}: {format_type(type_of(out))}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m torchsmith.ir", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    for name, run, helptext in (
        ("verify", _verify, "read and verify a graph"),
        ("print", _print, "print a graph in text form"),
        ("run", _run, "run a graph on random inputs with the reference interpreter"),
    ):
        command = commands.add_parser(name, help=helptext)
        command.add_argument("file", help="a graph as JSON or in text form")
        if name == "run":
            command.add_argument("--size", action="append", default=[], metavar="NAME=INT",
                                 help="the example value of a size symbol (default: random in 2..5)")
            command.add_argument("--seed", type=int, default=0, help="seed of the random example inputs")
        command.set_defaults(run=run)
    args = parser.parse_args(argv)
    return run_guarded(lambda: args.run(args), args.file)


if __name__ == "__main__":
    sys.exit(main())
