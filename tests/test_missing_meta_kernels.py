"""Ops that some torch versions ship without a meta kernel still compile: torch 2.11 has none for
`_transformer_encoder_layer_fwd`, the fused path `nn.TransformerEncoderLayer` takes in inference.
Simulated here by overriding the op's Meta kernel (and its CPU kernel, so that running the fused op
eagerly instead of compiling its parts fails the test) with ones that raise."""

import pytest
import torch

import torchsmith


@pytest.fixture
def encoder_layer_without_kernels():
    lib = torch.library.Library("aten", "IMPL")

    def missing(*args, **kwargs):
        raise NotImplementedError("Could not run 'aten::_transformer_encoder_layer_fwd' with these arguments")

    for key in ("Meta", "CPU"):
        lib.impl("_transformer_encoder_layer_fwd", missing, key)
    yield
    lib._destroy()


@pytest.mark.parametrize("norm_first", [False, True])
def test_encoder_layer_fast_path_compiles_without_a_meta_kernel(norm_first, request):
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(32, 4, 64, batch_first=True, norm_first=norm_first).eval()
    x, padding = torch.randn(2, 8, 32), torch.tensor([[False] * 6 + [True] * 2, [False] * 8])
    with torch.no_grad():
        expected = layer(x), layer(x, src_key_padding_mask=padding)
    request.getfixturevalue("encoder_layer_without_kernels")
    with torch.no_grad(), pytest.raises(NotImplementedError):
        layer(x)  # the fast path really is gone
    compiled = torchsmith.compile(layer, options={"fallback": "raise"})
    with torch.no_grad():
        got = compiled(x), compiled(x, src_key_padding_mask=padding)
    # The padded positions' rows are not defined by eager's fast path: compare the real tokens.
    torch.testing.assert_close(got[0], expected[0], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(got[1][0, :6], expected[1][0, :6], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(got[1][1], expected[1][1], rtol=1e-5, atol=1e-5)
