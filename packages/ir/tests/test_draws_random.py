"""draws_random: which ops move the global generator when they run."""

import pytest

from torchsmith.ir import draws_random


@pytest.mark.parametrize(
    "op", ["aten.rand.default", "aten.randn.default", "aten.bernoulli.p", "aten.native_dropout.default"]
)
def test_random_aten_ops_draw(op):
    assert draws_random(op)


@pytest.mark.parametrize(
    "op", ["aten.add.Tensor", "aten.mm.default", "prims.philox_rand", "extern.output", "not an op"]
)
def test_other_ops_do_not(op):
    # philox_rand is a pure function of its seed and offset: it reads no generator
    assert not draws_random(op)
