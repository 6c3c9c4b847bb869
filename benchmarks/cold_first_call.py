"""Cold first call of one workload in a fresh process, empty caches: the compile time a user meets
when a program starts. bench_inductor.py --one-process times first calls inside its one measuring
process instead, where the second compiler to run pays for the first one's heap and processes and
the first one's imports are already paid; this script keeps each system alone.

    python benchmarks/cold_first_call.py mlp_train --device cuda --dtype bfloat16 --out results/x.md

runs each system in its own fresh process (empty TORCHINDUCTOR_CACHE_DIR, TRITON_CACHE_DIR and
TORCHSMITH_CACHE_DIR) and appends one line per system to `--out`: the seconds of the first call
(compile included; training workloads: forward, backward and the optimizer step, after one
throwaway optimizer step as bench_inductor.py takes) and of the process until then.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time

SYSTEMS = ("torchsmith", "torch.compile")


def child(workload: str, device: str, dtype_name: str, system: str) -> str:
    """In a fresh process: import, build, compile, one first call; returns the result line."""
    started = time.perf_counter()
    import torch
    from bench_inductor import _first_optimizer_step, make_step, prepare
    from inductor_workloads import WORKLOADS

    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    module, inputs = prepare(workload, device, getattr(torch, dtype_name), False)
    train = WORKLOADS[workload].train
    if train:
        _first_optimizer_step(device)
    sync()
    start = time.perf_counter()
    if system == "torchsmith":
        import torchsmith

        fn = torchsmith.compile(module)
    else:
        fn = torch.compile(module)
    make_step(train, module, fn, inputs)()
    sync()
    first = time.perf_counter() - start
    return (f"| {workload} | {dtype_name} | {system} | {first:.2f} | {time.perf_counter() - started:.2f} |")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("workloads", nargs="+")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--out", help="append the table's lines here")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(child(args.workloads[0], args.device, args.dtype, args.child), flush=True)
        return
    for workload in args.workloads:
        for system in SYSTEMS:
            with tempfile.TemporaryDirectory() as caches:
                env = dict(os.environ)
                for name in ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR", "TORCHSMITH_CACHE_DIR"):
                    env[name] = os.path.join(caches, name)
                command = [sys.executable, __file__, workload, "--device", args.device, "--dtype", args.dtype,
                           "--child", system]
                done = subprocess.run(command, env=env, capture_output=True, text=True)
                line = next((ln for ln in done.stdout.splitlines() if ln.startswith("| ")), None)
                if line is None:
                    tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
                    line = f"| {workload} | {args.dtype} | {system} | failed: {tail[:120]} | - |"
            print(line, flush=True)
            if args.out:  # line by line: a run cut short keeps what it measured
                with open(args.out, "a") as out:
                    out.write(line + "\n")


if __name__ == "__main__":
    main()
