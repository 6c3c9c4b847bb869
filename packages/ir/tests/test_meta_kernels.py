"""The Meta kernels torchsmith.ir adds for ATen ops torch ships without one: on meta tensors they give
the shapes, dtypes and strides the CPU kernels give."""

import pytest
import torch

import torchsmith.ir  # noqa: F401  (registers the kernels)
from torchsmith.ir.meta_kernels import META_KERNELS, register_missing


def _flat(result):
    """A histogramdd result as one tuple of tensors."""
    return (result.hist, *result.bin_edges)


def _steps(t, n):
    """n increasing bin edges on the device of the tensors `t` makes."""
    return torch.arange(float(n), device=t(1).device)


CALLS = {
    "geqrf": lambda t: torch.geqrf(t(2, 5, 3)),
    "geqrf_wide": lambda t: torch.geqrf(t(3, 4)),
    "histogram.bin_ct": lambda t: tuple(torch.histogram(t(7), 4, range=(-1.0, 1.0))),
    "histogram.bins_tensor": lambda t: tuple(torch.histogram(t(7), _steps(t, 5))),
    "histogramdd": lambda t: _flat(torch.histogramdd(t(6, 2), [3, 4])),
    "histogramdd_tensors": lambda t: _flat(torch.histogramdd(t(6, 2), [_steps(t, 3), _steps(t, 5)])),
}


@pytest.mark.parametrize("name", list(CALLS))
def test_meta_results_have_the_cpu_kernels_types(name):
    cpu = CALLS[name](lambda *shape: torch.randn(*shape))
    meta = CALLS[name](lambda *shape: torch.randn(*shape, device="meta"))
    assert len(cpu) == len(meta)
    for c, m in zip(cpu, meta):
        assert m.device.type == "meta"
        assert (m.shape, m.dtype, m.stride()) == (c.shape, c.dtype, c.stride())


def test_registration_is_once_and_only_where_torch_has_no_kernel():
    assert register_missing() == []  # importing torchsmith.ir registered them
    for name in META_KERNELS:
        assert torch._C._dispatch_has_kernel_for_dispatch_key(f"aten::{name}", "Meta")
