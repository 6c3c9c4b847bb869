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

CXX_FLAGS = ("-O3", "-march=native", "-fopenmp", "-shared", "-fPIC", "-std=c++17", "-fno-math-errno")


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


def _compile(source: str, flags: tuple[str, ...], directory: Path, key: str) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    cpp = directory / f"{key}.cpp"
    cpp.write_text(source)  # kept beside the library so a user can read what was built
    fd, tmp = tempfile.mkstemp(suffix=".so", prefix=f"{key}.", dir=directory)
    os.close(fd)
    command = [compiler(), *flags, str(cpp), "-o", tmp, *link_flags()]
    try:
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise BuildError(
                f"C++ compilation failed ({' '.join(command)}); source kept at {cpp}:\n{done.stderr[-4000:]}"
            )
        os.replace(tmp, directory / f"{key}.so")
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
