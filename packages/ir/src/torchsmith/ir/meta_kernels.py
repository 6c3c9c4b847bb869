"""Meta kernels for the few ATen ops torch ships without one although their output shapes follow
from their arguments alone: `geqrf` and the histogram ops.

Every stage types an op by running it on meta tensors (capture's result inference, autograd_aot's
trace, the verifier), so an op without a Meta kernel was a graph break even though a compiler can
run it as a library call once its outputs are typed. `register_missing()` (run when
`torchsmith.ir` is imported) registers these through `torch.library`, each only where torch has no
Meta kernel of its own, so a torch that ships one keeps it. Ops whose output shapes depend on the
data (`nonzero`, `unique`) are not here: they stay graph breaks.
"""

import torch

# The library holding the registrations; kept for the life of the process (dropping it unregisters).
_LIBRARY: list = []


def _geqrf(a):
    """(a, tau): the Householder vectors in LAPACK's column-major layout, and min(m, n) scalars."""
    *batch, m, n = a.shape
    batch_strides, stride = [], m * n
    for size in reversed(batch):
        batch_strides.insert(0, stride)
        stride *= size
    packed = torch.empty_strided((*batch, m, n), (*batch_strides, 1, m), dtype=a.dtype, device=a.device)
    tau = torch.empty((*batch, min(m, n)), dtype=a.dtype, device=a.device)
    return packed, tau


def _histogram_bin_ct(self, bins=100, *, range=None, weight=None, density=False):  # noqa: A002
    return (torch.empty(bins, dtype=self.dtype, device=self.device),
            torch.empty(bins + 1, dtype=self.dtype, device=self.device))


def _histogram_bins_tensor(self, bins, *, weight=None, density=False):
    edges = bins.numel()
    return (torch.empty(edges - 1, dtype=self.dtype, device=self.device),
            torch.empty(edges, dtype=self.dtype, device=self.device))


def _histogramdd_bin_edges(self, bins, *, range=None, weight=None, density=False):  # noqa: A002
    return [torch.empty(b + 1, dtype=self.dtype, device=self.device) for b in bins]


def _histogramdd_from_bin_cts(self, bins, *, range=None, weight=None, density=False):  # noqa: A002
    return torch.empty(list(bins), dtype=self.dtype, device=self.device)


def _histogramdd_from_bin_tensors(self, bins, *, weight=None, density=False):
    return torch.empty([b.numel() - 1 for b in bins], dtype=self.dtype, device=self.device)


# "name.overload" as the dispatcher spells it -> its Meta kernel
META_KERNELS = {
    "geqrf": _geqrf,
    "histogram.bin_ct": _histogram_bin_ct,
    "histogram.bins_tensor": _histogram_bins_tensor,
    "_histogramdd_bin_edges": _histogramdd_bin_edges,
    "_histogramdd_from_bin_cts": _histogramdd_from_bin_cts,
    "_histogramdd_from_bin_tensors": _histogramdd_from_bin_tensors,
}


def register_missing() -> list[str]:
    """Register each kernel of `META_KERNELS` whose op has no Meta kernel yet; returns the names
    registered (none on a second call)."""
    missing = [name for name in META_KERNELS
               if not torch._C._dispatch_has_kernel_for_dispatch_key(f"aten::{name}", "Meta")]
    if not missing:
        return []
    library = torch.library.Library("aten", "IMPL")  # noqa: TOR901 - adds kernels to existing ops
    for name in missing:
        library.impl(name, META_KERNELS[name], "Meta")
    _LIBRARY.append(library)
    return missing
