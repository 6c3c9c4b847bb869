"""Command line: `python -m torchsmith.autograd_aot FILE.json [--training] [--out DIR] [--size s0=8]`.

Reads and verifies a `torch.*` graph (a capture dump: `TORCHSMITH_DUMP_IR=DIR` writes
`001-capture-<fn>.json`), lowers it to functional ATen graphs on random inputs of its declared input
types, and prints them in text form, or with `--out DIR` writes them as JSON for the next stage
(`python -m torchsmith.prims decompose`):

- inference (the default): `DIR/inference.json`
- `--training`: `DIR/joint.json` (the functional forward+backward graph), `DIR/forward.json` and
  `DIR/backward.json` (its partition); inputs whose type says `grad` are differentiated.

A failure (an invalid input graph included) is one line on stderr with exit status 2.

`DIR/calling.json` records the calling convention: the forward returns `num_outputs` user outputs, then
the new values of `mutated_inputs` (copy them back into those inputs), then `num_saved` values for the
backward, which takes those saved values followed by one gradient per `differentiable_outputs` entry and
returns the gradients of `grad_inputs`.
"""

import argparse
import json
import pathlib
import sys

from torchsmith.autograd_aot.errors import AotAutogradError
from torchsmith.autograd_aot.pipeline import Lowered, lower
from torchsmith.autograd_aot.symbolic import input_symbols, lower_symbolic
from torchsmith.ir import example_inputs, format_graph, save
from torchsmith.ir.cli import load_verified, run_guarded


def parse_sizes(items: list[str]) -> dict[str, int]:
    """`["s0=8", "s1=3"]` -> `{"s0": 8, "s1": 3}`; raises ValueError on a malformed item."""
    sizes = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name.strip() or not value.strip().isdigit():
            raise ValueError(f"--size takes NAME=INT (e.g. s0=8), got {item!r}")
        sizes[name.strip()] = int(value)
    return sizes


def lower_file(path, *, training: bool, sizes: dict[str, int] | None = None, seed: int = 0) -> Lowered:
    """Lower the graph stored at `path` (see the module docstring); symbolic when its inputs have
    size symbols and the lowering generalizes, else at the example sizes."""
    graph = load_verified(path)
    inputs = example_inputs(graph, sizes, seed=seed)
    if not training:
        inputs = [x.detach() if hasattr(x, "detach") else x for x in inputs]
    elif not any(getattr(x, "requires_grad", False) for x in inputs):
        raise AotAutogradError(
            f"--training: no input of graph {graph.name} requires grad; mark the inputs to differentiate "
            "with `grad` in their type (e.g. `%w: f32[4, 4] cpu grad`)"
        )
    lowered = lower_symbolic(graph, inputs, training=training) if input_symbols(graph) else None
    return lowered or lower(graph, inputs, training=training)


def calling_convention(lowered: Lowered) -> dict:
    """How to call the lowered graphs (see the module docstring), as plain JSON data."""
    traced = lowered.traced
    return {
        "num_outputs": traced.num_outputs,
        "mutated_inputs": list(lowered.mutated_inputs),
        "num_saved": lowered.num_saved,
        "differentiable_outputs": list(traced.differentiable_outputs),
        "grad_inputs": list(traced.grad_inputs),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m torchsmith.autograd_aot", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("file", help="a torch-level graph as JSON (torchsmith.ir.save)")
    parser.add_argument("--training", action="store_true", help="also build the backward graph")
    parser.add_argument("--out", metavar="DIR", help="write the graphs as JSON into DIR instead of printing")
    parser.add_argument("--size", action="append", default=[], metavar="NAME=INT",
                        help="the example value of a size symbol (default: random in 2..5)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random example inputs")
    args = parser.parse_args(argv)
    return run_guarded(lambda: _run(args), args.file)


def _run(args) -> int:
    """Lower, then print or write; any failure becomes one line on stderr (exit status 2)."""
    lowered = lower_file(args.file, training=args.training, sizes=parse_sizes(args.size), seed=args.seed)
    if lowered.backward is None:
        graphs = {"inference": lowered.forward}
    else:  # the joint forward+backward graph first: the partition splits it into the other two
        joint = {"joint": lowered.functional} if lowered.functional is not None else {}
        graphs = {**joint, "forward": lowered.forward, "backward": lowered.backward}
    if args.out is None:
        for name, graph in graphs.items():
            print(f"# {name}\n{format_graph(graph)}")
        print(f"# calling convention: {json.dumps(calling_convention(lowered))}")
        return 0
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for name, graph in graphs.items():
        save(graph, out / f"{name}.json")
        print(out / f"{name}.json")
    (out / "calling.json").write_text(json.dumps(calling_convention(lowered), indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
