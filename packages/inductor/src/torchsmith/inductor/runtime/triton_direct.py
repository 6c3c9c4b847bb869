"""Launching a compiled Triton kernel without `JITFunction.run`.

Every `kernel[grid](*args)` call makes Triton bind the arguments, specialize each one (dtype,
16-byte alignment, ints equal to 1 or divisible by 16), hash the specialization and look the
compiled binary up: tens of microseconds of Python per launch, enough to make a forward of a few
dozen small kernels bound by the host. A kernel of a static graph launches with the same config,
sizes and dtypes every call; only the alignment of its pointers may differ (a view's storage
offset). `DirectLaunch` keeps the compiled binary per alignment pattern and calls its launcher
with the grid and arguments directly: the binary is the one Triton's own lookup would find, since
Triton compiles it for those very arguments the first time a pattern is seen.
"""

from triton import knobs
from triton.runtime import driver

# Triton specializes a pointer argument on whether its address is a multiple of 16.
ALIGNMENT = 16


def _hooked(hook) -> bool:
    """Whether a launch hook is set: Triton 3.6 keeps an always-present chain of hooks, earlier
    versions None or a function."""
    return hook is not None and bool(getattr(hook, "calls", True))


class DirectLaunch:
    """Launch `fn` (a `triton.jit` function) with one config (`constexprs`, `num_warps`) over `grid`
    programs: `launch(tensors)` passes the tensors then the constexprs, in the kernel's order."""

    def __init__(self, fn, constexprs: dict, num_warps: int, grid: int, device_index: int):
        self.fn, self.num_warps, self.grid = fn, num_warps, grid
        self.constexprs = constexprs
        self.device_index = device_index
        self._by_alignment: dict[tuple[bool, ...], tuple] = {}

    def __call__(self, tensors: list) -> None:
        if _hooked(knobs.runtime.launch_enter_hook) or _hooked(knobs.runtime.launch_exit_hook):
            # a profiler hooked launches: go through Triton so that it sees this one
            self.fn[(self.grid,)](*tensors, **self.constexprs, num_warps=self.num_warps)
            return
        key = tuple(t.data_ptr() % ALIGNMENT == 0 for t in tensors)
        bound = self._by_alignment.get(key)
        if bound is None:
            bound = self._bind(tensors, key)
        run, function, metadata, tail = bound
        stream = driver.active.get_current_stream(self.device_index)
        run(self.grid, 1, 1, stream, function, metadata, None, None, None, *tensors, *tail)

    def _bind(self, tensors: list, key: tuple) -> tuple:
        """Compile (or find) the binary for these tensors' specialization and remember it."""
        kernel = self.fn.warmup(*tensors, **self.constexprs, num_warps=self.num_warps, grid=(self.grid,))
        if hasattr(kernel, "result"):  # compiled asynchronously
            kernel = kernel.result()
        names = self.fn.arg_names
        # The launcher takes every parameter in order, constexprs too (it skips them itself).
        tail = tuple(self.constexprs[name] for name in names[len(tensors) :])
        bound = (kernel.run, kernel.function, kernel.packed_metadata, tail)
        self._by_alignment[key] = bound
        return bound
