"""Writes through real-valued views of complex values (view_as_real, .real, .imag) reach the complex
tensor they view, as in eager: functionalization writes them back with view_as_complex, and the
inductor runs the complex ops as extern calls."""

import pytest
import torch


def _torchsmith():
    import torchsmith

    if not hasattr(torchsmith, "compile"):
        pytest.skip("needs the torchsmith package (compile_api)")
    return torchsmith


def _real_view_writes(z, x):
    spectrum = torch.fft.fft(x)
    spectrum.mul_(2)
    torch.view_as_real(spectrum).add_(1)  # written back into the complex intermediate
    z.real.mul_(3)  # and into the complex input, through .real (view_as_real + select)
    z.imag.add_(x[:5])
    return spectrum.abs(), torch.view_as_real(z).sum()


def test_writes_through_real_views_of_complex_values_match_eager():
    torchsmith = _torchsmith()
    z, x = torch.randn(5, dtype=torch.complex64), torch.randn(6)
    z_eager = z.clone()
    got = torchsmith.compile(_real_view_writes, fullgraph=True, options={"fallback": "raise"})(z, x)
    expected = _real_view_writes(z_eager, x)
    torch.testing.assert_close(got, expected)
    torch.testing.assert_close(z, z_eager)


def test_a_complex_view_of_a_real_input_written_through_matches_eager():
    torchsmith = _torchsmith()

    def fn(pairs):
        torch.view_as_complex(pairs).mul_(1j)  # rotates each (re, im) pair of the real input
        return pairs * 2

    pairs = torch.randn(4, 2)
    pairs_eager = pairs.clone()
    got = torchsmith.compile(fn, fullgraph=True, options={"fallback": "raise"})(pairs)
    torch.testing.assert_close(got, fn(pairs_eager))
    torch.testing.assert_close(pairs, pairs_eager)
