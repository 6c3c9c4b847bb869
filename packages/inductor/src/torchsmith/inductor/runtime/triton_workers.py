"""Compile worker processes: Triton's compiler run outside this process's GIL.

Triton's front end (Python walking the kernel's AST into MLIR) takes the GIL at every step, so
compile threads queue on it and a model's many kernel configs compile nearly one at a time.
Worker processes (`triton_compile_worker`, started once,
Triton imported, no torch) compile the same kernels in parallel for real and leave them in
Triton's on-disk cache; this process then loads each from the cache instead of compiling it.

    start_workers()                       # at the first CUDA graph; the workers import meanwhile
    requests = specializations(calls)     # what each `kernel.warmup(...)` call would compile
    running().compile(requests)           # blocks until the workers are done

`TORCHSMITH_COMPILE_WORKERS=0` turns the workers off (threads alone then compile, as before); a
number sets how many (default: the usable CPUs, at most 16). A request a worker fails is compiled
here at its first use, which reports the error as Triton words it.
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import pickle
import subprocess
import sys
import threading
from pathlib import Path

from torchsmith.inductor.runtime.triton_compile_worker import read_message, write_message

log = logging.getLogger("torchsmith.inductor")

_WORKER_FILE = Path(__file__).with_name("triton_compile_worker.py")
# Runs the worker file as a script without putting this package's folder first on sys.path.
_BOOTSTRAP = "import runpy, sys; runpy.run_path(sys.argv[1], run_name='__main__')"
_POOL: CompileWorkers | None = None
_POOL_LOCK = threading.Lock()
_STARTED = False
_DRIVER_WARMING: threading.Thread | None = None


def worker_count() -> int:
    value = os.environ.get("TORCHSMITH_COMPILE_WORKERS")
    if value is not None:
        return max(0, int(value))
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return min(usable, 16)


class CompileWorkers:
    """Worker processes, each answering one request at a time."""

    def __init__(self, count: int):
        # Compiling for the GPU even where this process interprets (tests): `triton.jit` makes
        # interpreted functions under TRITON_INTERPRET=1, which Triton's compiler does not take.
        env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
        self._processes = [
            subprocess.Popen(
                [sys.executable, "-c", _BOOTSTRAP, str(_WORKER_FILE)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                env=env,
            )
            for _ in range(count)
        ]
        self._lock = threading.Lock()  # one batch at a time: each worker serves one stream
        # A forked child shares the pipes: its requests would interleave with this process's.
        self.owner = os.getpid()
        atexit.register(self.close)

    def close(self) -> None:
        """Stop the workers (each exits when its stdin closes)."""
        if os.getpid() != self.owner:
            return
        for process in self._processes:
            if not process.stdin.closed:
                process.stdin.close()
        for process in self._processes:
            try:
                process.wait(timeout=5)
            except subprocess.TimeoutExpired:  # a compile still running: it is not needed
                process.kill()
                process.wait()
            process.stdout.close()

    def alive(self) -> list[subprocess.Popen]:
        return [p for p in self._processes if p.poll() is None]

    def compile(self, requests: list) -> int:
        """Compile `requests` in the workers; returns how many succeeded."""
        if not requests:
            return 0
        with self._lock:
            pending = list(reversed(requests))
            done, failed = [], []
            taking = threading.Lock()

            def serve(process: subprocess.Popen) -> None:
                while True:
                    with taking:
                        if not pending:
                            return
                        request = pending.pop()
                    try:
                        write_message(process.stdin, request)
                        answer = read_message(process.stdout)  # None: the worker's stdout ended
                    except (OSError, EOFError, pickle.UnpicklingError) as error:
                        answer = None
                        failed.append(f"worker {process.pid}: {error}")
                    if answer is None:
                        failed.append(f"worker {process.pid} stopped")
                        with taking:
                            pending.append(request)  # another worker takes it
                        return
                    (done if answer is True else failed).append(answer)

            threads = [threading.Thread(target=serve, args=(p,), daemon=True) for p in self.alive()]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
        for reason in failed:
            log.debug("compile worker: %s", reason)
        return len(done)


def start_workers() -> None:
    """Start the worker processes (once per process) unless turned off; returns at once."""
    global _POOL, _STARTED, _DRIVER_WARMING
    with _POOL_LOCK:
        if _STARTED:
            return
        _STARTED = True
        # Every cache key starts with a hash of Triton's own files (a quarter second, once per
        # process); the compile threads would each compute it at once at their first kernel.
        from triton.runtime.cache import triton_key

        threading.Thread(target=triton_key, daemon=True).start()
        # Triton's CUDA driver builds its C helpers with the host compiler the first time it is
        # used (with an empty cache, a large part of a first call); it builds while the graph lowers.
        _DRIVER_WARMING = threading.Thread(target=_warm_driver, daemon=True)
        _DRIVER_WARMING.start()
        count = worker_count()
        if count > 0:
            try:
                _POOL = CompileWorkers(count)
            except OSError as error:
                log.info("torchsmith: no compile workers (%s): Triton compiles in threads", error)


def _warm_driver() -> None:
    from triton.runtime import driver

    try:
        driver.active  # noqa: B018 - the property creates the driver
    except Exception as error:  # noqa: BLE001 - the first kernel creates it again and reports it
        log.debug("warming Triton's driver failed: %s", error)


def driver_ready() -> None:
    """Wait for the driver start_workers began creating: two threads creating it would both build
    its helpers."""
    if _DRIVER_WARMING is not None:
        _DRIVER_WARMING.join()


def running() -> CompileWorkers | None:
    """The started workers, if any still run."""
    if _POOL is None or _POOL.owner != os.getpid():
        return None  # none started, or a forked child of the process that started them
    return _POOL if _POOL.alive() else None


def specializations(calls) -> list:
    """Run each of `calls` (a `kernel.warmup(...)`) with Triton's compile step replaced by a record
    of what it would compile: the requests the workers take. Kernels already compiled here are
    not recorded (Triton finds them before its hook). The first request of each kernel signature
    asks its worker to build the launcher too (one launcher serves every kernel of a signature)."""
    from triton import knobs

    requests, seen, signatures = [], set(), set()
    owner = threading.get_ident()
    previous = knobs.runtime.jit_cache_hook

    def record(**hook):
        if threading.get_ident() != owner:  # another thread's compile: not ours to skip
            return previous(**hook) if previous is not None else None
        jit, compile_args = hook["fn"].jit_function, hook["compile"]
        options = json.loads(compile_args["specialization_data"])["options"]
        options = {k: tuple(v) if isinstance(v, list) else v for k, v in options.items()}
        target = jit.device_caches[compile_args["device"]][2]
        request = (
            jit.fn.__module__,
            jit.fn.__code__.co_filename,
            jit.fn.__name__,
            compile_args["signature"],
            compile_args["constants"],
            compile_args["configs"][0],
            options,
            target,
        )
        key = repr(request)
        if key not in seen:
            seen.add(key)
            signature = tuple(compile_args["signature"].values())
            requests.append((*request, signature not in signatures))
            signatures.add(signature)
        return True  # skip the compile: a worker does it

    knobs.runtime.jit_cache_hook = record
    try:
        for call in calls:
            try:
                call()
            except Exception as error:  # noqa: BLE001 - compiled (and reported) at its first use
                log.debug("recording a kernel for the compile workers failed: %s", error)
    finally:
        knobs.runtime.jit_cache_hook = previous
    return requests
