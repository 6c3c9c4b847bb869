"""Prims and decompositions on a CUDA device (skipped where there is none): the philox RNG gives
the same bits as on the CPU, and decomposed graphs match eager CUDA."""

import pytest
import torch

from torchsmith.ir import lookup_op
from torchsmith.prims.testing.aten_samples import aten_samples
from torchsmith.prims.testing.harness import check_decomposition
from torchsmith.prims.testing.make import Sample

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")

ON_CUDA = (
    "aten.add.Tensor", "aten.div.Tensor_mode", "aten.gelu.default", "aten._softmax.default",
    "aten._log_softmax.default", "aten.sum.dim_IntList", "aten.var_mean.correction",
    "aten.native_layer_norm.default", "aten.addmm.default", "aten.embedding_dense_backward.default",
    "aten.nll_loss_forward.default", "aten.index_put.default", "aten.max_pool2d_with_indices.default",
)  # fmt: skip


def _to_cuda(arg):
    if isinstance(arg, torch.Tensor):
        return arg.cuda()
    if isinstance(arg, (list, tuple)):
        return type(arg)(_to_cuda(a) for a in arg)
    if isinstance(arg, dict):
        return {k: _to_cuda(v) for k, v in arg.items()}
    return arg


def test_philox_gives_the_same_bits_on_cuda():
    for name in ("prims.philox_rand", "prims.philox_randn"):
        run = lookup_op(name).eager
        for dtype in (torch.float32, torch.float64, torch.bfloat16):
            cpu = run([33, 7], 1234, 2**40 + 3, dtype=dtype, device="cpu")
            cuda = run([33, 7], 1234, 2**40 + 3, dtype=dtype, device="cuda").cpu()
            if name == "prims.philox_rand":
                assert torch.equal(cpu, cuda), (name, dtype)
            else:  # the same uniforms; log and cos may round differently on the device
                torch.testing.assert_close(cpu, cuda, rtol=1e-12 if dtype == torch.float64 else 0, atol=0)


@pytest.mark.parametrize("name", ON_CUDA)
def test_decomposition_matches_eager_on_cuda(name):
    for sample in aten_samples(name)[:4]:
        check_decomposition(name, Sample(_to_cuda(sample.args), _to_cuda(sample.kwargs), sample.note))
