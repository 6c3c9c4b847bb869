"""Convolution layouts in the trace: the real kernel's, where torch's meta kernel says contiguous."""

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from torchsmith.autograd_aot import trace
from torchsmith.autograd_aot.device_layouts import with_device_layout
from torchsmith.ir import GraphBuilder

CL = torch.channels_last


def conv_graph(x, w, **kwargs):
    b = GraphBuilder("conv")
    xv = b.input("x", _type(x))
    wv = b.input("w", _type(w))
    y = b.op("torch.nn.functional.conv2d", xv, wv, **kwargs)
    return b.build(b.op("torch.relu", y))


def _type(t):
    from torchsmith.ir import TensorType

    return TensorType.of(t)


@pytest.mark.parametrize(
    ("x_format", "w_format"),
    [(CL, torch.contiguous_format), (torch.contiguous_format, CL), (torch.contiguous_format,) * 2],
)
def test_traced_convolution_and_its_consumer_have_eager_strides(x_format, w_format):
    x = torch.randn(2, 3, 8, 8).contiguous(memory_format=x_format)
    w = torch.randn(4, 3, 3, 3).contiguous(memory_format=w_format)
    expected = torch.relu(torch.nn.functional.conv2d(x, w, padding=1))
    traced = trace(conv_graph(x, w, padding=[1, 1]), [x, w], training=False)
    conv, relu = traced.graph.nodes
    assert conv.op == "aten.convolution.default"
    assert conv.outputs[0].type.strides == expected.stride()
    assert relu.outputs[0].type.strides == expected.stride()


def test_float64_convolution_stays_contiguous_as_on_cpu():
    x = torch.randn(2, 3, 6, 6, dtype=torch.float64).contiguous(memory_format=CL)
    w = torch.randn(4, 3, 3, 3, dtype=torch.float64)
    expected = torch.nn.functional.conv2d(x, w)
    conv = trace(conv_graph(x, w), [x, w], training=False).graph.nodes[0]
    assert conv.outputs[0].type.strides == expected.stride()


@pytest.mark.parametrize("transposed", [False, True])
def test_probe_uses_small_inputs_and_keeps_strided_and_transposed_arguments(transposed):
    x = torch.randn(2, 4, 9, 7).contiguous(memory_format=CL)
    w = torch.randn(4, 2, 3, 3) if transposed else torch.randn(2, 4, 3, 3)
    args = (x, w, None, [2, 1], [1, 0], [1, 2], transposed, [1, 0] if transposed else [0, 0], 1)
    expected = torch.ops.aten.convolution.default(*args)
    meta_args = tuple(a.to("meta") if isinstance(a, torch.Tensor) else a for a in args)
    meta = torch.ops.aten.convolution.default(*meta_args)
    laid_out = with_device_layout("aten.convolution.default", meta_args, meta, "cpu")
    assert laid_out.device.type == "meta" and laid_out.shape == expected.shape
    assert laid_out.stride() == expected.stride()


def test_other_ops_are_left_as_the_meta_kernel_says():
    result = torch.empty(2, 3, 4, 5, device="meta")
    assert with_device_layout("aten.relu.default", (result,), result, "cpu") is result


@pytest.mark.parametrize(
    "fn",
    [
        lambda t: torch.nn.functional.pad(t, (1, 2, 1, 1), mode="reflect"),
        lambda t: torch.nn.functional.pad(t, (2, 2, 1, 1), mode="replicate"),
        lambda t: torch.nn.functional.channel_shuffle(t, 2),
    ],
    ids=["reflection_pad", "replication_pad", "channel_shuffle"],
)
def test_padding_and_shuffle_keep_the_cpu_kernels_channels_last(fn):
    x = torch.randn(2, 6, 4, 5).contiguous(memory_format=CL)
    expected = fn(x)
    meta = fn(x.to("meta"))
    assert meta.stride() != expected.stride()  # torch's meta kernel disagrees with the CPU kernel
    class Record(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            result = func(*args, **(kwargs or {}))
            self.seen = (str(func).replace("aten::", "aten."), args, result)
            return result

    with Record() as mode:
        fn(x.to("meta"))
    op, args, result = mode.seen
    op = op if op.count(".") == 2 else op + ".default"
    assert with_device_layout(op, args, result, "cpu").stride() == expected.stride()
