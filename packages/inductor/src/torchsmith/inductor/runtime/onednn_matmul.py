"""Large float32 CPU matmuls (`prims.mm`, `extern.addmm`) through oneDNN where it beats the BLAS
that `torch.mm` calls on this machine.

torch's CPU `mm`/`addmm` call the BLAS it was built with (MKL). On some CPUs that BLAS runs far
below the machine's peak (MKL takes its AVX2 code path on AMD processors that have AVX-512), while
oneDNN, which torch also ships (`torch.ops.mkldnn._linear_pointwise`, a matmul with an optional
bias), generates its kernels for the instructions the CPU has. Which library is faster is a fact
about the machine, not the program, so it is measured once per process (`faster_here`: one small
product timed with each) and never stored with a compiled program. A product of fewer than
`MIN_PRODUCTS` multiply-adds keeps the BLAS call, whose per-call overhead is lower.

The oneDNN call computes the same product (a different summation order, as between any two BLAS
builds) into a fresh contiguous tensor. It takes operands laid out as BLAS takes them (rows or
columns contiguous, a leading stride at least the row or column length); any other operand, a
bias that is not one row broadcast over the rows, another dtype or device, or
`torch.backends.mkldnn.enabled = False` keeps torch's call.

`TORCHSMITH_ONEDNN_MATMUL=0` (or `1`) skips the measurement and never (always) takes oneDNN;
`FORCE` is the same setting in code.
"""

import os
import time

import torch

# Below about a million multiply-adds the BLAS call's smaller per-call overhead wins.
MIN_PRODUCTS = 1 << 21
_ENV = os.environ.get("TORCHSMITH_ONEDNN_MATMUL", "")
FORCE: bool | None = None if _ENV == "" else _ENV != "0"
_measured: list[bool] = []  # the measurement's answer, once per process


def available() -> bool:
    """Whether this torch build has oneDNN's matmul op."""
    return torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_linear_pointwise")


def _best_of(fn, runs: int = 4) -> float:
    fn()  # the first call creates oneDNN's primitive (cached after)
    best = float("inf")
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def faster_here() -> bool:
    """Whether oneDNN's matmul clearly beats `torch.mm` on this machine (a 128x256x256 float32 product,
    each timed a few times; about a millisecond, once per process). `FORCE` overrides it."""
    if FORCE is not None:
        return FORCE and available()
    if not _measured:
        if not available():
            _measured.append(False)
        else:
            # A private generator: the measurement must not move the user's random stream.
            generator = torch.Generator().manual_seed(0)
            a = torch.randn(128, 256, generator=generator)
            b = torch.randn(256, 256, generator=generator)
            onednn = _best_of(lambda: _linear(a, b.t(), None))
            blas = _best_of(lambda: torch.mm(a, b))
            _measured.append(onednn * 1.25 < blas)
    return _measured[0]


def _linear(a, weight, bias):
    return torch.ops.mkldnn._linear_pointwise(a, weight, bias, "none", [], "")


def _blas_layout(t: torch.Tensor) -> bool:
    """A 2-D operand with its rows or its columns contiguous and the other stride spanning them."""
    rows, cols = t.shape
    row_stride, col_stride = t.stride()
    return (col_stride == 1 and row_stride >= cols) or (row_stride == 1 and col_stride >= rows)


def _takes(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether the product `a @ b` goes to oneDNN (checked per call: cheap next to the product)."""
    return (
        a.dtype == torch.float32 and b.dtype == torch.float32
        and a.dim() == 2 and b.dim() == 2 and a.is_cpu and b.is_cpu
        and a.shape[0] * a.shape[1] * b.shape[1] >= MIN_PRODUCTS
        and _blas_layout(a) and _blas_layout(b)
        and torch.backends.mkldnn.enabled
    )  # fmt: skip


def mm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """`torch.mm(a, b)`, through oneDNN where `_takes` says so."""
    if _takes(a, b):
        return _linear(a, b.t(), None)
    return torch.mm(a, b)


def addmm(bias: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """`torch.addmm(bias, a, b)` for a bias that is one row (`[n]`, or `[m, n]` broadcast over the
    rows, as the lowering passes it), through oneDNN where `_takes` says so."""
    row = None
    if bias.dtype == torch.float32 and bias.shape[-1:] == b.shape[1:]:
        if bias.dim() == 1 and bias.stride(0) == 1:
            row = bias
        elif bias.dim() == 2 and bias.stride() == (0, 1):
            row = bias[0]
    if row is not None and _takes(a, b):
        return _linear(a, b.t(), row)
    return torch.addmm(bias, a, b)


# kernel name -> (torch's function, the function choosing oneDNN per call)
REPLACEMENTS = {"prims.mm": (torch.mm, mm), "extern.addmm": (torch.addmm, addmm)}


def choose(kernel: str, fn, arg_shapes=None):
    """The function to run an extern call of `kernel` (now bound to `fn`) with: this module's where
    `fn` is torch's matmul that oneDNN replaces, oneDNN is faster here and the product can be large
    enough (`arg_shapes`, the arguments' sizes where known when the graph is built, as ints); else
    `fn`."""
    replacement = REPLACEMENTS.get(kernel)
    if replacement is None or replacement[0] is not fn:
        return fn
    if arg_shapes is not None:
        a, b = arg_shapes[-2:]
        if len(a) != 2 or len(b) != 2 or a[0] * a[1] * b[1] < MIN_PRODUCTS:
            return fn
    return replacement[1] if faster_here() else fn
