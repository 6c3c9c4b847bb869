"""Host time of one compiled transformer-style block per training step, against eager.

    python benchmarks/bench_block_host.py                 # 15 rounds, prints the table
    python benchmarks/bench_block_host.py --rounds 31 --torch-compile --write
    python benchmarks/bench_block_host.py --batch 8 --width 128 --hidden 512   # host time dominates

One `Block` (LayerNorm, Linear 512->2048, GELU, Linear 2048->512, residual) at batch 64, fp32,
one thread (OMP_NUM_THREADS=1): the unit FSDP compiles on its own, so whatever a compiled call adds
around its kernels (guards, capture's generated code, the AOT runtime's autograd.Function, the
wrappers) is paid per block per step, forward and backward. Its kernels are at parity with eager's,
so the difference between the two is that host time. Timed: the forward with grad mode on and
parameters that require grad (a training forward, result dropped), and forward plus backward (with a
fixed output gradient, parameter gradients cleared to None each step as `zero_grad()` does). The
systems take turns every round; a time is the median round. `--torch-compile` adds torch.compile
(inductor) as a third column; `--write` writes results/block_host_cpu.{md,json}. Not run in CI.
"""

from __future__ import annotations

import os
import sys
import tempfile

os.environ["OMP_NUM_THREADS"] = "1"  # before torch is imported: both compilers' OpenMP kernels
_CACHE = tempfile.mkdtemp(prefix="bench_block_host_")
os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", os.path.join(_CACHE, "torchinductor"))
os.environ.setdefault("TORCHSMITH_CACHE_DIR", os.path.join(_CACHE, "torchsmith"))

import argparse  # noqa: E402
import json  # noqa: E402
import statistics  # noqa: E402
import warnings  # noqa: E402

import torch  # noqa: E402
from common import RESULTS, interleaved_times, machine  # noqa: E402  (benchmarks/ is on sys.path)

import torchsmith  # noqa: E402


class Block(torch.nn.Module):
    def __init__(self, width: int, hidden: int):
        super().__init__()
        self.norm = torch.nn.LayerNorm(width)
        self.up = torch.nn.Linear(width, hidden)
        self.down = torch.nn.Linear(hidden, width)

    def forward(self, x):
        return x + self.down(torch.nn.functional.gelu(self.up(self.norm(x))))


def step_fns(model, x, grad):
    def forward():
        model(x)

    def forward_backward():
        for p in model.parameters():
            p.grad = None
        x.grad = None
        model(x).backward(grad)

    return forward, forward_backward


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--width", type=int, default=512)
    parser.add_argument("--hidden", type=int, default=2048)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--calls", type=int, default=50, help="calls per round")
    parser.add_argument("--torch-compile", action="store_true", help="add torch.compile as a column")
    parser.add_argument("--write", action="store_true", help="write results/block_host_cpu.{md,json}")
    args = parser.parse_args()
    torch.set_num_threads(1)
    warnings.simplefilter("ignore")
    torch.manual_seed(0)
    block = Block(args.width, args.hidden)
    x = torch.randn(args.batch, args.width, requires_grad=True)
    grad = torch.randn(args.batch, args.width)
    systems = {"eager": block, "torchsmith": torchsmith.compile(block)}
    if args.torch_compile:
        systems["torch.compile"] = torch.compile(block, backend="inductor")  # the baseline only
    expected = block(x)
    for name, fn in systems.items():
        torch.testing.assert_close(fn(x), expected, rtol=1e-4, atol=1e-4, msg=lambda m, n=name: f"{n}: {m}")
    rows = {}
    for kind in ("forward", "forward_backward"):
        fns = {}
        for name, model in systems.items():
            forward, forward_backward = step_fns(model, x, grad)
            fns[name] = forward if kind == "forward" else forward_backward
            for _ in range(10):
                fns[name]()
        samples = interleaved_times(fns, args.rounds, args.calls)
        rows[kind] = {name: statistics.median(v) * 1e6 for name, v in samples.items()}
        rows[kind]["best"] = {name: min(v) * 1e6 for name, v in samples.items()}
        line = ", ".join(f"{name} {rows[kind][name]:.0f} us (best {rows[kind]['best'][name]:.0f})"
                         for name in systems)
        print(f"{kind}: {line} (torchsmith - eager {rows[kind]['torchsmith'] - rows[kind]['eager']:+.0f} us)",
              flush=True)
    if args.write:
        report = {"machine": machine(), "settings": vars(args), "rows": rows}
        (RESULTS / "block_host_cpu.json").write_text(json.dumps(report, indent=1) + "\n")
        names = list(systems)
        m = report["machine"]
        lines = [
            "# Host time of one compiled block per training step (CPU, 1 thread)",
            "",
            f"Block: LayerNorm, Linear {args.width}->{args.hidden}, GELU, Linear {args.hidden}->"
            f"{args.width}, residual; batch {args.batch}, fp32. {m['cpu']}, {m['cpu_count']} CPUs shared "
            f"with other jobs; torch {m['torch']}; {m['date']}. Median of {args.rounds} rounds of "
            f"{args.calls} calls, the systems taking turns each round.",
            "",
            "| step | " + " | ".join(f"{n} µs" for n in names) + " | torchsmith - eager µs |",
            "|---|" + "---:|" * (len(names) + 1),
        ]
        for kind, row in rows.items():
            lines.append(f"| {kind.replace('_', ' + ')} | " + " | ".join(f"{row[n]:.0f}" for n in names)
                         + f" | {row['torchsmith'] - row['eager']:+.0f} |")
        (RESULTS / "block_host_cpu.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    sys.exit(main())
