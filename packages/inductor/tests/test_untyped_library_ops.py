"""ATen ops torch ships without a Meta kernel (geqrf, histogram, histogramdd: torchsmith.ir adds
theirs) compile as extern calls next to generated kernels, equal to eager."""

import pytest
import torch


def _torchsmith():
    import torchsmith

    if not hasattr(torchsmith, "compile"):
        pytest.skip("needs the torchsmith package (compile_api)")
    return torchsmith


CASES = {
    "geqrf": lambda x: tuple(t * 2 for t in torch.geqrf(x.exp())),
    "histogram": lambda x: tuple(torch.histogram(x.sin(), 5, range=(-1.0, 1.0))),
    "histogramdd": lambda x: (lambda h: (h.hist + 1, *h.bin_edges))(torch.histogramdd(x[:, :2] * 2, [3, 4])),
}


@pytest.mark.parametrize("name", list(CASES))
def test_op_without_torch_meta_kernel_compiles_as_extern_call(name):
    torchsmith = _torchsmith()
    x = torch.randn(6, 4)
    expected = CASES[name](x)
    got = torchsmith.compile(CASES[name], fullgraph=True, options={"fallback": "raise"})(x)
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        assert (g.shape, g.dtype) == (e.shape, e.dtype)
        torch.testing.assert_close(g, e)
