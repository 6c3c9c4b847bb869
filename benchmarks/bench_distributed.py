"""Training step time under DDP and FSDP2: eager, torch.compile and torchsmith, gloo with 2 ranks on
CPU, or NCCL with one rank on a GPU.

    python benchmarks/bench_distributed.py            # results/distributed.{md,json}, a few minutes
    python benchmarks/bench_distributed.py --quick    # tiny models and few steps, writes nothing
    python benchmarks/bench_distributed.py --device cuda --rounds 7   # results/distributed_cuda.{md,json}

Two processes (gloo, `torch.multiprocessing` spawn, one torch thread each) build every configuration
of a model: DDP and FSDP2 (each block `fully_shard`ed, then the root), each eager, under
`torch.compile` (DDPOptimizer for DDP; blocks sharded then the model compiled for FSDP) and under
`torchsmith.compile` (inductor; for DDP also with `ddp.split_at_buckets` off). The first step of
each is timed alone (compile + run), and a second one runs untimed (DDP rebuilds its buckets after
the first backward, and torchsmith plans its cut again from them); then the configurations take
turns, `--steps` SGD steps each per round, each round starting with the next configuration so that
none always runs right after another, and a configuration's step time is the median over rounds of
rank 0's time per step (ranks meet at a barrier before every round). Its speed against eager under
the same wrapper is given twice: the ratio of the medians, and the median over rounds of the ratio
within a round (paired: the configurations of one round ran within a second or two of each other,
so load from other processes that comes and goes between rounds cancels). Beside it, rank 0's CPU time
per step: what its main thread computed (forward, backward, optimizer, FSDP's copies); the rest of a
step is waiting on collectives, which gloo's threads run. DDP's buckets are capped at `--bucket-mb`
so these small models span several buckets, as large ones do at DDP's default 25 MB. Each rank runs
on a CPU of its own (`--no-pin` lets them share).

`--device cuda` runs the same models (float32) and configurations in one process on cuda:0 with the
NCCL backend (world size 1: the collectives run, over one rank), the host's threads left as torch
sets them. Clocks are read after `torch.cuda.synchronize()`, so a step's time lasts until the GPU has
run it, not until its launches return; the CPU column is then the host's time to issue a step (read
before that synchronize).
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import statistics
import sys
import tempfile
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

from common import RESULTS, gpu_name, machine, short_error, synchronizer  # noqa: E402

WORLD_SIZE = 2  # ranks on CPU; on a GPU, one rank for each of `CUDA_WORLD_SIZE` devices
CUDA_WORLD_SIZE = 1
LOADED = 3.0  # a load average from other processes above this is called out in the table
MODELS = ["mlp", "gpt2"]
CPU = torch.device("cpu")


class Block(torch.nn.Module):
    def __init__(self, width: int):
        super().__init__()
        self.lin = torch.nn.Linear(width, width)

    def forward(self, x):
        return torch.nn.functional.gelu(self.lin(x)) + x


class MLP(torch.nn.Module):
    def __init__(self, width: int, depth: int):
        super().__init__()
        self.blocks = torch.nn.ModuleList([Block(width) for _ in range(depth)])
        self.head = torch.nn.Linear(width, 16)

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return self.head(x)


class LogitsOf(torch.nn.Module):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, ids):
        return self.model(input_ids=ids).logits


def build(name: str, quick: bool, device: torch.device = CPU):
    """(model on `device`, its blocks, a batch maker taking a CPU generator) of workload `name`,
    weights from seed 0; batches are drawn on the CPU, so every device trains on the same data."""
    torch.manual_seed(0)
    if name == "mlp":
        width, depth, batch = (64, 4, 8) if quick else (512, 8, 64)
        model = MLP(width, depth)
        return model.to(device), model.blocks, lambda g: torch.randn(batch, width, generator=g).to(device)
    from transformers import GPT2Config, GPT2LMHeadModel

    size = dict(n_embd=32, n_layer=2, n_head=2) if quick else dict(n_embd=128, n_layer=4, n_head=4)
    seq, batch, vocab = (16, 2, 128) if quick else (64, 8, 1024)
    config = GPT2Config(vocab_size=vocab, n_positions=seq, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                        bos_token_id=0, eos_token_id=0, **size)
    model = LogitsOf(GPT2LMHeadModel(config)).to(device)

    def tokens(g: torch.Generator) -> torch.Tensor:
        return torch.randint(0, vocab, (batch, seq), generator=g).to(device)

    return model, model.model.transformer.h, tokens


def configure(kind: str, name: str, quick: bool, bucket_mb: float, device: torch.device = CPU,
              mesh=None):
    """(callable, parameters module, batch maker) for configuration `kind` ("DDP eager", ...) on
    `device`; FSDP shards over `mesh` (None: fully_shard's default mesh)."""
    from torch.distributed.fsdp import fully_shard
    from torch.nn.parallel import DistributedDataParallel as DDP

    import torchsmith

    wrapper, compiler = kind.split(" ", 1)
    model, blocks, make = build(name, quick, device)
    if wrapper == "DDP":
        device_ids = [device.index] if device.type == "cuda" else None
        ddp = DDP(model, device_ids=device_ids, bucket_cap_mb=bucket_mb)
        if compiler == "eager":
            return ddp, model, make
        if compiler == "torch.compile":
            return torch.compile(ddp), model, make
        split = compiler == "torchsmith"
        return torchsmith.compile(ddp, options={"ddp.split_at_buckets": split}), model, make
    for block in blocks:
        fully_shard(block, mesh=mesh)
    fully_shard(model, mesh=mesh)
    if compiler == "eager":
        return model, model, make
    if compiler == "torch.compile":
        return torch.compile(model), model, make
    return torchsmith.compile(model), model, make


KINDS = ["DDP eager", "DDP torch.compile", "DDP torchsmith", "DDP torchsmith unsplit",
         "FSDP eager", "FSDP torch.compile", "FSDP torchsmith"]


def step(run, params, x, optimizer) -> None:
    optimizer.zero_grad()
    run(x).float().pow(2).mean().backward()
    optimizer.step()


def world_size_of(device: str) -> int:
    return CUDA_WORLD_SIZE if device == "cuda" else WORLD_SIZE


def worker(rank: int, init_file: str, out: str, name: str, quick: bool, steps: int, rounds: int,
           bucket_mb: float, kinds: list[str], pin: bool, device_type: str = "cpu"):
    world_size = world_size_of(device_type)
    if device_type == "cuda":
        device = torch.device("cuda", rank)
        torch.cuda.set_device(device)  # FSDP2 places shards on the current device
        backend = "nccl"
    else:
        device, backend = torch.device("cpu"), "gloo"
        torch.set_num_threads(1)
        cpus = sorted(os.sched_getaffinity(0))
        if pin and len(cpus) >= world_size:
            # One CPU per rank: its compute and its gloo threads stay on it instead of migrating between
            # the ranks' CPUs, which made a round's time swing by 15% either way.
            os.sched_setaffinity(0, {cpus[rank]})
    dist.init_process_group(backend, init_method=f"file://{init_file}", rank=rank, world_size=world_size)
    result = time_configurations(rank, name, quick, steps, rounds, bucket_mb, kinds, device, world_size)
    if rank == 0:
        pathlib.Path(out).write_text(json.dumps(result))
    dist.destroy_process_group()
    # DDP's reducer keeps the process group, and so gloo's worker threads, alive until the process
    # ends; a worker thread that releases a finished collective while the interpreter shuts down aborts
    # the process ("terminate called without an active exception"), failing a run whose results are
    # already written. Leaving without the interpreter's shutdown takes that race away.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def time_configurations(rank: int, name: str, quick: bool, steps: int, rounds: int, bucket_mb: float,
                        kinds: list[str], device: torch.device, world_size: int) -> dict:
    """Builds every configuration, times its steps round by round and returns this rank's rows."""
    from torch.distributed.device_mesh import init_device_mesh

    # An explicit mesh: fully_shard's default picks the machine's accelerator even for a gloo run.
    mesh = init_device_mesh(device.type, (world_size,))
    sync = synchronizer(device.type)

    def barrier():
        if device.type == "cuda":  # NCCL's barrier is a collective on a device: name it, not guessed
            dist.barrier(device_ids=[device.index])
        else:
            dist.barrier()
        sync()

    g = torch.Generator().manual_seed(rank)
    configs, first, errors = {}, {}, {}
    for kind in kinds:
        try:
            run, params, make = configure(kind, name, quick, bucket_mb, device, mesh)
            optimizer = torch.optim.SGD(params.parameters(), lr=1e-3)
            x = make(g)
            barrier()
            start = time.perf_counter()
            step(run, params, x, optimizer)
            sync()
            first[kind] = time.perf_counter() - start
            step(run, params, x, optimizer)
            configs[kind] = (run, params, x, optimizer)
        except Exception as e:  # a configuration that fails is a table cell, not the end of the run
            errors[kind] = short_error(e)
        if rank == 0:  # progress of a run whose compiles take minutes
            done = f"failed: {errors[kind]}" if kind in errors else f"first step {first[kind]:.1f} s"
            print(f"[{name}] {kind}: {done}", file=sys.stderr, flush=True)
    times: dict[str, list[float]] = {kind: [] for kind in configs}
    cpu_times: dict[str, list[float]] = {kind: [] for kind in configs}
    order = list(configs)
    for r in range(rounds):
        for kind in order[r % len(order):] + order[:r % len(order)]:
            run, params, x, optimizer = configs[kind]
            barrier()
            start, cpu_start = time.perf_counter(), time.thread_time()
            for _ in range(steps):
                step(run, params, x, optimizer)
            # Before the synchronize, which waits (on a GPU, spinning) for the queued work.
            cpu_times[kind].append((time.thread_time() - cpu_start) / steps)
            sync()
            times[kind].append((time.perf_counter() - start) / steps)
    result = {kind: {"step_ms": statistics.median(t) * 1e3,
                     "cpu_ms": statistics.median(cpu_times[kind]) * 1e3,
                     "first_s": first[kind], "rounds_ms": [round(v * 1e3, 2) for v in t],
                     "rounds_cpu_ms": [round(v * 1e3, 2) for v in cpu_times[kind]]}
              for kind, t in times.items()}
    result.update({kind: {"error": e} for kind, e in errors.items()})
    return result


def measure(name: str, args) -> dict:
    with tempfile.TemporaryDirectory(prefix="bench-dist-") as tmp:
        out = os.path.join(tmp, "result.json")
        mp.spawn(worker, args=(os.path.join(tmp, "init"), out, name, args.quick, args.steps, args.rounds,
                               args.bucket_mb, args.kind or KINDS, not args.no_pin, args.device),
                 nprocs=world_size_of(args.device))
        return json.loads(pathlib.Path(out).read_text())


def loaded(info: dict, world_size: int = WORLD_SIZE) -> bool:
    """Whether other processes loaded the machine: a load average above `LOADED` before the run, or
    above it beside the ranks' own after it."""
    return info["load_before"] > LOADED or info["load_after"] > LOADED + world_size


def paired_ratio(base_rounds: list[float], rounds: list[float]) -> float:
    """The median over rounds of base's time / this time within the same round."""
    return statistics.median(b / t for b, t in zip(base_rounds, rounds))


def header_cpu(info: dict, args) -> list[str]:
    return [
        "# Distributed training step: eager, torch.compile and torchsmith (gloo, 2 ranks, CPU)",
        "",
        f"Machine: {info['cpu']}, {info['cpus_used']} of its {info['cpu_count']} CPUs, "
        + ("shared by both ranks" if args.no_pin or info["cpus_used"] < WORLD_SIZE else "one for each rank")
        + " (1 torch thread each), "
        f"{info['platform']}; Python {info['python']}, torch {info['torch']}; {info['date']}.",
        f"Step = forward, backward (gradients all-reduced or reduce-scattered over gloo) and an SGD step; "
        f"median over {args.rounds} interleaved rounds of {args.steps} steps, rank 0's wall time; "
        f"DDP buckets capped at {args.bucket_mb} MB. vs eager = eager's median step / this one's; paired = "
        "the median over rounds of that ratio within one round. CPU ms = rank 0's main-thread CPU time "
        "per step (median over the same rounds): the step's compute; the rest of its wall time waits on "
        "collectives (run by gloo's threads on the same CPU). First step = compile + first run. "
        "Speedup > 1: faster than eager under the same wrapper. "
        f"Load average (1 min) {info['load_before']:.2f} before the run, {info['load_after']:.2f} after "
        f"(the ranks themselves count for {WORLD_SIZE} of it)."
        + (" The machine was loaded (other processes shared its CPUs with the ranks), so rounds vary by "
           "tens of percent; the paired column is the steadier comparison." if loaded(info) else ""),
    ]


def header_cuda(info: dict, args) -> list[str]:
    world = CUDA_WORLD_SIZE
    return [
        f"# Distributed training step: eager, torch.compile and torchsmith (NCCL, world size {world}, "
        f"{info['gpu']})",
        "",
        f"Machine: {info['gpu']} (CUDA {info['cuda']}, NCCL {info['nccl']}), host {info['cpu']} with "
        f"{info['cpu_count']} CPUs, {info['platform']}; Python {info['python']}, torch {info['torch']}, "
        f"Triton {info['triton']}, transformers {info['transformers']}; {info['date']}.",
        f"One process on cuda:0, float32, NCCL with world size {world}: DDP's all-reduces and FSDP2's "
        "all-gathers and reduce-scatters run (over one rank), so the step pays for the wrappers' hooks, "
        "copies and collective launches, not for any transfer between GPUs. "
        "Step = forward, backward and an SGD step; "
        f"median over {args.rounds} interleaved rounds of {args.steps} steps, wall time from a "
        "`torch.cuda.synchronize()` to one after the round's last step; "
        f"DDP buckets capped at {args.bucket_mb} MB. vs eager = eager's median step / this one's; paired = "
        "the median over rounds of that ratio within one round. CPU ms = the main thread's CPU time per "
        "step before the round's closing synchronize: the host's work to issue the step (Python, "
        "dispatch, kernel launches); where it is close to the step time the step is bound by the host. "
        "First step = compile + first run. Speedup > 1: faster than eager under the same wrapper. "
        f"Load average (1 min) {info['load_before']:.2f} before the run, {info['load_after']:.2f} after."
        + (" The host was loaded by other processes." if loaded(info, world) else ""),
    ]


def table(results: dict, info: dict, args) -> str:
    lines = header_cuda(info, args) if getattr(args, "device", "cpu") == "cuda" else header_cpu(info, args)
    lines += [
        "",
        "| model | configuration | step ms | vs eager | paired | CPU ms | CPU vs eager | first step s |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for name, rows in results.items():
        for kind in KINDS:
            row = rows.get(kind, {"error": "not run"})
            if "error" in row:
                lines.append(f"| {name} | {kind} | failed: {row['error']} | | | | | |")
                continue
            eager = rows.get(kind.split(" ")[0] + " eager", {})
            speedup = paired = cpu_speedup = ""
            if "step_ms" in eager:
                speedup = f"{eager['step_ms'] / row['step_ms']:.2f}x"
                paired = f"{paired_ratio(eager['rounds_ms'], row['rounds_ms']):.2f}x"
                cpu_speedup = f"{eager['cpu_ms'] / row['cpu_ms']:.2f}x"
            lines.append(f"| {name} | {kind} | {row['step_ms']:.2f} | {speedup} | {paired} | "
                         f"{row['cpu_ms']:.2f} | {cpu_speedup} | {row['first_s']:.1f} |")
    return "\n".join(lines) + "\n"


def split_choices(values: list[str] | None, choices: list[str], flag: str, parser) -> list[str] | None:
    """`--flag a,b --flag c` as [a, b, c], each checked against `choices` (None when not given)."""
    if values is None:
        return None
    picked = [v.strip() for value in values for v in value.split(",") if v.strip()]
    unknown = [v for v in picked if v not in choices]
    if unknown:
        parser.error(f"{flag}: unknown {', '.join(map(repr, unknown))} (choose from {', '.join(choices)})")
    return picked


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--quick", action="store_true", help="tiny models, few steps; writes nothing")
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu",
                        help="cpu: gloo, 2 ranks; cuda: NCCL, world size 1 on cuda:0")
    parser.add_argument("--only", action="append", metavar="MODELS",
                        help=f"workloads, comma-separated or repeated ({', '.join(MODELS)})")
    parser.add_argument("--kind", action="append", metavar="KINDS",
                        help=f"configurations, comma-separated or repeated ({', '.join(KINDS)})")
    parser.add_argument("--steps", type=int, default=None, help="steps per configuration per round")
    parser.add_argument("--rounds", type=int, default=None, help="timed rounds")
    parser.add_argument("--no-pin", action="store_true", help="let ranks share all CPUs (default: one each)")
    parser.add_argument("--bucket-mb", type=float, default=1.0, help="DDP bucket_cap_mb")
    args = parser.parse_args(argv)
    args.only = split_choices(args.only, MODELS, "--only", parser)
    args.kind = split_choices(args.kind, KINDS, "--kind", parser)
    # A GPU step of these models takes milliseconds: more of them make a round worth timing.
    args.steps = args.steps or (2 if args.quick else 20 if args.device == "cuda" else 5)
    args.rounds = args.rounds or (2 if args.quick else 21)
    if args.device == "cuda":
        if not torch.cuda.is_available():
            parser.error(f"--device cuda needs a CUDA GPU, and torch {torch.__version__} sees none "
                         "(torch.cuda.is_available() is False); run without --device for gloo on CPU")
        if not dist.is_nccl_available():
            parser.error(f"--device cuda needs the NCCL backend, which torch {torch.__version__} "
                         "was built without")
    return args


def describe(args, load_before: float) -> dict:
    """The machine description beside the numbers: CPUs used on CPU; the GPU and versions on cuda."""
    extra = {"cpus_used": len(os.sched_getaffinity(0))} if args.device == "cpu" else {}
    extra.update(load_before=load_before, load_after=os.getloadavg()[0])
    if args.device == "cuda":
        import transformers
        import triton
        from torch.cuda import nccl

        version = nccl.version()
        extra.update(gpu=gpu_name(), cuda=torch.version.cuda, triton=triton.__version__,
                     transformers=transformers.__version__,
                     nccl=".".join(map(str, version)) if isinstance(version, tuple) else str(version))
    return machine(extra)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.device == "cpu":
        os.environ.setdefault("OMP_NUM_THREADS", "1")
    load_before = os.getloadavg()[0]
    results = {name: measure(name, args) for name in (args.only or MODELS)}
    info = describe(args, load_before)
    text = table(results, info, args)
    print(text)
    if not args.quick and not args.kind:
        stem = "distributed_cuda" if args.device == "cuda" else "distributed"
        record = {"machine": info, "args": vars(args), "results": results}
        (RESULTS / f"{stem}.json").write_text(json.dumps(record, indent=1))
        (RESULTS / f"{stem}.md").write_text(text)


if __name__ == "__main__":
    main()
