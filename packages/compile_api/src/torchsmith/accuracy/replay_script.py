"""Replay of one accuracy-check failure (written by torchsmith's `options={"check": True}`).

This file is copied as `repro.py` into each repro folder, next to `manifest.json` (the stage, node
and tolerance), `graph.json` (the failing stage's input graph), `inputs.pt` (its inputs) and, when
one node was found, `node.json` and `node_inputs.pt` (that node alone). It needs torchsmith.ir and the
stage's package, not the `torchsmith` API package:

    python repro.py          # exit status 1: the mismatch reproduces; 0: the stage now agrees

It runs the stage's input graph twice on the saved inputs: through the reference interpreter, and
through the stage (autograd_aot: `aot_compile`; prims: the decomposition; inductor:
`compile_for_device`), and compares every output (and, for autograd_aot on a training graph, the
gradients from seeded tangents). For capture, the captured graph's outputs are compared with the
eager program's (`expected.pt`, saved when the check ran).
"""

import json
import pathlib
import sys

import torch

HERE = pathlib.Path(__file__).resolve().parent


def _interpreter(graph):
    from torchsmith.ir import interpret

    return lambda *args: interpret(graph, *args)


def stage_runner(manifest: dict, graph):
    """A callable running `graph` through the failing stage."""
    import torchsmith.prims  # noqa: F401  (prims ops, for the interpreter)

    stage = manifest["stage"]
    if stage == "autograd_aot":
        from torchsmith.autograd_aot import aot_compile, interpreter_compiler

        return lambda *args: aot_compile(graph, list(args), interpreter_compiler)(*args)
    if stage == "prims":
        if manifest.get("decompose") == "inductor":
            from torchsmith.inductor.device_compilers import to_prims_keep as decompose
        else:
            decompose = torchsmith.prims.decompose
        return _interpreter(decompose(graph))
    if stage == "inductor":
        from torchsmith.inductor.device_compilers import compile_for_device, with_input_strides

        def run(*args):
            return compile_for_device(with_input_strides(graph, args), list(args), manifest.get("options"))(
                *args
            )

        return run
    raise SystemExit(f"stage {stage!r} has no replay: the graph and inputs are saved for reading only")


def _values(fn, inputs, training: bool) -> list:
    args = [
        x.detach().clone().requires_grad_(x.requires_grad) if isinstance(x, torch.Tensor) else x
        for x in inputs
    ]
    with torch.enable_grad() if training else torch.no_grad():
        outputs = list(fn(*args))
    values = [o.detach() if isinstance(o, torch.Tensor) else o for o in outputs]
    if training:
        leaves = [a for a in args if isinstance(a, torch.Tensor) and a.requires_grad]
        roots = [o for o in outputs if isinstance(o, torch.Tensor) and o.requires_grad]
        if leaves and roots:
            generator = torch.Generator().manual_seed(1000)
            tangents = [
                torch.randn(o.shape, generator=generator, dtype=torch.float64).to(o.dtype) for o in roots
            ]
            grads = torch.autograd.grad(roots, leaves, tangents, allow_unused=True)
            values += [torch.zeros_like(a) if g is None else g for a, g in zip(leaves, grads)]
    return values


def _max_error(expected, actual, tolerances: dict):
    """(max error, within tolerance) of two values."""
    if not isinstance(expected, torch.Tensor):
        return (0.0, True) if expected == actual else (float("inf"), False)
    if (
        not isinstance(actual, torch.Tensor)
        or actual.shape != expected.shape
        or actual.dtype != expected.dtype
    ):
        return float("inf"), False
    if expected.numel() == 0:
        return 0.0, True
    if not (expected.is_floating_point() or expected.is_complex()):
        return float((expected.double() - actual.double()).abs().max()), torch.equal(expected, actual)
    rtol, atol = tolerances.get(str(expected.dtype).removeprefix("torch."), (1e-4, 1e-5))
    close = torch.isclose(actual, expected, rtol=rtol, atol=atol, equal_nan=True)
    error = (expected.double() - actual.double()).abs().nan_to_num(nan=float("inf"))
    return float(error.max()), bool(close.all())


def compare(manifest: dict, graph_file: str, inputs_file: str, training: bool):
    """(index, max error) of the first output of the stage that differs from the interpreter's, or None."""
    import torchsmith.prims  # noqa: F401  (registers the prims ops the graph may hold)
    from torchsmith.ir import load

    graph = load(HERE / graph_file)
    inputs = torch.load(HERE / inputs_file, weights_only=True)
    if manifest["stage"] == "capture":
        # the eager program's outputs, saved when the check ran, against the captured graph's
        expected = torch.load(HERE / "expected.pt", weights_only=True)
        actual = [v for v in _values(_interpreter(graph), inputs, False) if isinstance(v, torch.Tensor)]
    else:
        expected = _values(_interpreter(graph), inputs, training)
        actual = _values(stage_runner(manifest, graph), inputs, training)
    if len(expected) != len(actual):
        return -1, float("inf")
    for i, (e, a) in enumerate(zip(expected, actual)):
        error, close = _max_error(e, a, manifest["tolerances"])
        if not close:
            return i, error
    return None


def replay() -> dict:
    """Replay the node (when one was found) and the whole graph; returns what differed in each."""
    manifest = json.loads((HERE / "manifest.json").read_text())
    result = {"stage": manifest["stage"], "node": None, "graph": None}
    if (HERE / "node.json").exists():
        result["node"] = compare(
            manifest, "node.json", "node_inputs.pt", manifest.get("node_training", False)
        )
    result["graph"] = compare(manifest, "graph.json", "inputs.pt", manifest.get("training", False))
    return result


def main() -> int:
    manifest = json.loads((HERE / "manifest.json").read_text())
    print(f"stage {manifest['stage']}, {manifest['role']} graph, node {manifest['node']}")
    result = replay()
    for part in ("node", "graph"):
        found = result[part]
        if found is not None:
            print(f"  {part}: output {found[0]} differs, max error {found[1]:.3g}")
    reproduced = result["node"] is not None or result["graph"] is not None
    print("mismatch reproduced" if reproduced else "no mismatch: the stage agrees with the interpreter")
    return 1 if reproduced else 0


if __name__ == "__main__":
    sys.exit(main())
