"""Every decomposition against eager torch.ops.aten over the shared sample database: a one-node
aten graph is decomposed, run by the reference interpreter and compared with eager (exactly where
eager agrees, else no farther from a float64 run than eager is)."""

import pytest

from torchsmith.prims.decompose import DECOMPOSITIONS, RANDOM_OPS
from torchsmith.prims.testing.aten_samples import aten_samples
from torchsmith.prims.testing.harness import check_decomposition

# Random ops draw other values than eager by design: test_decompose_pass checks them statistically.
DECOMPOSED = sorted(set(DECOMPOSITIONS) - RANDOM_OPS)


def test_every_decomposition_has_samples():
    assert [name for name in DECOMPOSED if not aten_samples(name)] == []


@pytest.mark.parametrize("name", DECOMPOSED)
def test_decomposition_matches_eager(name):
    for sample in aten_samples(name):
        check_decomposition(name, sample)


# Ops whose decompositions must also work on symbolic sizes (what capture produces for dynamic
# shapes): elementwise, reductions, softmax, norms, views and matmuls.
SYMBOLIC = (
    "aten.add.Tensor", "aten.mul.Tensor", "aten.div.Tensor_mode", "aten.where.self", "aten.gelu.default",
    "aten.sum.dim_IntList", "aten.mean.dim", "aten.amax.default", "aten.var_mean.correction",
    "aten._softmax.default", "aten._log_softmax.default", "aten._softmax_backward_data.default",
    "aten.native_layer_norm.default", "aten.native_layer_norm_backward.default", "aten.view.default",
    "aten.permute.default", "aten.transpose.int", "aten.slice.Tensor",
    "aten.select.int", "aten.cat.default", "aten.constant_pad_nd.default", "aten.unsqueeze.default",
    "aten.addmm.default", "aten.bmm.default", "aten.linear.default", "aten.embedding.default",
    "aten.nll_loss_forward.default", "aten.index.Tensor", "aten.cumsum.default", "aten.tril.default",
    "aten.repeat.default", "aten.split.Tensor", "aten.max_pool2d_with_indices.default",
)  # fmt: skip


@pytest.mark.parametrize("name", SYMBOLIC)
def test_decomposition_works_on_symbolic_shapes(name):
    for sample in aten_samples(name)[:6]:
        check_decomposition(name, sample, symbolic=True)


def test_every_sampled_op_has_a_decomposition():
    from torchsmith.prims.testing.aten_samples import SAME_AS, SPECIAL

    assert sorted((set(SPECIAL) | set(SAME_AS)) - set(DECOMPOSITIONS)) == []
