"""Where one workload's time goes, per system: host time per call (no synchronization) against the
device time per call, and torch.profiler's top ops and kernels. For a workload where torchsmith
trails torch.compile, this tells host-bound (Python per call) from slow kernels.

    python benchmarks/profile_workload.py bert --device cuda --dtype bfloat16
    python benchmarks/profile_workload.py mlp --systems torchsmith --top 15
    python benchmarks/profile_workload.py decode --device cuda --dtype bfloat16 \
        --systems torch.compile torchsmith torch.compile-default torchsmith-default

`decode` is bench_decode.py's one-token step (its decoder, prefilled eagerly; mode="reduce-overhead"
for torch.compile and torchsmith, mode="default" for the `-default` systems).

Not part of `nox -s bench`: it prints tables to read, and writes nothing.
"""

from __future__ import annotations

import argparse
import time

import torch
from bench_inductor import TorchsmithProbe, make_step, make_system
from common import prepare_native
from inductor_workloads import WORKLOADS


def _synchronize(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def _per_call(step, calls: int, device: str) -> tuple[float, float]:
    """(host seconds per call without waiting for the device, wall seconds per call with it)."""
    _synchronize(device)
    start = time.perf_counter()
    for _ in range(calls):
        step()
    host = (time.perf_counter() - start) / calls
    _synchronize(device)
    return host, (time.perf_counter() - start) / calls


def _print_first_sync(step) -> None:
    """Where a call makes the host wait for the GPU (a pageable copy, `.item()`): such a call cannot
    overlap its kernels with the next call's Python, so its time is host plus device."""
    import traceback

    torch.cuda.set_sync_debug_mode("error")
    try:
        step()
        print("no synchronizing call")
    except RuntimeError:
        print("first synchronizing call:\n" + "".join(traceback.format_exc().splitlines(True)[-30:]))
    finally:
        torch.cuda.set_sync_debug_mode("default")


def _print_python_profile(step, args) -> None:
    """Where the host's Python time per call goes: cProfile's top functions by own time."""
    import cProfile
    import pstats

    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(args.calls):
        step()
    profiler.disable()
    _synchronize(args.device)
    pstats.Stats(profiler).sort_stats(args.sort).print_stats(args.top)


def _workload_step(system: str, name: str, args):
    workload = WORKLOADS[name]
    torch.manual_seed(0)
    module, inputs = workload.build(args.quick, args.device.startswith("cuda"))
    dtype = getattr(torch, args.dtype)
    module = module.to(device=args.device, dtype=dtype).train(workload.train)
    inputs = [x.to(args.device, dtype if x.is_floating_point() else x.dtype) for x in inputs]
    probe = TorchsmithProbe("inductor", args.device) if system == "torchsmith" else None
    return make_step(workload.train, module, make_system(system, module, probe), inputs)


def _decode_step(system: str, args):
    """bench_decode.py's one-token step after an eager prefill, at one position every call."""
    from bench_decode import QUICK, DecoderConfig, build, compile_with

    config = QUICK if args.quick else DecoderConfig()
    model = build(config, args.device, getattr(torch, args.dtype))
    prompt = 16 if args.quick else 1024
    tokens = torch.randint(0, config.vocab, (1, prompt + 1), generator=torch.Generator().manual_seed(1))
    tokens, positions = tokens.to(args.device), torch.arange(config.max_seq, device=args.device)
    with torch.no_grad():
        model(tokens[:, :prompt], positions[:prompt])
    compiled = compile_with(system, model)
    token, position = tokens[:, prompt:prompt + 1], positions[prompt:prompt + 1]

    def step():
        with torch.no_grad():
            return compiled(token, position)

    return step


def _device_summary(averages, calls: int) -> str:
    """Kernel launches and device time per call, from the profiler's CUDA events."""
    cuda = torch.autograd.DeviceType.CUDA
    kernels = [a for a in averages if getattr(a, "device_type", None) == cuda]
    launches = sum(a.count for a in kernels) / calls
    device_us = sum(getattr(a, "self_device_time_total", 0) for a in kernels) / calls
    return f"{launches:.0f} kernel launches and {device_us / 1e3:.3f} ms of device time per call"


def profile_system(system: str, name: str, args) -> None:
    gpu = args.device.startswith("cuda")
    step = _decode_step(system, args) if name == "decode" else _workload_step(system, name, args)
    for _ in range(args.warmup):
        step()
    if args.find_syncs and gpu:
        _print_first_sync(step)
    host, wall = _per_call(step, args.calls, args.device)
    print(f"\n=== {name} / {system}: {host * 1e3:.3f} ms host per call (no sync), {wall * 1e3:.3f} ms wall")
    if args.cprofile:
        _print_python_profile(step, args)
    activities = [torch.profiler.ProfilerActivity.CPU]
    if gpu:
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    with torch.profiler.profile(activities=activities) as prof:
        for _ in range(args.calls):
            step()
        _synchronize(args.device)
    averages = prof.key_averages()
    print(averages.table(sort_by="self_cpu_time_total", row_limit=args.top))
    if gpu:
        print(_device_summary(averages, args.calls))
        print(averages.table(sort_by="self_cuda_time_total", row_limit=args.top))


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("workload", choices=[*WORKLOADS, "decode"])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    parser.add_argument("--systems", nargs="+", default=["eager", "torch.compile", "torchsmith"])
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--top", type=int, default=12, help="rows of each profiler table")
    parser.add_argument("--cprofile", action="store_true", help="also cProfile's top Python functions")
    parser.add_argument("--sort", default="tottime", help="cProfile's order: tottime or cumulative")
    parser.add_argument("--find-syncs", action="store_true", help="the first call that waits for the GPU")
    parser.add_argument("--quick", action="store_true", help="the workload's tiny sizes")
    args = parser.parse_args(argv)
    if any(system.startswith("torchsmith") for system in args.systems):
        print(f"native extensions: {prepare_native()}")  # as the benchmarks time it
    for system in args.systems:
        profile_system(system, args.workload, args)


if __name__ == "__main__":
    main()
