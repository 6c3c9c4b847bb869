"""A compile worker process: Triton kernels compiled into Triton's on-disk cache, off the GIL of
the process that will launch them.

Run by `triton_workers` as `python -c <bootstrap> <this file>`: it imports only the standard
library and Triton (not torch, not torchsmith), so it starts in a fraction of a second. Requests
come on stdin and answers go to stdout, each a length-prefixed pickle:

    request: (module_name, module_path, kernel_name, signature, constants, attrs, options, target,
              launcher)
    answer:  True when compiled, else the error's text

The request holds exactly what Triton's JIT would pass its compiler in the parent (recorded there
through `triton.knobs.runtime.jit_cache_hook`), so the kernel lands under the cache key the
parent's own compile looks up: the parent then loads it instead of compiling it. With `launcher`
set the worker also builds the kernel's launcher, a C extension the host compiler builds once per
kernel signature (tens of milliseconds each, which would otherwise be spent in the parent as it
loads the kernels) into the same cache, where the parent finds it.
"""

import importlib.util
import pickle
import struct
import sys

_LENGTH = struct.Struct("<Q")


def read_message(stream):
    """One length-prefixed pickle from `stream`, or None at its end."""
    header = stream.read(_LENGTH.size)
    if len(header) < _LENGTH.size:
        return None
    (size,) = _LENGTH.unpack(header)
    return pickle.loads(stream.read(size))


def write_message(stream, value) -> None:
    data = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
    stream.write(_LENGTH.pack(len(data)) + data)
    stream.flush()


def _module(name: str, path: str, modules: dict):
    """The generated module, imported under the parent's name: a kernel calls its helpers through it."""
    if name not in modules:
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
        modules[name] = module
    return modules[name]


def compile_request(request, modules: dict) -> None:
    import triton
    from triton.compiler import ASTSource

    module_name, module_path, kernel_name, signature, constants, attrs, options, target, launcher = request
    kernel = getattr(_module(module_name, module_path, modules), kernel_name)
    source = ASTSource(kernel, signature, constants, attrs)
    compiled = triton.compile(source, target=target, options=options)
    if launcher and target.backend == "cuda":
        _build_launcher(source, compiled)


def _build_launcher(source, compiled) -> None:
    """The launcher Triton builds when the parent loads `compiled` (its source depends only on the
    kernel's signature), left in Triton's cache. No GPU is touched: only the C build runs here."""
    try:
        from triton.backends.nvidia.driver import CudaLauncher

        CudaLauncher(source, compiled.metadata)
    except Exception:  # noqa: BLE001 - no host compiler or libcuda here: the parent builds it at load
        pass


def serve(stdin, stdout) -> None:
    """Answer requests until stdin closes."""
    # Hash Triton's own files (its cache keys start with that hash) before the first request.
    from triton.runtime.cache import triton_key

    triton_key()
    modules: dict = {}
    while (request := read_message(stdin)) is not None:
        try:
            compile_request(request, modules)
            answer = True
        except Exception as error:  # noqa: BLE001 - reported to the parent, which compiles it itself
            answer = f"{type(error).__name__}: {error}"
        write_message(stdout, answer)


if __name__ == "__main__":
    import os

    # The answers own the original stdout; anything Triton prints goes to stderr instead.
    answers = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    serve(sys.stdin.buffer, answers)
