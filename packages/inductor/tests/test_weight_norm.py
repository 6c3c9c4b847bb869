"""Weight normalization in training under backend="inductor": both torch APIs (the
parametrization and the older nn.utils.weight_norm hook) call aten._weight_norm_interface and its
backward on the CPU, which prims decomposes; outputs and every gradient equal eager's, no graph runs
them as eager ops, and convolution_backward stays a library call (as torch.compile keeps it)."""

import warnings

import pytest
import torch

from torchsmith.inductor.loop_ir.program import ExternCall
from torchsmith.ir import events


def _compile(fn, **kwargs):
    """torchsmith.compile, or a skip where compile_api is not installed (the package's isolated run)."""
    import torchsmith

    if not hasattr(torchsmith, "compile"):
        pytest.skip("needs the torchsmith package (compile_api)")
    return torchsmith.compile(fn, **kwargs)


def _model(api: str, dim: int, dtype: torch.dtype):
    torch.manual_seed(0)
    conv = torch.nn.Conv1d(4, 6, 3, padding=1).to(dtype)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # the older API is deprecated, still used (Wav2Vec2)
        if api == "parametrization":
            return torch.nn.utils.parametrizations.weight_norm(conv, dim=dim)
        return torch.nn.utils.weight_norm(conv, dim=dim)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("dim", [0, 2])
@pytest.mark.parametrize("api", ["parametrization", "hook"])
def test_weight_norm_training_step_matches_eager(api, dim, dtype):
    model, reference = _model(api, dim, dtype), _model(api, dim, dtype)
    x = torch.randn(2, 4, 9, dtype=dtype)
    with events.observe() as seen:
        compiled = _compile(model, backend="inductor", options={"fallback": "raise"})
        out = compiled(x)
        out.float().square().sum().backward()
    expected = reference(x)
    expected.float().square().sum().backward()
    tolerance = dict(atol=3e-2, rtol=3e-2) if dtype == torch.bfloat16 else {}
    torch.testing.assert_close(out, expected, **tolerance)
    grads = {n: p.grad for n, p in model.named_parameters()}
    for name, p in reference.named_parameters():
        torch.testing.assert_close(grads[name], p.grad, **tolerance)
    programs = [e.payload["program"] for e in seen if e.stage == "inductor" and e.kind == "loops"]
    kernels = [b.kernel for p in programs for b in p.buffers if isinstance(b, ExternCall)]
    assert len(programs) == 2  # forward and backward
    assert not [k for k in kernels if "weight_norm" in k], kernels
    # convolution_backward is the one op run by torch's kernel: a library call, as in torch.compile
    fallbacks = {op for p in programs for op, _ in p.fallbacks}
    assert fallbacks == {"aten.convolution_backward.default"}, fallbacks
