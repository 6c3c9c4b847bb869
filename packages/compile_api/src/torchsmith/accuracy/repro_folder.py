"""Write a self-contained repro folder for one failed stage check (see replay_script.py's docstring)."""

import json
import os
import pathlib
import re
import shutil
import tempfile

import torch

from torchsmith.accuracy.compare import TOLERANCES
from torchsmith.accuracy.localize import Culprit

_CLI = {
    "autograd_aot": "python -m torchsmith.autograd_aot graph.json{training}",
    "prims": "python -m torchsmith.prims decompose graph.json --keep-missing",
    "inductor": "python -m torchsmith.inductor compile graph.json --check",
}


def repro_root(options: dict | None) -> pathlib.Path:
    """Where repro folders go: option `check.repro_dir`, else `$TORCHSMITH_CHECK_DIR`, else a new
    private temporary directory."""
    chosen = (options or {}).get("check.repro_dir") or os.environ.get("TORCHSMITH_CHECK_DIR")
    if chosen:
        return pathlib.Path(chosen)
    return pathlib.Path(tempfile.mkdtemp(prefix="torchsmith-check-"))


def _storable(x):
    if isinstance(x, torch.Tensor):
        return x.detach().clone().requires_grad_(x.requires_grad)
    return x


def write_repro(
    culprit: Culprit, function_name: str, options: dict | None, *, decompose: str = "inductor"
) -> pathlib.Path:
    """Write graph, inputs, manifest, README and `repro.py` for `culprit`; returns the folder."""
    from torchsmith.ir import save

    root = repro_root(options)
    root.mkdir(parents=True, exist_ok=True)
    safe = re.sub(r"[^\w.-]+", "_", f"{function_name}-{culprit.stage}").strip("_") or "graph"
    folder = pathlib.Path(tempfile.mkdtemp(prefix=f"{safe}-", dir=root))
    save(culprit.graph, folder / "graph.json")
    torch.save([_storable(x) for x in culprit.inputs], folder / "inputs.pt")
    if culprit.node_graph is not None:
        save(culprit.node_graph, folder / "node.json")
        torch.save([_storable(x) for x in culprit.node_inputs], folder / "node_inputs.pt")
    node = culprit.node
    manifest = {
        "stage": culprit.stage,
        "role": culprit.role,
        "function": function_name,
        "node": culprit.node_label(),
        "op": node.op if node is not None else None,
        "source": node.source if node is not None else None,
        "difference": culprit.difference.describe(),
        "max_error": culprit.difference.max_error if culprit.difference.max_error != float("inf") else None,
        "training": culprit.training and culprit.stage == "autograd_aot",
        "node_training": culprit.training and culprit.stage == "autograd_aot",
        "decompose": decompose,
        "options": {k: v for k, v in (options or {}).items() if k in ("cpp.threads", "max_autotune")},
        "tolerances": {str(d).removeprefix("torch."): list(t) for d, t in TOLERANCES.items()},
    }
    (folder / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    shutil.copyfile(pathlib.Path(__file__).with_name("replay_script.py"), folder / "repro.py")
    cli = _CLI.get(culprit.stage, "").format(training=" --training" if culprit.training else "")
    lines = [
        f"stage {culprit.stage} differs from the previous stage at node {culprit.node_label()} of the "
        f"{culprit.role} graph of {function_name}: {culprit.difference.describe()}.",
        "",
    ]
    if culprit.stage in _CLI or culprit.stage == "capture":
        lines.append("Replay: `python repro.py` (exit status 1 while the mismatch reproduces).")
    else:
        lines.append(f"No replay for {culprit.stage}: graph.json and inputs.pt are what it was given.")
    if cli:
        lines.append(f"The stage's command line on the same graph (random inputs): `{cli}`.")
    (folder / "README.md").write_text("\n".join(lines) + "\n")
    return folder
