"""Building generated C++: the system compiler makes a shared library, loaded with ctypes and cached
on disk by a hash of the source, flags and compiler, so a second process does not compile again.

The cache lives in `$TORCHSMITH_CACHE_DIR/inductor_cpp` (default `~/.cache/torchsmith`); libraries are
written under a temporary name and renamed into place, so concurrent builders never see half a file.
"""

import ctypes
import hashlib
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from torchsmith.inductor.errors import BuildError
from torchsmith.inductor.vector_math import link_flags

# -O2, not -O3: every hot loop we emit carries `#pragma omp simd`, which GCC vectorizes at -O2 too;
# -O3 only adds vectorized epilogues and versioned copies. Measured on a 1-layer GPT-2 graph's
# translation unit (16 kernels, g++ 12): 0.38 s of compiler CPU at -O2 vs 0.49 s at -O3, while the
# softmax and GELU kernels ran within 3% of their -O3 speed.
CXX_FLAGS = ("-O2", "-march=native", "-fopenmp", "-shared", "-fPIC", "-std=c++17", "-fno-math-errno")


@dataclass
class BuildStats:
    """Counts of this process's builds, by where the library came from (tests read them)."""

    compiled: int = 0
    disk_hits: int = 0
    memory_hits: int = 0


STATS = BuildStats()
_LOADED: dict[str, ctypes.CDLL] = {}


def cache_dir() -> Path:
    root = os.environ.get("TORCHSMITH_CACHE_DIR") or os.path.join(
        os.path.expanduser("~"), ".cache", "torchsmith"
    )
    return Path(root) / "inductor_cpp"


def compiler() -> str:
    """The C++ compiler: `$CXX`, else g++ on the PATH."""
    cxx = os.environ.get("CXX") or shutil.which("g++")
    if not cxx:
        raise BuildError("no C++ compiler found: install g++ or set CXX to a compiler that accepts -fopenmp")
    return cxx


def _compiler_identity(cxx: str) -> str:
    # Path plus modification time stands in for the version without running the compiler, which
    # would cost a process launch on every warm start.
    path = shutil.which(cxx) or cxx
    try:
        return f"{os.path.realpath(path)}:{os.stat(os.path.realpath(path)).st_mtime_ns}"
    except OSError:
        return path


def build_key(source: str, flags: tuple[str, ...] = CXX_FLAGS) -> str:
    """The cache key of a translation unit: a hash of its source, the flags and the compiler."""
    h = hashlib.sha256()
    for part in (_compiler_identity(compiler()), " ".join(flags + link_flags()), source):
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()[:32]


def load_library(source: str, flags: tuple[str, ...] = CXX_FLAGS) -> ctypes.CDLL:
    """The loaded shared library built from `source`: from this process's memory, from the disk
    cache, or compiled now (in that order)."""
    key = build_key(source, flags)
    if key in _LOADED:
        STATS.memory_hits += 1
        return _LOADED[key]
    directory = cache_dir() / key[:2]
    library = directory / f"{key}.so"
    if library.exists():
        STATS.disk_hits += 1
    else:
        _compile(source, flags, directory, key)
        STATS.compiled += 1
    _LOADED[key] = ctypes.CDLL(str(library))
    return _LOADED[key]


# generate_cpp writes this line before each kernel of a translation unit whose kernels are
# independent (the part before the first one, prelude and declarations, is all that they share), so
# a big unit can be compiled in parts, one compiler process per core, and linked into one library.
KERNEL_MARK = "// @torchsmith-kernel"
# Split a unit in parts only from this many kernels up: each part parses the prelude again and the
# link step costs a process, ~0.05 s together.
SPLIT_FROM_KERNELS = 8


def compile_jobs() -> int:
    """How many compiler processes one build may run at once: `$TORCHSMITH_COMPILE_JOBS`, else the
    CPUs this process may use (at most 4)."""
    if os.environ.get("TORCHSMITH_COMPILE_JOBS"):
        return max(1, int(os.environ["TORCHSMITH_COMPILE_JOBS"]))
    try:
        return min(len(os.sched_getaffinity(0)), 4)
    except AttributeError:  # not Linux
        return min(os.cpu_count() or 1, 4)


def split_source(source: str, jobs: int) -> list[str]:
    """`source` as up to `jobs` translation units that together define the same functions: the
    shared head plus a share of the kernels each (balanced by length); `[source]` when unmarked or small."""
    head, *kernels = source.split(KERNEL_MARK + "\n")
    if jobs < 2 or len(kernels) < SPLIT_FROM_KERNELS:
        return [source]
    parts: list[list[str]] = [[] for _ in range(jobs)]
    sizes = [0] * jobs
    for kernel in sorted(kernels, key=len, reverse=True):
        k = sizes.index(min(sizes))
        parts[k].append(kernel)
        sizes[k] += len(kernel)
    return [head + "".join(p) for p in parts if p]


def _run(command: list[str]) -> subprocess.Popen:
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _check(process: subprocess.Popen, command: list[str], cpp: Path) -> None:
    _, stderr = process.communicate()
    if process.returncode != 0:
        raise BuildError(
            f"C++ compilation failed ({' '.join(command)}); source kept at {cpp}:\n{stderr[-4000:]}"
        )


def _compile(source: str, flags: tuple[str, ...], directory: Path, key: str) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    cpp = directory / f"{key}.cpp"
    cpp.write_text(source)  # kept beside the library so a user can read what was built
    fd, tmp = tempfile.mkstemp(suffix=".so", prefix=f"{key}.", dir=directory)
    os.close(fd)
    parts = split_source(source, compile_jobs())
    try:
        if len(parts) == 1:
            command = [compiler(), *flags, str(cpp), "-o", tmp, *link_flags()]
            _check(_run(command), command, cpp)
        else:
            _compile_parts(parts, flags, cpp, tmp)
        os.replace(tmp, directory / f"{key}.so")
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def _compile_parts(parts: list[str], flags: tuple[str, ...], cpp: Path, output: str) -> None:
    """Compile `parts` to objects concurrently, then link them into the library `output`."""
    with tempfile.TemporaryDirectory(dir=cpp.parent) as work:
        running, objects = [], []
        for k, part in enumerate(parts):
            part_cpp, obj = Path(work) / f"part{k}.cpp", Path(work) / f"part{k}.o"
            part_cpp.write_text(part)
            command = [compiler(), *(f for f in flags if f != "-shared"), "-c", str(part_cpp), "-o", str(obj)]
            running.append((_run(command), command))
            objects.append(str(obj))
        for process, command in running:
            _check(process, command, cpp)
        command = [compiler(), *flags, *objects, "-o", output, *link_flags()]
        _check(_run(command), command, cpp)
