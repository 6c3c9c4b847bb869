"""On-disk cache of compile results, so that a new process compiling a graph it compiled before
skips the work: the decomposition of an ATen graph to prims, and the lowering, fusion and C++
generation of a prims graph (the C++ build has its own cache, by source hash).

Entries live in `$TORCHSMITH_CACHE_DIR/inductor_programs` (default `~/.cache/torchsmith`), one
file per key: the sha256 of the input graph's serialized IR, the options that change the result,
and `code_version()`: a hash of the torchsmith.ir, .prims and .inductor sources and the torch
version, so that any change to the compiler misses instead of reusing what older code produced.
Values are pickled (loop IR, fusion plan and source; or prims IR as JSON text): the cache dir is
the user's own, as for the C++ libraries. A file that cannot be read counts as a miss.
Ops, decompositions and lowerings registered from outside torchsmith are part of the key too.
`TORCHSMITH_COMPILE_CACHE=0` turns the cache off.

On the 2-core machine, GPT-2's inference graph took ~0.3 s to lower, inline and schedule, and
3 ms to unpickle; serializing the graph for its key took 18 ms.
"""

import functools
import hashlib
import importlib.util
import logging
import os
import pickle
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import torch

log = logging.getLogger("torchsmith.inductor.compile_cache")
_PACKAGES = ("torchsmith.ir", "torchsmith.prims", "torchsmith.inductor")


@dataclass
class CacheStats:
    """This process's lookups, by outcome (tests and the benchmark read them)."""

    hits: int = 0
    misses: int = 0


STATS = CacheStats()


def enabled() -> bool:
    return os.environ.get("TORCHSMITH_COMPILE_CACHE", "1") != "0"


def cache_dir() -> Path:
    default = os.path.join(os.path.expanduser("~"), ".cache", "torchsmith")
    return Path(os.environ.get("TORCHSMITH_CACHE_DIR") or default) / "inductor_programs"


@functools.cache
def code_version() -> str:
    """A hash of every source file of the compiler stages whose output is cached, and torch's version."""
    digest = hashlib.sha256(torch.__version__.encode())
    for package in _PACKAGES:
        # find_spec, not import: importing torchsmith.prims would load every decomposition (~0.1 s)
        root = Path(importlib.util.find_spec(package).origin).parent
        for path in sorted(root.rglob("*.py")):
            digest.update(str(path.relative_to(root)).encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()


# Tables a user may extend at run time: ops (torchsmith registers only `prims.*` there),
# decompositions and lowerings (torchsmith's own are functions of its modules).
_TABLES = (
    ("torchsmith.prims.decompose", "DECOMPOSITIONS"),
    ("torchsmith.inductor.lower", "LOWERINGS"),
)


def custom_registrations() -> str:
    """What was registered from outside torchsmith (a user's op, decomposition or lowering), by op
    and function: part of every key, so that a graph compiled before a registration misses after.
    The tables of modules not imported yet hold nothing of the user's."""
    found = []
    registry = getattr(sys.modules.get("torchsmith.ir.registry"), "_REGISTRY", None) or {}
    found += [f"op {op}={_qualified(d.eager)}" for op, d in registry.items() if not op.startswith("prims.")]
    for module_name, table_name in _TABLES:
        table = getattr(sys.modules.get(module_name), table_name, None) or {}
        for op, fn in table.items():
            if not (getattr(fn, "__module__", None) or "").startswith("torchsmith."):
                found.append(f"{table_name} {op}={_qualified(fn)}")
    return "\n".join(sorted(found))


def _qualified(fn) -> str:
    return f"{getattr(fn, '__module__', None)}.{getattr(fn, '__qualname__', type(fn).__name__)}"


def graph_text(graph) -> str:
    """`graph`'s IR JSON without its stamps (which passes made it, in how many seconds: they differ
    in every process), the part of a key that names a graph."""
    from torchsmith.ir import dumps

    return dumps(graph.replace(stamps=()))


def key_of(kind: str, *parts: str) -> str:
    """The cache key of a `kind` of entry computed from `parts` (serialized graph, options, ...)."""
    digest = hashlib.sha256(f"{kind}\0{code_version()}\0{custom_registrations()}".encode())
    for part in parts:
        digest.update(b"\0")
        digest.update(part.encode())
    return f"{kind}-{digest.hexdigest()[:40]}"


def lookup(key: str):
    """The value stored under `key`, or None (also when the cache is off or the file unreadable)."""
    if not enabled():
        return None
    path = cache_dir() / f"{key}.pkl"
    try:
        with open(path, "rb") as f:
            value = pickle.load(f)
    except FileNotFoundError:
        STATS.misses += 1
        return None
    except Exception as error:  # noqa: BLE001 - a damaged or foreign file is a miss, never a failure
        log.warning("torchsmith: ignoring unreadable compile cache entry %s: %s", path, error)
        STATS.misses += 1
        return None
    STATS.hits += 1
    return value


def store(key: str, value) -> None:
    """Write `value` under `key` (atomically: readers never see half a file)."""
    if not enabled():
        return
    directory = cache_dir()
    try:
        directory.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=directory, prefix=".tmp-", suffix=".pkl")
        with os.fdopen(fd, "wb") as f:
            pickle.dump(value, f, protocol=pickle.HIGHEST_PROTOCOL)
        os.replace(tmp, directory / f"{key}.pkl")
    except (OSError, pickle.PicklingError, TypeError, AttributeError) as error:
        # A read-only or full disk, or a value that cannot be pickled: the next process compiles again.
        log.warning("torchsmith: could not write compile cache entry %s: %s", key, error)
