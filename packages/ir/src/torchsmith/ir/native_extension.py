"""A CPython extension of one C++ source, built against the running torch once and loaded by each process.

Stages use small extensions where a Python call per item costs more than the item's work (a guard's
tensor checks, a graph's kernel calls). Each is built once per source, Python and torch with the
system C++ compiler, in a background thread so that nothing waits for it: until it is loaded its
users keep their Python form, and `when_ready` tells them when it is. It lives in
`$TORCHSMITH_NATIVE_DIR` (default: `native` under `$TORCHSMITH_CACHE_DIR`, else
`~/.cache/torchsmith/native`), a directory that must be private to this user; the library's name is
a key over everything it was built from, and it is loaded only if its sha256 matches the one
recorded beside it when it was built. Without a compiler or torch's headers, or where a build
fails, the users keep their Python form (logged once).
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

log = logging.getLogger("torchsmith.native")

BUILD_TIMEOUT_SECONDS = 600
KEEP_LIBRARIES = 8  # libraries of other keys (other sources, torch or Python versions) kept in the directory

# One build at a time: two extensions asked for together would share the machine's cores anyway.
_build_lock = threading.Lock()


class NoNative(Exception):
    """Why an extension cannot be built or loaded here."""


class NativeExtension:
    """The extension `module_name` built from `source`; `purpose` names it in the log, and
    `switch=0` in the environment turns it off."""

    def __init__(self, module_name: str, source: Path, purpose: str, switch: str):
        self.module_name, self.source, self.purpose, self.switch = module_name, source, purpose, switch
        self.thread_name = f"torchsmith-native-{module_name}"
        self._lock = threading.Lock()
        self._module = None
        self._requested = False
        self._building = False
        self._callbacks: list = []

    def loaded(self):
        """The extension module once it is loaded; None before, or without it."""
        return self._module

    def enabled(self) -> bool:
        return os.environ.get(self.switch, "1") != "0"

    def request(self) -> None:
        """Make the extension available: loaded now where it is already built, else built in a
        background thread (once per process)."""
        with self._lock:
            if self._requested or not self.enabled():
                return
            self._requested = True
        try:
            plan = self.build_plan()
            if self.load_verified(plan):
                return
            self._building = True
            threading.Thread(target=self._build_and_load, args=(plan,), name=self.thread_name,
                             daemon=True).start()
        except NoNative as reason:
            log.info("%s stay in Python: %s", self.purpose, reason)
        except Exception:  # never a reason for a stage to fail: its Python form is complete
            self._building = False
            log.exception("%s stay in Python: preparing the extension failed", self.purpose)

    def when_ready(self, callback) -> None:
        """Call `callback()` once the extension is loaded: now if it is, else from the thread that
        loads it; dropped where it is not being built."""
        with self._lock:
            if self._module is None:
                if self._building:
                    self._callbacks.append(callback)
                return
        callback()

    def wait(self, timeout: float) -> bool:
        """Wait up to `timeout` seconds for a requested build; whether the extension is loaded."""
        for thread in threading.enumerate():
            if thread.name == self.thread_name:
                thread.join(timeout)
        return self._module is not None

    def build_plan(self) -> dict:
        """The compiler command, the library's path and its key; raises `NoNative` where it cannot
        be built."""
        compiler = os.environ.get("CXX") or shutil.which("c++") or shutil.which("g++")
        if not compiler:
            raise NoNative("no C++ compiler (set CXX)")
        torch_dir = Path(torch.__file__).resolve().parent
        includes = [torch_dir / "include", torch_dir / "include" / "torch" / "csrc" / "api" / "include",
                    Path(sysconfig.get_paths()["include"])]
        for directory in includes[:1] + includes[2:]:
            if not directory.is_dir():
                raise NoNative(f"no headers in {directory}")
        abi = int(getattr(torch._C, "_GLIBCXX_USE_CXX11_ABI", True))
        flags = ["-O2", "-shared", "-fPIC", "-std=c++17", "-w", f"-D_GLIBCXX_USE_CXX11_ABI={abi}"]
        flags += [f"-I{d}" for d in includes]
        # No rpath: the libraries it links are those `import torch` has loaded, found by their names.
        libs = [f"-L{torch_dir / 'lib'}", "-ltorch_python", "-lc10"]
        # The key leaves out where torch lies, so environments with the same torch build share it.
        build = [torch.__version__, str(torch.version.git_version), str(torch.version.cuda), sys.version,
                 compiler, " ".join(flags[:6])]
        key = hashlib.sha256(self.source.read_bytes() + "\0".join(build).encode()).hexdigest()[:24]
        directory = private_directory()
        suffix = sysconfig.get_config_var("EXT_SUFFIX") or ".so"
        # at a low priority: the build runs beside the compile (and the program) that asked for it
        nice = [shutil.which("nice"), "-n", "10"] if shutil.which("nice") else []
        return {
            "command": [*nice, compiler, *flags, str(self.source), *libs],
            "library": directory / f"{key}{suffix}",
            "digest": directory / f"{key}.sha256",
            "lock": directory / f"{key}.lock",
        }

    def load_verified(self, plan: dict) -> bool:
        """Load the built library if it is there and its recorded sha256 matches; whether it loaded."""
        library, digest = plan["library"], plan["digest"]
        try:
            recorded = digest.read_text().strip()
            if recorded != _sha256(library):
                log.warning("%s: %s does not match its recorded sha256; rebuilding it", self.purpose, library)
                return False
        except OSError:
            return False
        try:
            loader = importlib.machinery.ExtensionFileLoader(self.module_name, str(library))
            spec = importlib.util.spec_from_loader(self.module_name, loader)
            module = importlib.util.module_from_spec(spec)
            loader.exec_module(module)
        except Exception as error:  # a library built against other headers than the running torch
            log.info("%s stay in Python: %s does not load (%s)", self.purpose, library, error)
            return False
        os.utime(library)  # its last use, for `_evict_others`
        self.publish(module)
        return True

    def publish(self, module) -> None:
        """Make `module` the loaded extension and run the callbacks waiting for it."""
        with self._lock:
            self._module = module
            callbacks, self._callbacks[:] = list(self._callbacks), []
        for callback in callbacks:
            try:
                callback()
            except Exception:  # a user that cannot switch to the extension keeps its Python form
                log.exception("%s: a callback waiting for the extension failed", self.purpose)

    def _build_and_load(self, plan: dict) -> None:
        try:
            with _build_lock:
                self._build(plan)
            self.load_verified(plan)
        finally:
            with self._lock:
                self._building = False
                self._callbacks.clear()

    def _build(self, plan: dict) -> None:
        library = plan["library"]
        with open(plan["lock"], "w") as lock_file:  # another process building the same library: wait for it
            fcntl.flock(lock_file, fcntl.LOCK_EX)
            try:
                if self.load_verified(plan):
                    return
                fd, temporary = tempfile.mkstemp(dir=library.parent, prefix=".tmp-", suffix=library.suffix)
                os.close(fd)
                try:
                    result = subprocess.run([*plan["command"], "-o", temporary], capture_output=True,
                                            text=True, timeout=BUILD_TIMEOUT_SECONDS)
                    if result.returncode != 0:
                        log.info("%s stay in Python: building %s failed:\n%s", self.purpose, self.source.name,
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
                log.info("%s stay in Python: building %s failed (%s)", self.purpose, self.source.name, error)
                return
            finally:
                fcntl.flock(lock_file, fcntl.LOCK_UN)


def private_directory() -> Path:
    """The extensions' directory, created with mode 0700; refused (raises `NoNative`) where
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
        raise NoNative(f"{directory} cannot be created ({error})") from None
    if info.st_uid != os.geteuid() or info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise NoNative(f"{directory} is not private to this user (owner uid {info.st_uid}, "
                       f"mode {stat.S_IMODE(info.st_mode):o})")
    return directory


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


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
