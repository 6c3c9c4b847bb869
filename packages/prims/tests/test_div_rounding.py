"""Trunc division of bfloat16/float16 through inductor rounds the quotient to the dtype first, as
eager's kernels do (4.9867 rounds to 5.0 in bfloat16 and truncates to 5)."""

import warnings

import pytest
import torch


def _compile(fn, **kwargs):
    """torchsmith.compile, or a skip where compile_api is not installed (the package's isolated run)."""
    import torchsmith

    if not hasattr(torchsmith, "compile"):
        pytest.skip("needs the torchsmith package (compile_api)")
    return torchsmith.compile(fn, **kwargs)



@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_trunc_division_of_low_precision_matches_eager(dtype):
    def f(a, b):
        return torch.div(a, b, rounding_mode="trunc")

    generator = torch.Generator().manual_seed(0)
    a = (torch.randn(64, 64, generator=generator) * 9).to(dtype)
    b = (torch.randn(64, 64, generator=generator) * 3).to(dtype)
    a[0, 0], b[0, 0] = -11.6875, 2.34375  # quotient -4.9867: -5 in bfloat16
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = _compile(f, backend="inductor")(a, b)
    torch.testing.assert_close(got, f(a, b), rtol=0, atol=0)
