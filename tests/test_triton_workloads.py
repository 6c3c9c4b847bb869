"""The GPU benchmark's workloads (benchmarks/inductor_workloads.py, smoke sizes) compiled end to end
by backend="inductor" through the Triton code generator, in float32 and bfloat16, inference and
training, against eager: what the H200 run will compile, checked here in Triton's interpreter (CPU
tensors stand in for CUDA ones, the Triton compiler is registered for the cpu device)."""

import copy
import os
import pathlib
import sys

import pytest
import torch

if not torch.cuda.is_available():
    os.environ["TRITON_INTERPRET"] = "1"
pytest.importorskip("triton", reason="triton is not installed (pip install triton==3.6.0)")

import torchsmith  # noqa: E402
import torchsmith.inductor as inductor  # noqa: E402
from torchsmith.inductor import device_compilers as backend  # noqa: E402
from torchsmith.inductor.gpu_pipeline import compile_graph_triton  # noqa: E402

BENCHMARKS = pathlib.Path(__file__).resolve().parents[1] / "benchmarks"
if not (BENCHMARKS / "inductor_workloads.py").exists():
    pytest.skip("benchmarks/ is not beside tests/", allow_module_level=True)
sys.path.insert(0, str(BENCHMARKS))
from inductor_workloads import WORKLOADS  # noqa: E402

TOLERANCE = {torch.float32: 1e-3, torch.bfloat16: 3e-2}  # relative to each output's largest magnitude
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def _outputs(train, module, fn, inputs):
    if not train:
        with torch.no_grad():
            out = fn(*inputs)
        return list(out) if isinstance(out, tuple | list) else [out]
    loss = fn(*inputs)
    loss.backward()
    return [loss.detach()] + [p.grad for p in module.parameters() if p.grad is not None]


@pytest.fixture
def triton_everywhere(monkeypatch):
    """Graphs on the test device compile with the Triton code generator; counts the graphs."""
    compiled = []

    def compiler(graph, example_inputs, options=None):
        compiled.append(graph.name)
        return compile_graph_triton(graph, example_inputs, options)

    monkeypatch.setitem(backend.DEVICE_COMPILERS, DEVICE, compiler)
    return compiled


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["f32", "bf16"])
@pytest.mark.parametrize("name", list(WORKLOADS))
def test_workload_compiles_with_triton_and_matches_eager(name, dtype, triton_everywhere):
    workload = WORKLOADS[name]
    if name in ("gpt2", "bert"):
        pytest.importorskip("transformers")
    torch.manual_seed(0)
    module, inputs = workload.build(True, False)
    module = module.to(device=DEVICE, dtype=dtype).train(workload.train)
    inputs = [x.to(DEVICE, dtype if x.is_floating_point() else x.dtype) for x in inputs]
    reference = copy.deepcopy(module)
    fallbacks = inductor.BACKEND_STATS.backward_fallbacks
    expected = _outputs(workload.train, reference, reference, inputs)
    compiled = torchsmith.compile(module)
    # The second call runs a static graph's precomputed steps (triton_steps), the first does not.
    for _ in range(2):
        module.zero_grad(set_to_none=True)
        got = _outputs(workload.train, module, compiled, inputs)
        assert triton_everywhere, "nothing reached the Triton code generator"
        assert inductor.BACKEND_STATS.backward_fallbacks == fallbacks
        assert len(got) == len(expected)
        for e, g in zip(expected, got):
            scale = max(1.0, e.double().abs().max().item())
            tol = TOLERANCE[dtype]
            torch.testing.assert_close(g.double(), e.double(), rtol=tol, atol=tol * scale)
