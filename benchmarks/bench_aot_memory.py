"""Activation memory saved for backward: torchsmith's min-cut partition against saving everything,
eager PyTorch autograd and `torch.compile`, for five training programs.

    python benchmarks/bench_aot_memory.py            # writes benchmarks/results/aot_memory.{md,json}
    python benchmarks/bench_aot_memory.py --quick    # torch.compile for the MLP only, nothing written

Programs (`training_programs.py`; fp32, CPU, training mode): an MLP, `nn.TransformerEncoderLayer`,
a conv net with BatchNorm in train mode, and GPT-2 and BERT built by `transformers` from small
configurations (random weights, no downloads). Each program is one `nn.Module` run these ways:

1. torchsmith min-cut: the torch-level graph goes through `torchsmith.autograd_aot.aot_eager`,
   partitioned at ATen level, and again with `decompose=torchsmith.prims.decompose` (prims level);
2. save everything: what the same ATen joint graph's backward reads from the forward (MemoryReport);
3. eager PyTorch autograd on the module itself;
4. `torch.compile(module)` (default backend, inductor), the baseline only.

The torch-level graph stands in for capture (which cannot yet trace `transformers` in one graph):
`torch_recorder.record_graph` runs the module once eagerly under a `TorchFunctionMode` that records
every torch function and Tensor method call, with parameters and buffers lifted to graph inputs.
The graph is specialized to these inputs (Python values read off tensors are baked in), and the
gradient check against eager on the same inputs is what vouches for it.

Bytes are counted the same way for all of them (see METHOD below).
"""

from __future__ import annotations

import argparse
import json
import time
import traceback

import torch
from common import RESULTS, machine, short_error
from torch_recorder import record_graph  # benchmarks/ is on sys.path when this script runs
from training_programs import PROGRAMS, dropout_off

import torchsmith.autograd_aot as aot
import torchsmith.ir as ir
from torchsmith.autograd_aot import aot_eager

METHOD = """\
Every column counts the bytes of the distinct storages that the backward keeps from the forward,
leaving out the storages of graph inputs and parameters (and buffers), which the caller holds anyway.
Views count as the storage they view, once.

- **min-cut** and **save everything** are read off torchsmith's partition
  (`fn.last_program.report`, a `MemoryReport` over the joint graph: the values the min-cut saves,
  and every forward value the backward reads), at ATen level and, for min-cut, also after
  `torchsmith.prims.decompose`. The min-cut figures are measured at run time too, with the hooks
  below (column "measured": "equal", or the measured KiB in bold where they differ).
- **eager** and **torch.compile** are measured while the forward runs, under
  `torch.autograd.graph.saved_tensors_hooks`: the pack hook sees every tensor autograd saves
  (eager: each op's saved tensors; compiled programs: what their `autograd.Function` saves with
  `save_for_backward`), and we sum `untyped_storage().nbytes()` over distinct storages
  (by data pointer) that are not an input's or a parameter's. A storage that a compiled program
  carves several saved tensors from counts once, at its full size.
- torch.compile is warmed up (compiled) outside the hooks, then measured on a second call.
- Gradients: the max abs difference, over all parameters, between the gradients from eager
  autograd and from torchsmith's compiled backward for one training step with the same seed (on
  CPU the compiled dropout draws the same masks as eager), next to the largest eager gradient for
  scale; likewise for torch.compile when the program has no dropout (inductor draws its own random
  numbers).
"""


class BenchError(Exception):
    """The benchmark could not build or run a program."""


# --- measuring --------------------------------------------------------------------------------


class SavedStorages:
    """Pack hook bookkeeping: bytes of the distinct storages autograd saves, inputs excluded."""

    def __init__(self, excluded: list[torch.Tensor]):
        self.excluded = {t.untyped_storage().data_ptr() for t in excluded}
        self.sizes: dict[int, int] = {}
        self.keep: list[torch.Tensor] = []  # keeps storages alive so no address is reused meanwhile
        self.tensors = 0

    def pack(self, t: torch.Tensor):
        self.tensors += 1
        storage = t.untyped_storage()
        ptr = storage.data_ptr()
        if ptr not in self.excluded and storage.nbytes():
            self.sizes[ptr] = storage.nbytes()
            self.keep.append(t)
        return t

    @property
    def bytes(self) -> int:
        return sum(self.sizes.values())


def measure_saved(step, excluded: list[torch.Tensor]) -> int:
    """Bytes saved for backward while `step()` runs its forward (see METHOD)."""
    counter = SavedStorages(excluded)
    with torch.autograd.graph.saved_tensors_hooks(counter.pack, lambda t: t):
        loss = step()
    loss.backward()
    return counter.bytes


def _max_diff(expected: list, actual: list) -> float:
    diffs = [0.0]
    for e, a in zip(expected, actual):
        if (e is None) != (a is None):
            return float("inf")
        if e is not None:
            diffs.append((e - a).abs().max().item())
    return max(diffs)


LEVELS = {"aten": None, "prims": "torchsmith.prims.decompose"}


def _decompose(level: str):
    if LEVELS[level] is None:
        return None
    from torchsmith.prims import decompose

    return decompose


def run_torchsmith(level: str, key: str, module, data, params, initial_buffers, reset) -> tuple[dict, list]:
    """Record `module`, lower it (to ATen, or on to prims), partition it, run one training step
    measuring saved storages; return the numbers (keys prefixed with `level`) and the gradients."""
    start = time.perf_counter()
    reset()
    graph, data_in, _, _, lifted = record_graph(key, module, data)
    inputs = (data_in + [p.detach().clone().requires_grad_(True) for p in params]
              + [b.detach().clone() for b in initial_buffers] + lifted)
    fn = aot_eager(graph, inputs, decompose=_decompose(level))
    program = fn.last_program
    report = program.report
    row = {
        "lower_s": time.perf_counter() - start, "recorded_nodes": len(graph.nodes),
        "mincut_bytes": report.saved_bytes, "save_all_bytes": report.save_all_bytes,
        "saved_values": len(report.saved_values), "recomputed_nodes": report.recomputed_nodes,
        "forward_nodes": len(program.forward_graph.nodes),
        "backward_nodes": len(program.backward_graph.nodes),
        "random_ops": sum("bernoulli" in op or "rand" in op for op in program.forward_graph.ops()),
    }
    reset()
    row["mincut_measured_bytes"] = measure_saved(lambda: fn(*inputs)[0], inputs)
    grads = [x.grad for x in inputs[len(data): len(data) + len(params)]]
    return {f"{level}_{k}": v for k, v in row.items()}, grads


def run_program(key: str, with_compile: bool) -> dict:
    """All measurements for one program (errors are recorded in the row, not raised)."""
    torch.manual_seed(0)
    try:
        title, module, data = PROGRAMS[key]()
    except Exception as e:  # e.g. transformers missing: report it, run the other programs
        traceback.print_exc()
        return {"program": key, "title": key, "dropout": False, "eager_error": short_error(e)}
    module.train()
    params = [p for _, p in module.named_parameters()]
    buffers = [b for _, b in module.named_buffers()]
    initial_buffers = [b.detach().clone() for b in buffers]
    row = {"program": key, "title": title, "dropout": module.dropout,
           "parameters_bytes": sum(p.numel() * p.element_size() for p in params)}

    def reset():
        module.zero_grad(set_to_none=True)
        with torch.no_grad():
            for b, old in zip(buffers, initial_buffers):
                b.copy_(old)
        torch.manual_seed(1)

    # Eager autograd: the reference for bytes and gradients.
    reset()
    row["eager_bytes"] = measure_saved(lambda: module(*data), data + params + buffers)
    eager_grads = [p.grad for p in params]
    row["grad_max_abs"] = max(g.abs().max().item() for g in eager_grads)

    # torchsmith, partitioning the ATen joint graph and the prims one.
    for level in LEVELS:
        try:
            numbers, grads = run_torchsmith(level, key, module, data, params, initial_buffers, reset)
            row.update(numbers)
            row[f"{level}_grad_max_abs_diff"] = _max_diff(eager_grads, grads)
        except Exception as e:  # a benchmark reports a failure instead of stopping
            row[f"{level}_error"] = short_error(e)
            traceback.print_exc()

    # torch.compile (inductor), the baseline: compiled on a warm-up call, measured on the next.
    if with_compile:
        try:
            compiled = torch.compile(module)
            start = time.perf_counter()
            reset()
            compiled(*data).backward()
            row["compile_s"] = time.perf_counter() - start
            reset()
            row["compile_bytes"] = measure_saved(lambda: compiled(*data), data + params + buffers)
            if not module.dropout:
                row["compile_grad_max_abs_diff"] = _max_diff(eager_grads, [p.grad for p in params])
        except Exception as e:
            row["compile_error"] = short_error(e)
            traceback.print_exc()
    else:
        row["compile_error"] = "skipped (--quick)"

    # Programs with dropout: once more with dropout off, where gradients must agree exactly.
    if module.dropout:
        changed = dropout_off(module)
        reset()
        module(*data).backward()
        eager_grads = [p.grad for p in params]
        for level in LEVELS:
            try:
                numbers, grads = run_torchsmith(level, key, module, data, params, initial_buffers, reset)
                if numbers[f"{level}_random_ops"]:
                    raise BenchError(f"{changed} dropout probabilities set to 0, yet random ops remain")
                row[f"{level}_grad_max_abs_diff_no_dropout"] = _max_diff(eager_grads, grads)
            except Exception as e:
                row[f"{level}_no_dropout_error"] = short_error(e)
                traceback.print_exc()
    return row


# --- report -----------------------------------------------------------------------------------


def machine_info() -> dict:
    """The machine and the versions this benchmark depends on (common.machine)."""
    try:
        import transformers

        version = transformers.__version__
    except ImportError:
        version = None
    return machine({"torchsmith-ir": ir.__version__, "torchsmith-autograd-aot": aot.__version__,
                    "transformers": version})


def _kb(row: dict, key: str) -> str:
    return f"{row[key] / 1024:,.1f}" if key in row else "-"


def _vs_eager(row: dict, key: str) -> str:
    if key not in row or not row.get("eager_bytes"):
        return "-"
    return f"{100 * (row[key] / row['eager_bytes'] - 1):+.0f}%"


def _diff(row: dict, key: str) -> str:
    return f"{row[key]:.1e}" if key in row else "-"


def _cell(row: dict, key: str) -> str:
    if key not in row:
        failed = f"{key.split('_')[0]}_error" in row  # aten_error, prims_error, compile_error
        return "error, see below" if failed else "-"
    return f"{_kb(row, key)} ({_vs_eager(row, key)})" if key != "eager_bytes" else _kb(row, key)


def _check(row: dict, key: str, applies: bool = True, otherwise: str = "") -> str:
    if not applies:
        return otherwise
    return _diff(row, key)


def _measured(row: dict) -> str:
    cells = []
    for level in LEVELS:
        if f"{level}_mincut_bytes" in row:
            same = row[f"{level}_mincut_bytes"] == row[f"{level}_mincut_measured_bytes"]
            cells.append("equal" if same else f"**{_kb(row, f'{level}_mincut_measured_bytes')}**")
        else:
            cells.append("-")
    return " / ".join(cells)


def markdown(result: dict) -> str:
    m = result["machine"]
    lines = [
        "# Activation memory saved for backward",
        "",
        "Written by `benchmarks/bench_aot_memory.py`: one training step of each program, fp32 on CPU. "
        "KiB of the distinct storages kept for the backward, graph inputs and parameters left out "
        "(method below); in parentheses, the change against eager PyTorch autograd.",
        "",
        f"Machine: {m['cpu']}, {m['cpu_count']} CPUs ({m['torch_threads']} torch threads), {m['platform']}; "
        f"Python {m['python']}, torch {m['torch']}, transformers {m['transformers']}, "
        f"torchsmith-autograd-aot {m['torchsmith-autograd-aot']}; {m['date']}; "
        f"whole run {result['total_s']:.0f} s.",
        "",
        "| program | torchsmith min-cut (ATen) | torchsmith min-cut (prims) | save everything (ATen) "
        "| eager autograd | torch.compile (inductor) |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for row in result["programs"]:
        lines.append(
            f"| {row['title']} | {_cell(row, 'aten_mincut_bytes')} | {_cell(row, 'prims_mincut_bytes')} "
            f"| {_cell(row, 'aten_save_all_bytes')} | {_cell(row, 'eager_bytes')} "
            f"| {_cell(row, 'compile_bytes')} |"
        )
    lines += [
        "",
        "Gradients against eager on the same step (max abs difference over all parameters; the largest "
        "eager gradient for scale), the run-time measurement of torchsmith's saved storages against "
        "its MemoryReport, and the seconds torch.compile's first step took (compiling forward and "
        "backward, with whatever inductor found in its on-disk cache):",
        "",
        "| program | max abs grad | ATen | ATen, no dropout | prims | prims, no dropout | torch.compile "
        "| measured (ATen / prims) | compile (s) |",
        "|---|---:|---:|---:|---:|---:|---:|---|---:|",
    ]
    notes = []
    for row in result["programs"]:
        notes += [f"{row['program']}: {key}: {value}" for key, value in row.items() if key.endswith("error")]
        if "eager_error" in row:
            continue
        dropout = row["dropout"]
        compile_s = f"{row['compile_s']:.0f}" if "compile_s" in row else "-"
        lines.append(
            f"| {row['program']} | {row['grad_max_abs']:.1e} | {_diff(row, 'aten_grad_max_abs_diff')} "
            f"| {_check(row, 'aten_grad_max_abs_diff_no_dropout', dropout, 'no dropout')} "
            f"| {_diff(row, 'prims_grad_max_abs_diff')} "
            f"| {_check(row, 'prims_grad_max_abs_diff_no_dropout', dropout, 'no dropout')} "
            f"| {_check(row, 'compile_grad_max_abs_diff', not dropout, 'own RNG')} | {_measured(row)} "
            f"| {compile_s} |"
        )
    lines += ["", "Other numbers per program (lowering times, graph sizes) are in `aot_memory.json`."]
    if notes:
        lines += ["", "Errors:", ""] + [f"- {n}" for n in notes]
    lines += ["", "## Method", "", METHOD.rstrip(), "", "## Notes", "", NOTES.rstrip()]
    return "\n".join(lines) + "\n"


NOTES = """\
- The torch-level graphs are recorded by `benchmarks/torch_recorder.py` (a `TorchFunctionMode`),
  standing in for capture, which cannot yet take `transformers` models in one graph; torchsmith
  traces them to ATen itself. "prims" lowers the joint graph on with `torchsmith.prims.decompose`
  before the min-cut, as a code-generating backend would: more of it becomes recomputable.
- "no dropout": the same program with every dropout probability set to 0, recorded and compiled
  again; there the gradients must agree to rounding. With dropout on, the ATen program draws its
  masks from the same generator as eager and they agree element for element, except where
  dropout's input is not contiguous (`nn.TransformerEncoderLayer` drops out the transposed attention
  output): there the compiled mask comes out in another element order than eager's (seen with one
  `F.dropout` on a transposed tensor), with the right keep rate but not eager's exact mask. The
  prims program draws its masks with `prims.philox_rand`, never eager's generator.
- torch.compile draws its own random numbers too, so its gradients are compared only for programs
  without dropout.
- Where "measured" differs from the MemoryReport, the report undercounts: a saved value is a view
  (after decomposition, a chain of `prims.permute`/`reshape`/`slice`) of a larger buffer that it
  keeps alive, and the report, which follows only ATen view ops back to their base, counts the
  view's own size.
"""


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help="torch.compile only for the MLP; results are not written")
    parser.add_argument("--programs", nargs="*", default=list(PROGRAMS), choices=list(PROGRAMS))
    args = parser.parse_args(argv)
    start = time.perf_counter()
    rows = []
    for key in args.programs:
        row = run_program(key, with_compile=not args.quick or key == "mlp")
        rows.append(row)
        print(f"{key:<8} KiB: min-cut {_kb(row, 'aten_mincut_bytes'):>8}"
              f" (prims {_kb(row, 'prims_mincut_bytes'):>8})"
              f"  save-all {_kb(row, 'aten_save_all_bytes'):>8}  eager {_kb(row, 'eager_bytes'):>8}"
              f"  torch.compile {_kb(row, 'compile_bytes'):>8}"
              f";  grad diff {_diff(row, 'aten_grad_max_abs_diff')}", flush=True)
    result = {"benchmark": "aot_memory", "machine": machine_info(), "total_s": time.perf_counter() - start,
              "method": METHOD, "programs": rows}
    if not args.quick:
        RESULTS.mkdir(parents=True, exist_ok=True)
        (RESULTS / "aot_memory.json").write_text(json.dumps(result, indent=2) + "\n")
        (RESULTS / "aot_memory.md").write_text(markdown(result))
        print(f"wrote {RESULTS / 'aot_memory.md'} and {RESULTS / 'aot_memory.json'}")
    return result


if __name__ == "__main__":
    main()
