"""On-disk cache of compile results, so that a new process compiling a graph it compiled before
skips the work: the decomposition of an ATen graph to prims, and the lowering, fusion and C++
generation of a prims graph (the C++ build has its own cache, by source hash: cpp_build.py).

Entries live in `$TORCHSMITH_CACHE_DIR/inductor_programs` (default `~/.cache/torchsmith`; private
and bounded in size, see cache_files.py), one JSON file per key. A key is the sha256 of the input
graph's serialized IR, the options that change the result, and `code_version()`: a hash of the
torchsmith.ir, .prims and .inductor sources and the torch version, so that any change to the
compiler misses instead of reusing what older code produced. Ops, decompositions and lowerings
registered from outside torchsmith are part of the key too.

Values are the project's own JSON forms (IR JSON, loop IR JSON, cached_program.py), never pickles:
reading an entry runs no code. Each file holds its full key, checked on reading: a file renamed or
copied over another key's name is a miss, never another graph's program. A file that cannot be read
counts as a miss too. Writes are atomic. `TORCHSMITH_COMPILE_CACHE=0` turns the cache off.
"""

import functools
import hashlib
import importlib.util
import json
import logging
import os
import sys
from dataclasses import dataclass
from pathlib import Path

import torch

from torchsmith.inductor.runtime.cache_files import cache_subdir, evict, touch, write_atomic
from torchsmith.ir.registry import explicit_registrations

log = logging.getLogger("torchsmith.inductor.compile_cache")
_PACKAGES = ("torchsmith.ir", "torchsmith.prims", "torchsmith.inductor")
ENTRY_FORMAT = "torchsmith.compile_cache"
ENTRY_VERSION = 1


@dataclass
class CacheStats:
    """This process's lookups, by outcome (tests and the benchmark read them); `rejected` counts
    entries found but refused (unreadable, or holding another key)."""

    hits: int = 0
    misses: int = 0
    rejected: int = 0


STATS = CacheStats()


def enabled() -> bool:
    return os.environ.get("TORCHSMITH_COMPILE_CACHE", "1") != "0"


def cache_dir() -> Path:
    """The directory of the program cache (created private)."""
    return cache_subdir("inductor_programs")


@functools.cache
def code_version() -> str:
    """A hash of every source file of the compiler stages whose output is cached, and torch's version."""
    digest = hashlib.sha256(torch.__version__.encode())
    for package in _PACKAGES:
        # find_spec, not import: importing torchsmith.prims would load every decomposition
        root = Path(importlib.util.find_spec(package).origin).parent
        for path in sorted(root.rglob("*.py")):
            digest.update(str(path.relative_to(root)).encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()


# Tables a user may extend at run time: ops (torchsmith registers only `prims.*` there),
# decompositions and lowerings (torchsmith's own are functions of its modules).
_TABLES = (
    ("torchsmith.prims.decompose", "DECOMPOSITIONS"),
    ("torchsmith.inductor.lowering.lower", "LOWERINGS"),
)


def custom_registrations() -> str:
    """What was registered from outside torchsmith (a user's op, decomposition or lowering), by op
    and function: part of every key, so that a graph compiled before a registration misses after.
    The tables of modules not imported yet hold nothing of the user's."""
    found = []
    registry = explicit_registrations()
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
    """The cache key of a `kind` of entry computed from `parts` (serialized graph, options, ...):
    `kind-<sha256>`, also the entry's file name."""
    from torchsmith.inductor.cpp.build import native_vector_bytes

    # The C++ kernels' lanes follow the machine's vector width: a cache shared by two machines
    # keeps their programs apart.
    target = f"vector_bytes={native_vector_bytes()}"
    digest = hashlib.sha256(f"{kind}\0{code_version()}\0{custom_registrations()}\0{target}".encode())
    for part in parts:
        digest.update(b"\0")
        digest.update(part.encode())
    return f"{kind}-{digest.hexdigest()}"


def lookup(key: str):
    """The JSON value stored under `key`, or None (also when the cache is off, or the file is
    unreadable or holds another key)."""
    if not enabled():
        return None
    path = cache_dir() / f"{key}.json"
    try:
        entry = json.loads(path.read_bytes())
    except FileNotFoundError:
        STATS.misses += 1
        return None
    except (OSError, ValueError) as error:  # a damaged file is a miss, never a failure
        return _reject(path, f"unreadable ({error})")
    expected = (ENTRY_FORMAT, ENTRY_VERSION)
    known = isinstance(entry, dict) and (entry.get("format"), entry.get("version")) == expected
    if not known:
        return _reject(path, f"not a {ENTRY_FORMAT} entry of version {ENTRY_VERSION}")
    if entry.get("key") != key:
        return _reject(path, f"it holds the entry of key {str(entry.get('key'))[:80]!r}, not of {key!r}")
    STATS.hits += 1
    touch(path)
    return entry.get("value")


def _reject(path: Path, why: str) -> None:
    log.warning("torchsmith: ignoring compile cache entry %s: %s", path, why)
    STATS.rejected += 1
    STATS.misses += 1
    return None


def reject(key: str, why: str) -> None:
    """Count the value just read under `key` as a miss after all (its caller could not use it)."""
    log.warning("torchsmith: ignoring compile cache entry %s: %s", key, why)
    STATS.hits -= 1
    STATS.rejected += 1
    STATS.misses += 1


def store(key: str, value) -> None:
    """Write the JSON value `value` under `key` (atomically: readers never see half a file), then
    keep the caches within their size limit."""
    if not enabled():
        return
    try:
        data = json.dumps({"format": ENTRY_FORMAT, "version": ENTRY_VERSION, "key": key, "value": value})
        write_atomic(cache_dir() / f"{key}.json", data.encode())
        evict()
    except (OSError, TypeError, ValueError) as error:
        # A read-only or full disk, or a value JSON cannot hold: the next process compiles again.
        log.warning("torchsmith: could not write compile cache entry %s: %s", key, error)
