"""The directory that torchsmith's disk caches live in, and the file discipline they share.

- Private: `$TORCHSMITH_CACHE_DIR` (default `~/.cache/torchsmith`) and its subdirectories are
  created with mode 0700. As ssh treats its keys, a cache directory that another user owns, that
  others may write, or that lies under a directory others may write (without the sticky bit) is
  refused with one warning, and a fresh private temporary directory serves this process instead:
  a library or program planted there would run as the user.
- Atomic: every file is written under a temporary name in its own directory and renamed into place
  (`write_atomic`), so a reader (another thread, another process) sees the old file or the new one,
  never half of one.
- Bounded: `evict` removes the least recently used entries once the whole cache is larger than
  `size_limit_bytes()`: `set_size_limit_mb`, else `$TORCHSMITH_CACHE_SIZE_MB`, else 1024 MB. An
  entry is every file of one directory whose name starts with the same key (up to the first dot);
  readers `touch` what they use, so its modification time is its last use.
"""

import atexit
import logging
import os
import shutil
import stat
import tempfile
import time
import warnings
from pathlib import Path

log = logging.getLogger("torchsmith.inductor.cache")

DEFAULT_SIZE_MB = 1024
# Eviction goes below the limit by this share, so that not every write that follows runs it again.
EVICT_TO = 0.8
# Temporary files older than this are left over from a process that died while writing.
STALE_TEMPORARY_SECONDS = 3600
TEMPORARY_PREFIX = ".tmp-"

_size_limit_mb: float | None = None
_refused: dict[str, Path] = {}  # refused directory -> the private directory used instead


class CacheDirectoryWarning(UserWarning):
    """The cache directory is not private to this user; a temporary one is used instead."""


def set_size_limit_mb(megabytes: float | None) -> None:
    """Bound the disk caches to `megabytes` in all (None: `$TORCHSMITH_CACHE_SIZE_MB`, else 1024)."""
    global _size_limit_mb
    if megabytes is not None and not megabytes >= 0:
        raise ValueError(f"cache size limit must be a number of megabytes >= 0, got {megabytes!r}")
    _size_limit_mb = megabytes


def size_limit_bytes() -> int:
    """The size the disk caches are kept under, in bytes."""
    megabytes = _size_limit_mb
    if megabytes is None:
        text = os.environ.get("TORCHSMITH_CACHE_SIZE_MB", "")
        try:
            megabytes = float(text) if text else DEFAULT_SIZE_MB
        except ValueError:
            log.warning(
                "torchsmith: TORCHSMITH_CACHE_SIZE_MB=%r is not a number; using %d", text, DEFAULT_SIZE_MB
            )
            megabytes = DEFAULT_SIZE_MB
    return int(max(megabytes, 0) * 2**20)


def _wanted_root() -> Path:
    default = os.path.join(os.path.expanduser("~"), ".cache", "torchsmith")
    return Path(os.environ.get("TORCHSMITH_CACHE_DIR") or default)


def _refusal(directory: Path) -> str | None:
    """Why `directory` (existing, resolved) may not hold this user's cache, or None when it may."""
    info = os.stat(directory)
    if not stat.S_ISDIR(info.st_mode):
        return "it is not a directory"
    if info.st_uid != os.geteuid():
        return f"it is owned by uid {info.st_uid}, not by this user (uid {os.geteuid()})"
    if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return f"others may write to it (mode {stat.S_IMODE(info.st_mode):o})"
    for parent in directory.parents:
        info = os.stat(parent)
        if info.st_uid not in (0, os.geteuid()):
            return f"its parent {parent} is owned by uid {info.st_uid}"
        if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH) and not info.st_mode & stat.S_ISVTX:
            return (
                f"others may rename it: its parent {parent} is writable (mode {stat.S_IMODE(info.st_mode):o})"
            )
    return None


def _make_private(directory: Path) -> str | None:
    """Create `directory` (mode 0700) if missing and check it; the reason it is refused, or None."""
    try:
        os.makedirs(directory, mode=0o700, exist_ok=True)
        resolved = directory.resolve()
        reason = _refusal(resolved)
        if reason is None and stat.S_IMODE(os.stat(resolved).st_mode) & 0o077:
            os.chmod(resolved, 0o700)  # ours and not writable by others: make it unreadable too
        return reason
    except OSError as error:
        return f"it cannot be created or checked ({error})"


def _fallback(wanted: Path, reason: str) -> Path:
    if str(wanted) not in _refused:
        private = Path(tempfile.mkdtemp(prefix="torchsmith-cache-"))
        atexit.register(shutil.rmtree, private, ignore_errors=True)
        _refused[str(wanted)] = private
        warnings.warn(
            f"torchsmith: not using the cache directory {wanted}: {reason}. Compiled code is cached in "
            f"{private} for this process only; make the directory yours with mode 0700 (or set "
            f"TORCHSMITH_CACHE_DIR to such a directory) to keep it across processes",
            CacheDirectoryWarning,
            stacklevel=3,
        )
    return _refused[str(wanted)]


def cache_root() -> Path:
    """The private root of the disk caches (see the module docstring for what is refused)."""
    wanted = _wanted_root()
    reason = _make_private(wanted)
    return wanted if reason is None else _fallback(wanted, reason)


def cache_subdir(name: str) -> Path:
    """The private directory `name` under `cache_root()`, created if missing."""
    root = cache_root()
    directory = root / name
    reason = _make_private(directory)
    return directory if reason is None else _fallback(directory, reason)


def write_atomic(path: Path, data: bytes) -> None:
    """Write `data` to `path` through a temporary file in the same directory renamed into place."""
    fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=TEMPORARY_PREFIX, suffix=path.suffix)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(temporary, path)
    except BaseException:
        try:
            os.unlink(temporary)
        except OSError:
            pass
        raise


def touch(path: Path) -> None:
    """Mark `path` as used now (its modification time is what eviction orders by)."""
    try:
        # The clock's own time, not the file system's coarse one: a use just after another entry was
        # written must order after it.
        now = time.time()
        os.utime(path, (now, now))
    except OSError:
        pass  # a read-only cache still serves; it just cannot record the use


def _entries(root: Path, now: float) -> list[tuple[float, int, list[Path]]]:
    """(last use, size, files) of every entry under `root`; stale temporaries are removed on the way."""
    entries: dict[tuple[str, str], list] = {}
    pending = [root]
    while pending:
        directory = pending.pop()
        try:
            listing = list(os.scandir(directory))
        except OSError:
            continue
        for item in listing:
            try:
                info = item.stat(follow_symlinks=False)
                is_dir = item.is_dir(follow_symlinks=False)
            except OSError:
                continue
            if item.name.startswith(TEMPORARY_PREFIX):
                # Written or built into right now, unless a process died doing it long ago.
                if now - info.st_mtime > STALE_TEMPORARY_SECONDS and is_dir:
                    shutil.rmtree(item.path, ignore_errors=True)
                elif now - info.st_mtime > STALE_TEMPORARY_SECONDS:
                    _unlink(Path(item.path))
                continue
            if is_dir:
                pending.append(Path(item.path))
                continue
            entry = entries.setdefault((directory, item.name.split(".", 1)[0]), [0.0, 0, []])
            entry[0] = max(entry[0], info.st_mtime)
            entry[1] += info.st_size
            entry[2].append(Path(item.path))
    return [tuple(e) for e in entries.values()]


def _unlink(path: Path) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass  # another process evicted it first


def evict(limit: int | None = None) -> int:
    """Remove least recently used entries until the caches hold at most `EVICT_TO` of `limit`
    bytes (default `size_limit_bytes()`), when they hold more than `limit`; returns bytes removed.
    A library evicted while a process has it loaded stays mapped there (unlinked, not overwritten)."""
    limit = size_limit_bytes() if limit is None else limit
    entries = _entries(cache_root(), time.time())
    total = sum(size for _, size, _ in entries)
    if total <= limit:
        return 0
    removed = 0
    for _, size, files in sorted(entries, key=lambda e: e[0]):
        if total - removed <= limit * EVICT_TO:
            break
        for path in files:
            _unlink(path)
        removed += size
    log.info("torchsmith: evicted %d bytes from the compile caches (limit %d bytes)", removed, limit)
    return removed
