"""What every benchmark script shares: the machine description written beside the numbers, timing
helpers, and short error text for tables.

    >>> info = machine({"sympy": sympy.__version__})      # doctest: +SKIP
    >>> per_call = interleaved_times({"a": f, "b": g}, rounds=5, calls=10)  # doctest: +SKIP
"""

from __future__ import annotations

import datetime
import math
import os
import pathlib
import platform
import statistics
import time
from collections.abc import Callable

import torch

RESULTS = pathlib.Path(__file__).resolve().parent / "results"


def prepare_native() -> dict:
    """Load torchsmith's C++ extensions (guards' tensor checks, kernel calls) before anything is
    timed, built into the user's default folder where TORCHSMITH_NATIVE_DIR is not set: they are
    built once per torch and Python (as torch's own binaries are), not per program, so a benchmark's
    empty program caches do not hold them. Which of them are loaded (False: that part stays in
    Python, as the log says)."""
    from torchsmith.capture import native_guards
    from torchsmith.inductor.runtime import native_calls

    default = os.path.join(os.path.expanduser("~"), ".cache", "torchsmith", "native")
    os.environ.setdefault("TORCHSMITH_NATIVE_DIR", default)
    native_guards.request()
    native_calls.EXTENSION.request()
    return {"native_guards": native_guards.wait(600), "native_kernel_calls": native_calls.EXTENSION.wait(600)}


def cpu_name() -> str:
    """The CPU's model name from /proc/cpuinfo, else what `platform` knows."""
    try:
        for line in pathlib.Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def gpu_name() -> str | None:
    """The first CUDA device's name, or None without one (never initializes CUDA needlessly)."""
    try:
        return torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    except Exception:  # a broken driver: the benchmark still runs on CPU
        return None


def machine(extra: dict | None = None) -> dict:
    """The machine and versions a benchmark ran on; `extra` adds keys (package versions, say)."""
    info = {
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "platform": platform.platform(),
        "cpu": cpu_name(),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "python": platform.python_version(),
        "torch": torch.__version__,
    }
    info.update(extra or {})
    return info


def short_error(e: BaseException) -> str:
    """`Type: first line of the message`, cut to fit a table cell or a JSON field."""
    first = str(e).strip().splitlines()[0] if str(e).strip() else ""
    return f"{type(e).__name__}: {first}"[:300]


def synchronizer(device: str) -> Callable[[], None]:
    """A function that waits for the device's queued work (timing GPU code without it times launches)."""
    if device.startswith("cuda"):
        return torch.cuda.synchronize
    return lambda: None


def calls_per_round(fn: Callable[[], object], sync: Callable[[], None], target_s: float = 0.02) -> int:
    """How many calls of `fn` make one timed round of about `target_s` (at least one)."""
    sync()
    start = time.perf_counter()
    fn()
    sync()
    once = max(time.perf_counter() - start, 1e-7)
    return max(1, min(1000, round(target_s / once)))


def interleaved_times(
    fns: dict[str, Callable[[], object]],
    rounds: int,
    calls: int,
    sync: Callable[[], None] = lambda: None,
    clock: Callable[[], float] = time.perf_counter,
    rotate: bool = False,
) -> dict[str, list[float]]:
    """Seconds per call of each function, one sample per round; within a round every function runs
    `calls` times in turn, so a slow spell of a shared machine hits all of them alike. `clock`:
    wall time by default; `time.thread_time` leaves out what other jobs take of a shared core.
    `rotate`: each round starts one function later, so no function always runs right after the same
    one (for calls of a few hundred microseconds, what ran just before decides what is still in the
    CPU's caches)."""
    samples: dict[str, list[float]] = {name: [] for name in fns}
    order = list(fns.items())
    for round_index in range(rounds):
        shift = round_index % len(order) if rotate else 0
        for name, fn in order[shift:] + order[:shift]:
            sync()
            start = clock()
            for _ in range(calls):
                fn()
            sync()
            samples[name].append((clock() - start) / calls)
    return samples


def median(samples: list[float]) -> float:
    """The median of timing samples (robust to a few slow rounds on a shared machine)."""
    return statistics.median(samples)


def geomean(values: list[float]) -> float | None:
    """The geometric mean of positive numbers (speedups), None for an empty list."""
    values = [v for v in values if v and v > 0]
    if not values:
        return None
    return math.exp(sum(math.log(v) for v in values) / len(values))
