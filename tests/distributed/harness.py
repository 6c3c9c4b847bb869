"""Run a scenario on several processes (gloo, `torch.multiprocessing` spawn), collecting each rank's result.

A scenario is a function `scenario(rank, world_size, **kwargs) -> dict` in a module the test put on
`sys.path` (spawned processes import it by name; they inherit the parent's `sys.path`). Each rank
saves its dict with `torch.save`; `run_ranks` returns the list, rank 0 first. A scenario that raises
fails the spawn with the rank's traceback.
"""

import importlib
import os
import pathlib
import tempfile

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

WORLD_SIZE = 2


def run_ranks(module: str, scenario: str, world_size: int = WORLD_SIZE, **kwargs) -> list[dict]:
    """`module.scenario(rank, world_size, **kwargs)` on `world_size` processes; their results by rank."""
    with tempfile.TemporaryDirectory(prefix="torchsmith-dist-") as tmp:
        init_file = os.path.join(tmp, "init")
        mp.spawn(_entry, args=(world_size, init_file, tmp, module, scenario, kwargs), nprocs=world_size)
        return [torch.load(pathlib.Path(tmp) / f"rank{r}.pt", weights_only=False) for r in range(world_size)]


def run_many(module: str, calls: dict, world_size: int = WORLD_SIZE) -> list[dict]:
    """Several scenarios of `module` in one set of processes (one start-up, not one per scenario):
    `calls` maps a key to (scenario, kwargs); each rank's result maps the key to what it returned."""
    return run_ranks("harness", "_run_calls", world_size, scenarios=module, calls=calls)


def _run_calls(rank, world_size, scenarios: str, calls: dict) -> dict:
    found = importlib.import_module(scenarios)
    return {key: getattr(found, name)(rank, world_size, **kwargs) for key, (name, kwargs) in calls.items()}


def _entry(rank, world_size, init_file, out_dir, module, scenario, kwargs):
    os.environ["OMP_NUM_THREADS"] = "1"
    torch.set_num_threads(1)  # ranks share the machine's cores
    os.environ.setdefault("TORCHSMITH_CACHE_DIR", os.path.join(out_dir, "cache"))
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world_size)
    try:
        result = getattr(importlib.import_module(module), scenario)(rank, world_size, **kwargs)
        torch.save(result, pathlib.Path(out_dir) / f"rank{rank}.pt")
    finally:
        dist.destroy_process_group()
