"""Building generated C++: the system compiler makes a shared library, loaded with ctypes and cached
on disk by a hash of the source, flags and compiler, so a second process does not compile again.

The cache lives in `$TORCHSMITH_CACHE_DIR/inductor_cpp` (private, bounded: see cache_files.py). One
entry is a manifest `<key>.json` naming the library `<key>.<content hash>.so` with its size and
sha256, and the source `<key>.cpp` kept for the user to read. A library is built in a private work
directory and renamed into place, then the manifest is written the same way, so concurrent builders
(threads or processes) never see half a file. Before loading, the library's size and hash are checked
against its manifest: a truncated, zeroed or foreign file is built again, never mapped (a truncated
library mapped is a SIGBUS on first use).
"""

import _ctypes
import ctypes
import ctypes.util
import hashlib
import json
import logging
import os
import shutil
import subprocess
import tempfile
import threading
import weakref
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from torchsmith.inductor.cpp.vector_math import link_flags
from torchsmith.inductor.errors import BuildError
from torchsmith.inductor.runtime.cache_files import TEMPORARY_PREFIX, cache_subdir, evict, touch, write_atomic

log = logging.getLogger("torchsmith.inductor.cache")

# -O2, not -O3: every hot loop we emit carries `#pragma omp simd`, which GCC vectorizes at -O2 too;
# -O3 only adds vectorized epilogues and versioned copies, which cost compile time (a cold first
# call's largest part) for kernels that run no faster.
# -fno-trapping-math: without AVX-512's masked ops GCC will not if-convert a float compare (it may
# raise an FP exception nobody reads), so the branchless selects of exp and friends left whole
# loops scalar on AVX2 machines. Values are unchanged: only exception flags could differ.
# -mprefer-vector-width=512: on an AVX-512 machine GCC otherwise keeps 256-bit vectors, so exp, erf
# and friends run as 8-wide libmvec calls where 16-wide ones exist. Machines without AVX-512 ignore
# it; the reduction lanes fill one vector of that width (native_vector_bytes).
CXX_FLAGS = ("-O2", "-march=native", "-mprefer-vector-width=512", "-fopenmp", "-shared", "-fPIC",
             "-std=c++17", "-fno-math-errno", "-fno-trapping-math")


@lru_cache(maxsize=1)
def native_vector_bytes() -> int:
    """The width of the vectors the kernels are built for: 64 bytes where the CPU has AVX-512
    (CXX_FLAGS prefers 512-bit vectors there), else 32 (AVX2, and where the CPU's flags cannot be
    read)."""
    try:
        with open("/proc/cpuinfo") as f:
            flags = next((line for line in f if line.startswith("flags")), "")
    except OSError:
        return 32
    return 64 if " avx512f" in flags else 32


MANIFEST_FORMAT = "torchsmith.cpp_library"
MANIFEST_VERSION = 1


@dataclass
class BuildStats:
    """Counts of this process's builds, by where the library came from (tests read them);
    `rejected` counts disk entries that failed their check and were built again."""

    compiled: int = 0
    disk_hits: int = 0
    memory_hits: int = 0
    rejected: int = 0


STATS = BuildStats()
# Libraries loaded by this process, by key: a source built once is loaded once, however many
# compiled graphs (and fresh closures compiled again) use it. Weak: every function pointer taken
# from a library holds the library, so when the last compiled graph using it is gone, nothing can
# call into it any more and it is unloaded (`_unload`); a process compiling new programs all day
# keeps only the libraries its live graphs use mapped.
_LOADED: "weakref.WeakValueDictionary[str, ctypes.CDLL]" = weakref.WeakValueDictionary()
# Threads building the same key wait for one build; keys share a few locks (one each would grow).
_BUILD_LOCKS = tuple(threading.Lock() for _ in range(64))
_openmp_runtime: list[ctypes.CDLL] = []


def cache_dir() -> Path:
    """The directory of the C++ library cache (created private)."""
    return cache_subdir("inductor_cpp")


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
    """The cache key of a translation unit: the sha256 of its source, the flags and the compiler."""
    h = hashlib.sha256()
    for part in (_compiler_identity(compiler()), " ".join(flags + link_flags()), source):
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()


def _lock_of(key: str) -> threading.Lock:
    return _BUILD_LOCKS[int(key[:8], 16) % len(_BUILD_LOCKS)]


def _keep(key: str, library: ctypes.CDLL) -> ctypes.CDLL:
    """Remember `library` as the loaded library of `key` until it is garbage, then unload it."""
    if not _openmp_runtime:
        # The OpenMP runtime our libraries link keeps worker threads; it must outlive the last of
        # them being unloaded, so this process holds a handle of its own.
        _openmp_runtime.append(ctypes.CDLL(ctypes.util.find_library("gomp") or "libgomp.so.1"))
    _LOADED[key] = library
    weakref.finalize(library, _unload, library._handle).atexit = False
    return library


def _unload(handle: int) -> None:
    try:
        _ctypes.dlclose(handle)
    except OSError as error:  # never fatal: the library just stays mapped
        log.debug("torchsmith: could not unload a compiled library: %s", error)


def load_library(source: str, flags: tuple[str, ...] = CXX_FLAGS) -> ctypes.CDLL:
    """The loaded shared library built from `source`: from this process's memory, from the disk
    cache (checked against its manifest), or compiled now (in that order). Threads asking for the
    same source wait for one build."""
    key = build_key(source, flags)
    with _lock_of(key):
        directory = cache_dir() / key[:2]
        library = _LOADED.get(key)
        if library is not None:
            STATS.memory_hits += 1
            touch(directory / f"{key}.json")  # a use, for the disk cache's least-recently-used order
            return library
        directory.mkdir(mode=0o700, exist_ok=True)
        library = _load_cached(directory, key)
        if library is not None:
            STATS.disk_hits += 1
        else:
            path = _compile(source, flags, directory, key)
            STATS.compiled += 1
            library = _load_checked(path, None)
            if library is None:
                cpp = directory / f"{key}.cpp"
                raise BuildError(f"the library just built from {cpp} could not be loaded (see the log)")
            evict()
        return _keep(key, library)


def _manifest(directory: Path, key: str) -> dict | None:
    """The manifest of `key`, or None when missing, unreadable or not this key's (a renamed file)."""
    path = directory / f"{key}.json"
    try:
        manifest = json.loads(path.read_bytes())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as error:
        log.warning("torchsmith: ignoring unreadable library manifest %s: %s", path, error)
        return None
    if not (
        isinstance(manifest, dict)
        and manifest.get("format") == MANIFEST_FORMAT
        and manifest.get("version") == MANIFEST_VERSION
        and manifest.get("key") == key
        and isinstance(manifest.get("library"), str)
        and manifest["library"] == os.path.basename(manifest["library"])
        and manifest["library"].startswith(f"{key}.")
    ):
        log.warning("torchsmith: ignoring library manifest %s: it is not the manifest of key %s", path, key)
        return None
    return manifest


def _load_cached(directory: Path, key: str) -> ctypes.CDLL | None:
    """The cached library of `key` if its manifest is this key's and the file matches it, else None."""
    manifest = _manifest(directory, key)
    if manifest is None:
        return None
    library = _load_checked(directory / manifest["library"], manifest)
    if library is None:
        STATS.rejected += 1
        return None
    touch(directory / f"{key}.json")
    return library


def _load_checked(path: Path, manifest: dict | None) -> ctypes.CDLL | None:
    """Load `path` after checking its size and sha256 against `manifest` (None: no check). None
    (logged) when the file is missing, does not match, or does not load. Libraries are written once
    under a name holding their content hash and never rewritten in place, so the file checked is
    the file loaded; the loader, which knows a library by its name, never mixes two contents."""
    try:
        if manifest is not None:
            data = path.read_bytes()
            digest = hashlib.sha256(data).hexdigest()
            if len(data) != manifest.get("size") or digest != manifest.get("sha256"):
                log.warning(
                    "torchsmith: cached library %s does not match its manifest (%d bytes, expected %s); "
                    "building it again", path, len(data), manifest.get("size"),
                )  # fmt: skip
                return None
        return ctypes.CDLL(str(path))
    except OSError as error:
        log.warning("torchsmith: cached library %s cannot be loaded (%s); building it again", path, error)
        return None


# generate_cpp writes this line before each kernel of a translation unit whose kernels are
# independent (the part before the first one, prelude and declarations, is all that they share), so
# a big unit can be compiled in parts, one compiler process per core, and linked into one library.
KERNEL_MARK = "// @torchsmith-kernel"
# Split a unit in parts only from this many kernels up: each part parses the prelude again and the
# link step costs a process, more than the parts save on a small unit.
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


def _compile(source: str, flags: tuple[str, ...], directory: Path, key: str) -> Path:
    """Build `source` in a private work directory, move the library and the source into `directory`
    and write the manifest last (each by rename); returns the library's path."""
    cpp = directory / f"{key}.cpp"
    write_atomic(cpp, source.encode())  # kept beside the library so a user can read what was built
    work = Path(tempfile.mkdtemp(prefix=TEMPORARY_PREFIX, dir=directory))
    try:
        work_cpp, output = work / f"{key}.cpp", work / "library.so"
        work_cpp.write_text(source)
        parts = split_source(source, compile_jobs())
        if len(parts) == 1:
            command = [compiler(), *flags, str(work_cpp), "-o", str(output), *link_flags()]
            _check(_run(command), command, cpp)
        else:
            _compile_parts(parts, flags, work, cpp, output)
        data = output.read_bytes()
        digest = hashlib.sha256(data).hexdigest()
        library = directory / f"{key}.{digest[:16]}.so"
        os.replace(output, library)
        manifest = {"format": MANIFEST_FORMAT, "version": MANIFEST_VERSION, "key": key,
                    "library": library.name, "size": len(data), "sha256": digest}  # fmt: skip
        write_atomic(directory / f"{key}.json", json.dumps(manifest).encode())
        return library
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _compile_parts(parts: list[str], flags: tuple[str, ...], work: Path, cpp: Path, output: Path) -> None:
    """Compile `parts` to objects in `work` concurrently, then link them into the library `output`."""
    running, objects = [], []
    for k, part in enumerate(parts):
        part_cpp, obj = work / f"part{k}.cpp", work / f"part{k}.o"
        part_cpp.write_text(part)
        command = [compiler(), *(f for f in flags if f != "-shared"), "-c", str(part_cpp), "-o", str(obj)]
        running.append((_run(command), command))
        objects.append(str(obj))
    for process, command in running:
        _check(process, command, cpp)
    command = [compiler(), *flags, *objects, "-o", str(output), *link_flags()]
    _check(_run(command), command, cpp)
