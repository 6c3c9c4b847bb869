"""Functions that torch.special, torch.linalg, torch.fft and nn.functional bind under their C-level
names resolve to their public op names, and back to the same function."""

import pytest
import torch

from torchsmith.ir.registry import lookup_op, op_name_of


@pytest.mark.parametrize(
    "fn, name",
    [
        (torch.special.entr, "torch.special.entr"),
        (torch.special.ndtri, "torch.special.ndtri"),
        (torch.linalg.inv, "torch.linalg.inv"),
        (torch.linalg.vector_norm, "torch.linalg.vector_norm"),
        (torch.fft.rfft, "torch.fft.rfft"),
        (torch.nn.functional.logsigmoid, "torch.nn.functional.logsigmoid"),
    ],
)
def test_c_level_function_has_its_public_name(fn, name):
    assert op_name_of(fn) == name
    assert lookup_op(name).eager is fn


def test_special_op_compiles_like_eager():
    import torchsmith

    if not hasattr(torchsmith, "compile"):
        pytest.skip("needs torchsmith.compile (compile_api) installed")

    def f(x):
        return torch.special.entr(x) + torch.special.ndtr(x)

    x = torch.rand(5, 3)
    torch.testing.assert_close(torchsmith.compile(f)(x), f(x))
