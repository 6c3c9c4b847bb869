"""Compile worker processes: a kernel a worker compiles lands in Triton's disk cache under the key
this process's own compile of the same request looks up, so this process loads it instead of
compiling it. Compiles for an sm_90 target with Triton's bundled ptxas (no GPU needed); on a GPU
also through the JIT's own specialization, as compile_in_parallel uses it."""

import importlib.util
import json
import os
import shutil
import sys
import textwrap
import time

import pytest
import torch

if not torch.cuda.is_available():  # before triton's first import, as in every Triton test here
    os.environ["TRITON_INTERPRET"] = "1"
triton = pytest.importorskip("triton", reason="triton is not installed (pip install triton==3.6.0)")
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource  # noqa: E402
from triton.compiler.compiler import make_backend  # noqa: E402

from torchsmith.inductor.runtime.triton_workers import CompileWorkers, specializations  # noqa: E402

KERNEL = """
import triton
import triton.language as tl


@triton.jit
def scale(out, x, n, XBLOCK: tl.constexpr):
    i = tl.program_id(0) * XBLOCK + tl.arange(0, XBLOCK)
    tl.store(out + i, tl.load(x + i, i < n) * 2.0, i < n)
"""
TARGET = GPUTarget("cuda", 90, 32)


@pytest.fixture
def kernel_module(tmp_path, monkeypatch):
    """The kernel as a compiled (not interpreted) JIT function in its own file, a private cache."""
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    path = tmp_path / "ts_worker_kernels.py"
    path.write_text(textwrap.dedent(KERNEL))
    spec = importlib.util.spec_from_file_location("ts_worker_kernels", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["ts_worker_kernels"] = module
    spec.loader.exec_module(module)
    yield module
    sys.modules.pop("ts_worker_kernels", None)


def _request(module, kernel="scale", launcher=False):
    # As the JIT hands it to its hook: options through JSON (tuples come back as lists).
    options = json.loads(json.dumps(make_backend(TARGET).parse_options({"num_warps": 4}).__dict__))
    options = {k: tuple(v) if isinstance(v, list) else v for k, v in options.items()}
    signature = {"out": "*fp32", "x": "*fp32", "n": "i32", "XBLOCK": "constexpr"}
    attrs = {(0,): [["tt.divisibility", 16]], (1,): [["tt.divisibility", 16]]}
    constants = {(3,): 256}
    return (module.__name__, module.__file__, kernel, signature, constants, attrs, options, TARGET, launcher)


def _cache_entries(root) -> set:
    return {p.name for p in root.iterdir()} if root.exists() else set()


def _ptxas_available() -> bool:
    try:
        from triton.backends.nvidia.compiler import get_ptxas

        path = get_ptxas(TARGET.arch).path
    except Exception:  # noqa: BLE001 - no CUDA toolchain in this triton build
        return False
    return os.path.exists(path) or shutil.which(path) is not None


@pytest.mark.skipif(not _ptxas_available(), reason="this triton has no ptxas for sm_90")
def test_worker_compile_is_found_in_triton_cache_by_this_process(kernel_module, tmp_path):
    workers = CompileWorkers(2)
    try:
        request = _request(kernel_module)
        assert workers.compile([request]) == 1
        cached = _cache_entries(tmp_path / "cache")
        assert cached, "the worker left nothing in Triton's cache"
        # This process compiling the same request finds the worker's result: nothing new is written.
        _, _, _, signature, constants, attrs, options, target, _ = request
        source = ASTSource(kernel_module.scale, signature, constants, attrs)
        compiled = triton.compile(source, target=target, options=options)
        assert "cubin" in compiled.asm
        assert _cache_entries(tmp_path / "cache") == cached
    finally:
        workers.close()


@pytest.mark.skipif(not _ptxas_available(), reason="this triton has no ptxas for sm_90")
def test_launcher_build_never_fails_a_compiled_request(kernel_module):
    # Without libcuda or a host compiler (CI) the launcher is left for the parent to build.
    workers = CompileWorkers(1)
    try:
        assert workers.compile([_request(kernel_module, launcher=True)]) == 1
    finally:
        workers.close()


def test_failed_request_is_reported_not_raised(kernel_module):
    workers = CompileWorkers(1)
    try:
        assert workers.compile([_request(kernel_module, kernel="no_such_kernel")]) == 0
        assert workers.alive(), "a failed request must not stop the worker"
    finally:
        workers.close()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="the JIT's specialization needs a GPU")
def test_jit_warmup_recorded_then_loaded_from_the_workers_compile(kernel_module, tmp_path):
    x = torch.randn(1000, device="cuda")
    out = torch.empty_like(x)

    def warmup():
        return kernel_module.scale.warmup(out, x, x.numel(), XBLOCK=256, grid=(4,))

    requests = specializations([warmup])
    assert len(requests) == 1 and requests[0][2] == "scale" and requests[0][-1], "first of its signature"
    assert not kernel_module.scale.device_caches[x.device.index][0], "recording must not compile"
    workers = CompileWorkers(1)
    try:
        assert workers.compile(requests) == 1
    finally:
        workers.close()
    cached = _cache_entries(tmp_path / "cache")
    kernel_module.scale[(4,)](out, x, x.numel(), XBLOCK=256)
    torch.testing.assert_close(out, x * 2)
    # The worker built the launcher too: the launch adds nothing to the cache, neither a second
    # compile of the kernel nor a launcher build.
    assert any(any((tmp_path / "cache" / n).glob("__triton_launcher*")) for n in cached)
    assert _cache_entries(tmp_path / "cache") == cached


def test_forked_child_does_not_use_its_parents_workers(kernel_module, monkeypatch):
    """A fork shares the workers' pipes: the child's requests would interleave with the parent's,
    so in a child the workers do not count as running (its kernels compile in threads)."""
    from torchsmith.inductor.runtime import triton_workers

    workers = CompileWorkers(1)
    try:
        monkeypatch.setattr(triton_workers, "_POOL", workers)
        assert triton_workers.running() is workers
        monkeypatch.setattr(workers, "owner", os.getpid() + 1)  # as seen from a forked child
        assert triton_workers.running() is None
    finally:
        monkeypatch.setattr(workers, "owner", os.getpid())
        workers.close()


def test_a_worker_that_dies_mid_request_is_not_counted_as_a_compile(kernel_module, tmp_path):
    """A worker that dies while compiling answers nothing: its request is not counted as compiled
    (this process compiles it at first use) and the batch returns instead of waiting."""
    crash = tmp_path / "ts_worker_crash.py"
    crash.write_text("import os\nos._exit(3)\n")  # importing it ends the worker
    request = ("ts_worker_crash", str(crash)) + _request(kernel_module)[2:]
    workers = CompileWorkers(1)
    try:
        assert workers.compile([request]) == 0
        # its pipe closes as it exits; the process itself may take a moment longer to be reaped
        deadline = time.monotonic() + 30
        while workers.alive() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not workers.alive()
    finally:
        workers.close()


def test_prepare_device_starts_the_workers_for_cuda_graphs_only(monkeypatch):
    from torchsmith.inductor import device_compilers as backend
    from torchsmith.inductor.runtime import triton_launch as triton_runtime
    from torchsmith.inductor.runtime import triton_workers

    started = []
    monkeypatch.setattr(triton_workers, "start_workers", lambda: started.append(True))
    monkeypatch.setattr(triton_runtime, "interpreting", lambda: False)
    backend.prepare_device("cpu")
    assert started == []
    backend.prepare_device("cuda")
    assert started == [True]
