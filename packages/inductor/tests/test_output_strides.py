"""Graph outputs have eager's strides whatever op produced them (device_compilers.keep_output_strides)."""

import pytest
import torch
import torch.nn.functional as F

CL, CL3 = torch.channels_last, torch.channels_last_3d


def _torchsmith():
    import torchsmith

    if not hasattr(torchsmith, "compile"):
        pytest.skip("needs the torchsmith package (compile_api)")
    return torchsmith


def cl(*shape):
    return torch.randn(*shape).to(memory_format=CL if len(shape) == 4 else CL3)


CASES = {
    "pointwise": (lambda x: x.sin() + 1, lambda: (cl(2, 3, 4, 5),)),
    "mixed_layouts": (lambda x, y: (x + y, y + x), lambda: (cl(2, 3, 4, 5), torch.randn(2, 3, 4, 5))),
    "convolution": (
        lambda x, w: F.conv2d(x, w, padding=1),
        lambda: (cl(2, 3, 8, 8), torch.randn(4, 3, 3, 3)),
    ),
    "conv_residual": (
        lambda x, w: torch.relu(F.conv2d(x, w, padding=1)) + x,
        lambda: (cl(2, 3, 8, 8), torch.randn(3, 3, 3, 3)),
    ),
    "cat_channels": (lambda x, y: torch.cat([x, y], 1), lambda: (cl(2, 3, 4, 5), cl(2, 2, 4, 5))),
    "clone": (lambda x: x.clone(), lambda: (cl(2, 3, 4, 5),)),
    "to_channels_last": (lambda x: (x + 1).to(memory_format=CL), lambda: (torch.randn(2, 3, 4, 5),)),
    "to_channels_last_3d": (lambda x: (x + 1).to(memory_format=CL3), lambda: (torch.randn(2, 3, 4, 5, 6),)),
    "like": (lambda x: (torch.zeros_like(x), torch.full_like(x, 2.0)), lambda: (cl(2, 3, 4, 5),)),
    "cast": (lambda x: x.to(torch.float64), lambda: (cl(2, 3, 4, 5),)),
    "keepdim": (lambda x: (x.sum(1, keepdim=True), x.amax(3, keepdim=True)), lambda: (cl(2, 3, 4, 5),)),
    "nearest": (lambda x: F.interpolate(x, scale_factor=2), lambda: (cl(2, 3, 4, 4),)),
    "view_of_computed": (lambda x: (x * 2).permute(0, 2, 3, 1), lambda: (cl(2, 3, 4, 5),)),
}


@pytest.mark.parametrize("name", list(CASES))
def test_outputs_have_eager_strides(name):
    fn, make = CASES[name]
    torchsmith = _torchsmith()
    args = make()
    expected = fn(*args)
    got = torchsmith.compile(fn, backend="inductor", options={"fallback": "raise"})(*args)
    expected = expected if isinstance(expected, tuple) else (expected,)
    got = got if isinstance(got, tuple) else (got,)
    for g, e in zip(got, expected, strict=True):
        torch.testing.assert_close(g, e)
        assert g.stride() == e.stride()


def test_a_view_of_a_redeclared_output_follows_its_layout():
    """An output declared channels-last (its ATen twin's strides) and a slice of it: the slice is
    declared strided as a slice of the channels-last value, so the graph verifies."""
    import torchsmith.prims  # noqa: F401  (registers the prims ops)
    from torchsmith.inductor.device_compilers import keep_output_strides
    from torchsmith.inductor.testing import make_graph
    from torchsmith.ir import TensorType, Value, verify

    def body(b, x):
        y = b.op("prims.add", x, x)
        return y, b.op("prims.sum", b.op("prims.slice", y, 2, 0, 7, 2), [2])

    prims = make_graph("f", {"x": ((2, 3, 8, 8), torch.float32)}, body)
    y = prims.outputs[0]
    nhwc = TensorType.make(y.type.shape, y.type.dtype, strides=(192, 1, 24, 3))
    aten = prims.replace(outputs=(Value(y.name, nhwc), prims.outputs[1]))
    kept = verify(keep_output_strides(aten, prims))
    (sliced,) = [n.outputs[0].type for n in kept.nodes if n.op == "prims.slice"]
    assert kept.outputs[0].type.strides == (192, 1, 24, 3) and sliced.strides == (192, 1, 48, 3)
