"""Capture on a GPU: device kept in the types, guarded, results equal to eager (skipped without CUDA)."""

import pytest
import torch

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def test_cuda_module_types_and_results(compile_with, backend):
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 4)).cuda()
    x = torch.randn(3, 8, device="cuda")
    torch.testing.assert_close(compile_with(model)(x), model(x))
    (graph,) = backend.graphs
    assert all(str(v.type).endswith(("cuda:0", "cuda:0 grad")) for v in graph.values())


def test_device_change_recompiles(compile_with, backend):
    f = compile_with(lambda x: (x * 2).to("cpu") + 1)
    for device in ("cuda", "cpu", "cuda"):
        x = torch.randn(4, device=device)
        torch.testing.assert_close(f(x), (x * 2).cpu() + 1)
    assert len(backend.graphs) == 2
    assert str(backend.graphs[0].outputs[0].type) == "f32[4] cpu"


def test_creation_on_the_input_device(compile_with):
    f = compile_with(lambda x: x + torch.ones(x.shape, device=x.device))
    x = torch.randn(2, 2, device="cuda")
    torch.testing.assert_close(f(x), x + 1)
