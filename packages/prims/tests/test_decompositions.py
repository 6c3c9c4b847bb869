"""Every decomposition against eager torch.ops.aten over the shared sample database: a one-node
aten graph is decomposed, run by the reference interpreter and compared with eager (exactly where
eager agrees, else no farther from a float64 run than eager is)."""

import pytest

from torchsmith.prims.decompose import DECOMPOSITIONS
from torchsmith.prims.testing.aten_samples import aten_samples
from torchsmith.prims.testing.harness import check_decomposition

DECOMPOSED = sorted(DECOMPOSITIONS)


def test_every_decomposition_has_samples():
    assert [name for name in DECOMPOSED if not aten_samples(name)] == []


@pytest.mark.parametrize("name", DECOMPOSED)
def test_decomposition_matches_eager(name):
    for sample in aten_samples(name):
        check_decomposition(name, sample)
