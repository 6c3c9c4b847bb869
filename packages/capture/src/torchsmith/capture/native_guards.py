"""Tensor guards checked in C++: one call per tensor where the Python form reads six attributes.

A tensor's guard compares its class, dtype, device, requires_grad, sizes and strides with those at
capture. In Python that reads six attributes through torch's bindings and builds a tuple, most of
a microsecond per tensor, and a model's guard checks every parameter and buffer on every call.
`tensor_spec.cpp` reads them from the tensor itself, one call of a few dozen nanoseconds.

The extension is built once per source, Python and torch with the system C++ compiler, in a
background thread so that no capture waits for it: guards compiled before it is loaded keep the
Python form and are recompiled when it is (`when_ready`). It lives in `$TORCHSMITH_NATIVE_DIR`
(default: `native` under `$TORCHSMITH_CACHE_DIR`, else `~/.cache/torchsmith/native`), a directory
that must be private to this user; the library's name is a key over everything it was built from,
and it is loaded only if its sha256 matches the one recorded beside it when it was built.
`TORCHSMITH_NATIVE_GUARDS=0` turns it off. Without a compiler or torch's headers, or where a build
fails, guards keep the Python form (logged once).
"""

import fcntl
import hashlib
import importlib.machinery
import importlib.util
import logging
import os
import shutil
import stat
import subprocess
import sys
import sysconfig
import tempfile
import threading
from pathlib import Path

import torch

log = logging.getLogger("torchsmith.capture.native_guards")

MODULE_NAME = "torchsmith_tensor_spec"
SOURCE = Path(__file__).with_name("tensor_spec.cpp")
# Tensor classes whose attributes are the C++ tensor's own (a subclass may compute them in Python).
NATIVE_TYPES = (torch.Tensor, torch.nn.Parameter)
BUILD_TIMEOUT_SECONDS = 600
THREAD_NAME = "torchsmith-native-guards"
KEEP_LIBRARIES = 8  # libraries of other keys (other torch or Python versions) kept in the directory

_lock = threading.Lock()
_module = None
_requested = False
_building = False
_callbacks: list = []


def loaded():
    """The extension module (`make_spec`, `check`) once it is loaded; None before, or without it."""
    return _module


def enabled() -> bool:
    return os.environ.get("TORCHSMITH_NATIVE_GUARDS", "1") != "0"


def request() -> None:
    """Make the extension available: loaded now where it is already built, else built in a
    background thread (once per process)."""
    global _requested, _building
    with _lock:
        if _requested or not enabled():
            return
        _requested = True
    try:
        plan = _build_plan()
        if _load_verified(plan):
            return
        _building = True
        threading.Thread(target=_build_and_load, args=(plan,), name=THREAD_NAME, daemon=True).start()
    except _NoNative as reason:
        log.info("tensor guards stay in Python: %s", reason)
    except Exception:  # never a reason for capture to fail: the Python checks are complete
        _building = False
        log.exception("tensor guards stay in Python: preparing the C++ checks failed")


def when_ready(callback) -> None:
    """Call `callback()` once the extension is loaded: now if it is, else from the thread that
    loads it; dropped where it is not being built."""
    with _lock:
        if _module is None:
            if _building:
                _callbacks.append(callback)
            return
    callback()


def wait(timeout: float) -> bool:
    """Wait up to `timeout` seconds for a requested build; whether the extension is loaded."""
    for thread in threading.enumerate():
        if thread.name == THREAD_NAME:
            thread.join(timeout)
    return _module is not None


class _NoNative(Exception):
    """Why the extension cannot be built or loaded here."""


def _build_plan() -> dict:
    """The compiler command, the library's path and its key; raises `_NoNative` where it cannot be built."""
    compiler = os.environ.get("CXX") or shutil.which("c++") or shutil.which("g++")
    if not compiler:
        raise _NoNative("no C++ compiler (set CXX)")
    torch_dir = Path(torch.__file__).resolve().parent
    includes = [torch_dir / "include", torch_dir / "include" / "torch" / "csrc" / "api" / "include",
                Path(sysconfig.get_paths()["include"])]
    for directory in includes[:1] + includes[2:]:
        if not directory.is_dir():
            raise _NoNative(f"no headers in {directory}")
    abi = int(getattr(torch._C, "_GLIBCXX_USE_CXX11_ABI", True))
    flags = ["-O2", "-shared", "-fPIC", "-std=c++17", "-w", f"-D_GLIBCXX_USE_CXX11_ABI={abi}"]
    flags += [f"-I{d}" for d in includes]
    # No rpath: the libraries it links are those `import torch` has loaded, found by their names.
    libs = [f"-L{torch_dir / 'lib'}", "-ltorch_python", "-lc10"]
    # The key leaves out where torch lies, so environments with the same torch build share it.
    build = [torch.__version__, str(torch.version.git_version), str(torch.version.cuda), sys.version,
             compiler, " ".join(flags[:6])]
    key = hashlib.sha256(SOURCE.read_bytes() + "\0".join(build).encode()).hexdigest()[:24]
    directory = _private_directory()
    suffix = sysconfig.get_config_var("EXT_SUFFIX") or ".so"
    # at a low priority: the build runs beside the compile (and the program) that asked for it
    nice = [shutil.which("nice"), "-n", "10"] if shutil.which("nice") else []
    return {
        "command": [*nice, compiler, *flags, str(SOURCE), *libs],
        "library": directory / f"{key}{suffix}",
        "digest": directory / f"{key}.sha256",
        "lock": directory / f"{key}.lock",
    }


def _private_directory() -> Path:
    """The extension's directory, created with mode 0700; refused (raises `_NoNative`) where
    another user owns it or others may write to it: a library planted there would run as us."""
    wanted = os.environ.get("TORCHSMITH_NATIVE_DIR")
    if not wanted:
        default_root = os.path.join(os.path.expanduser("~"), ".cache", "torchsmith")
        wanted = os.path.join(os.environ.get("TORCHSMITH_CACHE_DIR") or default_root, "native")
    directory = Path(wanted)
    try:
        os.makedirs(directory, mode=0o700, exist_ok=True)
        info = os.stat(directory.resolve())
    except OSError as error:
        raise _NoNative(f"{directory} cannot be created ({error})") from None
    if info.st_uid != os.geteuid() or info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise _NoNative(f"{directory} is not private to this user (owner uid {info.st_uid}, "
                        f"mode {stat.S_IMODE(info.st_mode):o})")
    return directory


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _load_verified(plan: dict) -> bool:
    """Load the built library if it is there and its recorded sha256 matches; whether it loaded."""
    library, digest = plan["library"], plan["digest"]
    try:
        recorded = digest.read_text().strip()
        if recorded != _sha256(library):
            log.warning("tensor guards: %s does not match its recorded sha256; rebuilding it", library)
            return False
    except OSError:
        return False
    try:
        loader = importlib.machinery.ExtensionFileLoader(MODULE_NAME, str(library))
        module = importlib.util.module_from_spec(importlib.util.spec_from_loader(MODULE_NAME, loader))
        loader.exec_module(module)
    except Exception as error:  # a library built against other headers than the running torch
        log.info("tensor guards stay in Python: %s does not load (%s)", library, error)
        return False
    os.utime(library)  # its last use, for `_evict_others`
    _publish(module)
    return True


def _publish(module) -> None:
    """Make `module` the loaded extension and run the callbacks waiting for it."""
    global _module
    with _lock:
        _module = module
        callbacks, _callbacks[:] = list(_callbacks), []
    for callback in callbacks:
        try:
            callback()
        except Exception:  # a guard that cannot be recompiled keeps its Python form
            log.exception("tensor guards: recompiling a guard with native checks failed")


def _build_and_load(plan: dict) -> None:
    global _building
    try:
        _build(plan)
        _load_verified(plan)
    finally:
        with _lock:
            _building = False
            _callbacks.clear()


def _build(plan: dict) -> None:
    library = plan["library"]
    with open(plan["lock"], "w") as lock_file:  # another process building the same library: wait for it
        fcntl.flock(lock_file, fcntl.LOCK_EX)
        try:
            if _load_verified(plan):
                return
            fd, temporary = tempfile.mkstemp(dir=library.parent, prefix=".tmp-", suffix=library.suffix)
            os.close(fd)
            try:
                result = subprocess.run([*plan["command"], "-o", temporary], capture_output=True, text=True,
                                        timeout=BUILD_TIMEOUT_SECONDS)
                if result.returncode != 0:
                    log.info("tensor guards stay in Python: building %s failed:\n%s", SOURCE.name,
                             result.stderr[-2000:])
                    return
                digest = _sha256(Path(temporary))
                os.replace(temporary, library)
            finally:
                if os.path.exists(temporary):
                    os.unlink(temporary)
            _write_atomic(plan["digest"], digest)
            _evict_others(library)
        except (OSError, subprocess.SubprocessError) as error:
            log.info("tensor guards stay in Python: building %s failed (%s)", SOURCE.name, error)
            return
        finally:
            fcntl.flock(lock_file, fcntl.LOCK_UN)


def _write_atomic(path: Path, text: str) -> None:
    fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.replace(temporary, path)


def _evict_others(keep: Path) -> None:
    """Keep the `KEEP_LIBRARIES` most recently used libraries besides `keep`; remove the rest."""
    others = [p for p in keep.parent.glob(f"*{keep.suffix}") if p != keep and not p.name.startswith(".")]
    others.sort(key=lambda p: p.stat().st_mtime, reverse=True)
    for old in others[KEEP_LIBRARIES:]:
        key = old.name.split(".")[0]
        for path in (old, old.with_name(f"{key}.sha256"), old.with_name(f"{key}.lock")):
            path.unlink(missing_ok=True)
