"""The time of every launch config of every tuned Triton kernel over the GPU suite's workloads, to
choose the config lists (`triton/pointwise.py`, `triton/reduction.py`): each config is compiled
before a kernel's first call, so a list should hold the fewest configs that come near the best of a
wider one.

    python benchmarks/tune_configs.py --out tuning.json             # both dtypes, every workload
    python benchmarks/tune_configs.py --dtype bfloat16 --only mlp_train --out tuning.json

Each record: workload, dtype, kernel name and kind, sizes, the kernel's configs, one config and its
time. Needs a GPU (the interpreter does not tune). Not part of `nox -s bench`.
"""

from __future__ import annotations

import argparse
import json
import time

import torch
from bench_inductor import TorchsmithProbe, make_step, make_system, prepare
from inductor_workloads import WORKLOADS

from torchsmith.inductor.runtime import triton_launch


def record_timings(records: list) -> None:
    """Append a record to `records` for every config `TritonLauncher` times from now on."""
    timed = triton_launch.TritonLauncher._time

    def _time(self, config, numels, tensors, symbols, device):
        seconds = timed(self, config, numels, tensors, symbols, device)
        records.append({"kernel": self.spec.name, "kind": self.spec.kind, "numels": list(numels),
                        "configs": [dict(c) for c in self.spec.configs], "config": dict(config),
                        "seconds": seconds})
        return seconds

    triton_launch.TritonLauncher._time = _time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dtype", action="append", choices=["float32", "bfloat16", "float16"])
    parser.add_argument("--only", action="append", choices=list(WORKLOADS), metavar="NAME")
    parser.add_argument("--out", required=True, help="the JSON file of records")
    args = parser.parse_args()
    records: list = []
    record_timings(records)
    for dtype in args.dtype or ["bfloat16", "float32"]:
        for name in args.only or list(WORKLOADS):
            start, first = time.perf_counter(), len(records)
            module, inputs = prepare(name, "cuda", getattr(torch, dtype), False)
            fn = make_system("torchsmith", module, TorchsmithProbe("inductor", "cuda"))
            step = make_step(WORKLOADS[name].train, module, fn, inputs)
            step()
            step()  # a training step's backward kernels are tuned in its first call too
            torch.cuda.synchronize()
            for record in records[first:]:
                record.update(workload=name, dtype=dtype)
            print(f"{name} {dtype}: {len(records) - first} timings, {time.perf_counter() - start:.1f} s")
            with open(args.out, "w") as f:
                json.dump(records, f)
            del module, fn, step
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
