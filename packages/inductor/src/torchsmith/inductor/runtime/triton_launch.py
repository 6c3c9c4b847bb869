"""Loading and launching generated Triton kernels, with launch-config autotuning remembered on disk.

The generated module is written to `$TORCHSMITH_CACHE_DIR/inductor_triton/<source hash>.py` and
imported from there (`triton.jit` reads a kernel's source from its file). Each kernel offers a few
launch configs; on the first launch for a given set of sizes the tuner times each one on the GPU
and keeps the fastest, in memory and in `autotune.json` next to the modules, keyed by source hash,
kernel, sizes and GPU name, so a second process launches the winner at once. Under
`TRITON_INTERPRET=1` (CPU tensors) timing means nothing and the first config runs, unless a test
sets `TUNE_IN_INTERPRETER`.
"""

import importlib.util
import json
import logging
import os
import sys
import tempfile
import time
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import sympy
import torch

from torchsmith.inductor.errors import RuntimeCallError
from torchsmith.inductor.runtime.triton_workers import driver_ready, running, specializations
from torchsmith.inductor.triton.writer import Config, TritonKernelSpec
from torchsmith.ir.gc_pause import paused_gc
from torchsmith.ir.symbolic import evaluate

log = logging.getLogger("torchsmith.inductor.triton_runtime")
TUNE_IN_INTERPRETER = False  # tests of the tuner turn this on
INDEX_LIMIT = 2**31 - 1  # kernels index with int32


@dataclass
class TuningStats:
    """Counts of this process's tuning decisions, by where the config came from (tests read them)."""

    benchmarked: int = 0
    disk_hits: int = 0
    memory_hits: int = 0


STATS = TuningStats()
_MODULES: dict[str, object] = {}
_CHOICES: dict[str, int] = {}


def cache_dir() -> Path:
    """The directory of generated Triton modules and tuning choices (private: cache_files.py)."""
    from torchsmith.inductor.runtime.cache_files import cache_subdir

    return cache_subdir("inductor_triton")


def interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET") == "1"


def _write_atomically(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=path.suffix)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def load_module(source: str, digest: str):
    """Import the generated module (written to the cache dir once, by hash)."""
    key = f"{digest}:{interpreting()}"
    if key in _MODULES:
        return _MODULES[key]
    path = cache_dir() / f"k{digest}.py"
    if not path.exists() or path.read_text() != source:
        _write_atomically(path, source)
    name = f"torchsmith_triton_k{digest}_{'interp' if interpreting() else 'gpu'}"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # triton resolves the helpers a kernel calls through its module
    spec.loader.exec_module(module)
    _MODULES[key] = module
    return module


def _device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return f"{device.type}-interpreter"


def _tuning_file() -> Path:
    return cache_dir() / "autotune.json"


def _read_choices() -> dict:
    try:
        return json.loads(_tuning_file().read_text())
    except (OSError, ValueError):
        return {}


def _remember(key: str, index: int) -> None:
    choices = _read_choices()
    choices[key] = index
    _write_atomically(_tuning_file(), json.dumps(choices, indent=1, sort_keys=True))


def grid_of(spec: TritonKernelSpec, numels: list[int], config: dict) -> int:
    """Programs to launch: one per block (per tile, per row block)."""
    cdiv = lambda a, b: -(-a // b)  # noqa: E731
    if spec.kind == "tiled":  # (outer,) y, x: every outer index has its row of tiles
        outer = numels[0] if len(numels) == 3 else 1
        return outer * cdiv(numels[-2], config["YBLOCK"]) * cdiv(numels[-1], config["XBLOCK"])
    return cdiv(numels[0], config["XBLOCK"])


@dataclass
class TritonLauncher:
    """A loaded kernel and its configs; `launch(tensors, symbols, bindings)` runs it on the tensors
    (its `writes` then `reads`, in spec order) with the size symbols' values."""

    fn: object
    spec: TritonKernelSpec
    digest: str
    chosen: dict = field(default_factory=dict)
    static_numels: list | None = None
    # A static kernel on a GPU, once its config is decided: launched without Triton's binding.
    direct: object = None

    def __post_init__(self):
        if all(sympy.sympify(n).is_Integer for n in self.spec.numels):
            self.static_numels = [int(n) for n in self.spec.numels]

    def launch(self, tensors: list[torch.Tensor], symbols: list[int], bindings: dict) -> None:
        if self.direct is not None:
            self.direct(tensors)
            return
        numels = self.static_numels or [int(evaluate(n, bindings)) for n in self.spec.numels]
        if any(n > INDEX_LIMIT for n in numels):
            raise RuntimeCallError(
                f"kernel {self.spec.name} would index {max(numels)} elements; Triton kernels index with "
                "int32 so far (up to 2**31 - 1 elements per axis)"
            )
        if 0 in numels[:1] or (self.spec.kind == "tiled" and 0 in numels):
            return
        config = self.config_for(numels, tensors, symbols)
        self._run(config, numels, tensors, symbols)
        if self.static_numels is not None and not symbols and tensors and tensors[0].is_cuda:
            self.direct = self._direct_launch(config, numels, tensors[0].device)

    def _direct_launch(self, config: Config, numels, device: torch.device):
        from torchsmith.inductor.runtime.triton_direct import DirectLaunch

        options = dict(config)
        warps = options.pop("num_warps")
        grid = grid_of(self.spec, numels, options)
        return DirectLaunch(self.fn, options, warps, grid, device.index or 0)

    def _run(self, config: Config, numels, tensors, symbols) -> None:
        options = dict(config)
        warps = options.pop("num_warps")
        grid = (grid_of(self.spec, numels, options),)
        self.fn[grid](*tensors, *symbols, **options, num_warps=warps)

    def _tunes(self, device: torch.device) -> bool:
        return len(self.spec.configs) > 1 and (device.type == "cuda" or TUNE_IN_INTERPRETER)

    def _disk_key(self, numels, device: torch.device) -> str:
        return f"{self.digest}|{self.spec.name}|{list(numels)}|{_device_name(device)}"

    def known_config(self, numels: list[int], device: torch.device) -> Config | None:
        """The config already decided for these sizes (in memory or on disk), or None."""
        if tuple(numels) in self.chosen:
            return self.chosen[tuple(numels)]
        if not self._tunes(device):
            return self.spec.configs[0]
        key = self._disk_key(numels, device)
        if key in _CHOICES:
            return self.spec.configs[_CHOICES[key]]
        choices = _read_choices()
        return self.spec.configs[choices[key]] if key in choices else None

    def config_for(self, numels: list[int], tensors, symbols) -> Config:
        """The config for these sizes: remembered, read from disk, or timed now."""
        key = tuple(numels)
        if key in self.chosen:
            return self.chosen[key]
        configs = self.spec.configs
        device = tensors[0].device if tensors else torch.device("cpu")
        index = 0
        if self._tunes(device):
            disk_key = self._disk_key(numels, device)
            if disk_key in _CHOICES:
                STATS.memory_hits += 1
                index = _CHOICES[disk_key]
            elif disk_key in (choices := _read_choices()):
                STATS.disk_hits += 1
                index = choices[disk_key]
            else:
                STATS.benchmarked += 1
                times = [self._time(c, numels, tensors, symbols, device) for c in configs]
                index = min(range(len(configs)), key=times.__getitem__)
                _remember(disk_key, index)
            _CHOICES[disk_key] = index
        self.chosen[key] = configs[index]
        return configs[index]

    def compile_ahead(self, config: Config, numels, tensors, symbols) -> None:
        """Compile the kernel for `config` and these argument types without launching it."""
        if interpreting():
            return  # the interpreter compiles nothing
        options = dict(config)
        warps = options.pop("num_warps")
        grid = (grid_of(self.spec, numels, options),)
        kernel = self.fn.warmup(*tensors, *symbols, **options, num_warps=warps, grid=grid)
        if hasattr(kernel, "result"):  # compiled asynchronously
            kernel = kernel.result()
        if kernel is not None:
            # Loading the binary builds its launcher, a C stub the host compiler builds per kernel
            # and config: done at the first launch, a model's stubs would build one after another.
            # Here they build in parallel.
            kernel.run  # noqa: B018 - the property loads the kernel

    def _time(self, config, numels, tensors, symbols, device) -> float:
        # Kernels only write buffers they do not read, so running one again is harmless.
        try:
            self._run(config, numels, tensors, symbols)
        except Exception:  # a config the GPU cannot run (too many registers/shared memory)
            return float("inf")
        if device.type != "cuda":
            start = time.perf_counter()
            self._run(config, numels, tensors, symbols)
            return time.perf_counter() - start
        torch.cuda.synchronize(device)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(10):
            self._run(config, numels, tensors, symbols)
        end.record()
        end.synchronize()
        return start.elapsed_time(end)


def compile_in_parallel(work: list[tuple["TritonLauncher", list, list, list]], device: torch.device) -> None:
    """Compile, in threads, every config each (launcher, args, symbols, numels) may launch with on
    `device`: the decided one where tuning already chose (this process or the disk), all otherwise.
    Triton's compiler spends most of its time outside the GIL (LLVM, ptxas), so threads compile
    kernels side by side. Tensors need only the dtypes
    and alignment of the real ones; a kernel that still compiles again at launch is just slower."""
    with paused_gc():  # a first call's compile, as in compile_api's backend call
        _compile_in_parallel(work, device)


def _compile_in_parallel(work, device: torch.device) -> None:
    jobs, seen = [], set()
    for launcher, tensors, symbols, numels in work:
        if any(n > INDEX_LIMIT for n in numels) or 0 in numels:
            continue
        known = launcher.known_config(numels, device)
        # Groups sharing one kernel (triton_codegen writes identical kernels once) compile it once.
        dtypes = tuple(getattr(t, "dtype", t) for t in tensors)
        for config in [known] if known is not None else launcher.spec.configs:
            if (id(launcher.fn), config, dtypes) not in seen:
                seen.add((id(launcher.fn), config, dtypes))
                jobs.append((launcher, config, numels, tensors, symbols))
    if not jobs:
        return
    if device.type == "cuda" and not interpreting():
        driver_ready()
    workers = running() if device.type == "cuda" and not interpreting() else None
    if workers is not None:
        # The workers compile each kernel into Triton's disk cache; the threads below then load it.
        calls = [partial(launcher.compile_ahead, *job) for launcher, *job in jobs]
        workers.compile(specializations(calls))
    from concurrent.futures import ThreadPoolExecutor

    def compile_one(job) -> None:
        launcher, config, numels, tensors, symbols = job
        try:
            launcher.compile_ahead(config, numels, tensors, symbols)
        except Exception as error:  # noqa: BLE001 - a config the GPU cannot run is skipped when timed
            log.debug("compiling %s ahead with %s failed: %s", launcher.spec.name, config, error)

    with ThreadPoolExecutor(max_workers=min(len(jobs), os.cpu_count() or 1, 32)) as pool:
        list(pool.map(compile_one, jobs))


def load_kernels(source: str, digest: str, specs: list[TritonKernelSpec]) -> list[TritonLauncher]:
    """Launchers for the kernels of a generated module."""
    module = load_module(source, digest)
    return [TritonLauncher(getattr(module, spec.name), spec, digest) for spec in specs]
