"""Channels-last layout for 2-D convolutions (channels_last.py): values and output strides equal
eager's, the plan is logged, and only float16/bfloat16/float32 4-d convolutions change layout."""

import logging

import pytest
import torch
from torch import nn

import torchsmith.prims
from torchsmith.inductor.cpu_pipeline import compile_graph
from torchsmith.inductor.loop_ir.program import ComputedBuffer, ExternCall
from torchsmith.inductor.lowering.channels_last import channels_last_strides, plan_channels_last
from torchsmith.inductor.testing import assert_matches_eager, make_graph
from torchsmith.ir import interpret

F32 = torch.float32
CL = torch.channels_last


def _bn_relu(b, x, mean, var, weight, bias):
    y = b.op("aten._native_batch_norm_legit_no_training.default", x, weight, bias, mean, var, 0.1, 1e-5)[0]
    return b.op("aten.relu.default", y)


# (in channels, out channels, kernel, stride, padding, dilation, groups, bias)
VARIANTS = {
    "3x3_pad1": (3, 8, 3, 1, 1, 1, 1, False),
    "stride2_pad0": (4, 8, 3, 2, 0, 1, 1, True),
    "groups2_dilation2": (4, 6, 3, 1, 2, 2, 2, False),
    "depthwise": (6, 6, 3, 1, 1, 1, 6, True),
    "1x1_stride2": (5, 7, 1, 2, 0, 1, 1, False),
}


def _chain_graph(cin, cout, k, stride, padding, dilation, groups, bias, *, size=(2, 10, 11)):
    """conv -> BN(eval) -> ReLU -> conv (same params, cout -> cout) -> ReLU, a graph returning the last."""
    n, h, w = size
    types = {
        "x": ((n, cin, h, w), F32),
        "w1": ((cout, cin // groups, k, k), F32),
        "w2": ((cout, cout // groups, k, k), F32),
        "b": ((cout,), F32),
        "mean": ((cout,), F32), "var": ((cout,), F32), "gamma": ((cout,), F32), "beta": ((cout,), F32),
    }  # fmt: skip
    params = ([stride] * 2, [padding] * 2, [dilation] * 2, False, [0, 0], groups)

    def body(g, x, w1, w2, b, mean, var, gamma, beta):
        c = g.op("aten.convolution.default", x, w1, b if bias else None, *params)
        c = _bn_relu(g, c, mean, var, gamma, beta)
        c = g.op("aten.convolution.default", c, w2, b if bias else None, *params)
        return g.op("aten.relu.default", c)

    return make_graph("chain", types, body), types


def _inputs(types):
    """Random inputs; a variance (if any) positive."""
    return [
        torch.rand(*shape, dtype=dtype) + 0.5 if name == "var" else torch.randn(*shape, dtype=dtype)
        for name, (shape, dtype) in types.items()
    ]


@pytest.mark.parametrize("variant", VARIANTS)
def test_conv_chain_values_and_strides_match_eager(variant):
    graph, types = _chain_graph(*VARIANTS[variant])
    compiled = compile_graph(graph)
    inputs = _inputs(types)
    assert_matches_eager(compiled, graph, *inputs, rtol=1e-4, atol=1e-4)
    (got,), (expected,) = compiled(*inputs), interpret(graph, *inputs)
    assert got.stride() == expected.stride()
    buffers = compiled.program.buffers
    # (a ReLU after a convolution runs as its post-op: lowering/library.py fuse_convolution_relu)
    kernels = ("prims.convolution", "extern.convolution_relu")
    convs = [b for b in buffers if isinstance(b, ExternCall) and b.kernel in kernels]
    assert len(convs) == 2
    for call in convs:  # the convolutions run on channels-last tensors, their results stay so
        assert call.layout.strides == channels_last_strides(call.layout.shape)
        for arg in call.args[:2]:  # (a weight of one input channel is channels-last as it is)
            assert arg.strides[1] == 1 or arg.shape[1] == 1
    assert any("convolution layout: channels-last" in str(d) for d in compiled.decisions)


def test_epilogue_between_convolutions_is_stored_in_nhwc_order():
    def body(g, x, w1, w2):
        params = ([1, 1], [1, 1], [1, 1], False, [0, 0], 1)
        c = g.op("aten.convolution.default", x, w1, None, *params)
        c = g.op("aten.sigmoid.default", c)  # an epilogue no convolution takes in as its post-op
        return g.op("aten.convolution.default", c, w2, None, *params)

    types = {"x": ((2, 3, 10, 11), F32), "w1": ((8, 3, 3, 3), F32), "w2": ((8, 8, 3, 3), F32)}
    graph = make_graph("sigmoid_between", types, body)
    compiled = compile_graph(graph)
    assert_matches_eager(compiled, graph, *_inputs(types), rtol=1e-4, atol=1e-4)
    buffers = compiled.program.buffers
    epilogue = next(b for b in buffers if isinstance(b, ComputedBuffer) and b.layout.shape == (2, 10, 11, 8))
    # Loops in memory order (C innermost, contiguous): what the next convolution reads as NHWC.
    assert epilogue.layout.strides == (880, 88, 8, 1)
    assert epilogue.body.ranges == (2, 10, 11, 8)


def test_outputs_keep_eagers_strides_when_convolution_results_are_returned():
    def body(g, x, w, w2):
        c = g.op("aten.convolution.default", x, w, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1)
        r = g.op("aten.relu.default", c)
        d = g.op("aten.convolution.default", r, w2, None, [1, 1], [0, 0], [1, 1], False, [0, 0], 1)
        return c, r, d, g.op("aten.mul.Tensor", d, 2.0)

    types = {"x": ((2, 3, 7, 6), F32), "w": ((5, 3, 3, 3), F32), "w2": ((4, 5, 1, 1), F32)}
    graph = make_graph("outs", types, body)
    compiled = compile_graph(graph)
    inputs = _inputs(types)
    assert_matches_eager(compiled, graph, *inputs, rtol=1e-4, atol=1e-4)
    for got, expected in zip(compiled(*inputs), interpret(graph, *inputs)):
        assert got.stride() == expected.stride()
        assert got.is_contiguous()


def test_prologue_is_stored_channels_last_and_output_epilogue_loops_in_nhwc_order():
    def body(g, x, w, w2):
        scaled = g.op("aten.mul.Tensor", x, 0.5)  # read only by the convolution: stored NHWC, no copy
        c = g.op("aten.convolution.default", scaled, w, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1)
        r = g.op("aten.relu.default", c)  # a graph output reading a channels-last value
        d = g.op("aten.convolution.default", r, w2, None, [1, 1], [0, 0], [1, 1], False, [0, 0], 1)
        return r, d  # d is an output: its convolution keeps NCHW

    types = {"x": ((2, 3, 7, 6), F32), "w": ((5, 3, 3, 3), F32), "w2": ((4, 5, 1, 1), F32)}
    graph = make_graph("pro_epi", types, body)
    compiled = compile_graph(graph)
    inputs = _inputs(types)
    assert_matches_eager(compiled, graph, *inputs, rtol=1e-4, atol=1e-4)
    for got, expected in zip(compiled(*inputs), interpret(graph, *inputs)):
        assert got.stride() == expected.stride()
    buffers = compiled.program.buffers
    assert not any(b.name.endswith("input_nhwc") for b in buffers)
    computed = {b.layout.shape: b for b in buffers if isinstance(b, ComputedBuffer)}
    assert computed[(2, 7, 6, 3)].layout.strides == (126, 18, 3, 1)  # the prologue, NHWC
    assert computed[(2, 7, 6, 5)].layout.strides == (210, 6, 1, 42)  # relu: NHWC loops, eager's NCHW storage
    convs = [b for b in buffers if isinstance(b, ExternCall)]
    assert [c.layout.strides[1] for c in convs] == [1, 42]


def test_training_forward_returning_every_convolution_result_keeps_nchw(caplog):
    def body(g, x, w):
        c = g.op("aten.convolution.default", x, w, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1)
        return c, g.op("aten.relu.default", c)

    graph = make_graph("saved", {"x": ((2, 3, 6, 6), F32), "w": ((4, 3, 3, 3), F32)}, body)
    with caplog.at_level(logging.INFO, logger="torchsmith.inductor.fusion"):
        compiled = compile_graph(graph)
    assert any("not chosen: convolution layout: NCHW" in r.getMessage() for r in caplog.records)
    assert all(b.layout.strides == (144, 36, 6, 1) for b in compiled.program.buffers)


def test_transposed_convolution_between_convolutions():
    def body(g, x, w, wt, bias):
        c = g.op("aten.convolution.default", x, w, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1)
        up = g.op("aten.convolution.default", g.op("aten.relu.default", c), wt, bias, [2, 2], [1, 1], [1, 1],
                  True, [1, 1], 2)  # fmt: skip
        return g.op("aten.sigmoid.default", up)

    types = {
        "x": ((2, 4, 5, 6), F32), "w": ((6, 4, 3, 3), F32), "wt": ((6, 3, 3, 3), F32), "bias": ((6,), F32),
    }  # fmt: skip
    graph = make_graph("transposed", types, body)
    compiled = compile_graph(graph)
    assert any(d.kind == "layout" and d.taken for d in compiled.decisions)
    inputs = _inputs(types)
    assert_matches_eager(compiled, graph, *inputs, rtol=1e-4, atol=1e-4)
    (got,), (expected,) = compiled(*inputs), interpret(graph, *inputs)
    assert got.stride() == expected.stride()


def test_weights_changing_between_calls_are_read_each_call():
    graph, types = _chain_graph(*VARIANTS["3x3_pad1"])
    compiled = compile_graph(graph)
    inputs = _inputs(types)
    first = compiled(*inputs)[0].clone()
    inputs[1].mul_(-2.0)  # in place, same tensor: a cached converted weight would be stale
    second = compiled(*inputs)[0]
    torch.testing.assert_close(second, interpret(graph, *inputs)[0], rtol=1e-4, atol=1e-4)
    assert not torch.allclose(first, second)


def test_float64_and_1d_convolutions_keep_their_layout():
    def body(g, x, w):
        return g.op("aten.convolution.default", x, w, None, [1], [1], [1], False, [0], 1)

    conv1d = make_graph("conv1d", {"x": ((2, 3, 9), F32), "w": ((4, 3, 3), F32)}, body)
    assert plan_channels_last(torchsmith.prims.decompose(conv1d)) is None
    graph64 = _chain_graph_dtype(torch.float64)
    assert plan_channels_last(torchsmith.prims.decompose(graph64)) is None
    _, types = _chain_graph(*VARIANTS["3x3_pad1"])
    compiled = compile_graph(graph64)
    assert not any("channels-last" in str(d) for d in compiled.decisions)
    inputs = [x.double() for x in _inputs(types)]
    assert_matches_eager(compiled, graph64, *inputs)


def _chain_graph_dtype(dtype):
    """conv -> BN -> ReLU -> conv in `dtype` (the 3x3_pad1 variant's inputs)."""
    _, types = _chain_graph(*VARIANTS["3x3_pad1"])
    types = {name: (shape, dtype) for name, (shape, _) in types.items()}

    def body(g, x, w1, w2, b, mean, var, gamma, beta):
        params = ([1, 1], [1, 1], [1, 1], False, [0, 0], 1)
        c = g.op("aten.convolution.default", x, w1, None, *params)
        c = _bn_relu(g, c, mean, var, gamma, beta)
        return g.op("aten.convolution.default", c, w2, None, *params)

    return make_graph("chain_" + str(dtype).split(".")[-1], types, body)


def test_option_turns_the_layout_off_and_the_plan_is_logged(caplog):
    graph, types = _chain_graph(*VARIANTS["stride2_pad0"])
    with caplog.at_level(logging.INFO, logger="torchsmith.inductor.fusion"):
        on = compile_graph(graph)
    logged = [r.getMessage() for r in caplog.records]
    assert any("chosen: convolution layout: channels-last for 2 2-D convolution(s)" in m for m in logged)
    code_log = logging.getLogger("torchsmith.inductor.output_code")
    with caplog.at_level(logging.INFO, logger=code_log.name):
        compile_graph(graph)
    assert "graph chain: convolution layout: channels-last" in caplog.text
    off = compile_graph(graph, options={"layout_optimization": False})
    assert not any(d.kind == "layout" for d in off.decisions)
    assert all(b.layout.strides[-1] == 1 for b in off.program.buffers if isinstance(b, ExternCall))
    inputs = _inputs(types)
    torch.testing.assert_close(on(*inputs)[0], off(*inputs)[0], rtol=1e-4, atol=1e-4)


def test_bfloat16_convolutions_run_channels_last():
    graph = _chain_graph_dtype(torch.bfloat16)
    compiled = compile_graph(graph)
    assert any(d.kind == "layout" for d in compiled.decisions)
    _, types = _chain_graph(*VARIANTS["3x3_pad1"])
    inputs = [x.bfloat16() for x in _inputs(types)]
    (got,), (expected,) = compiled(*inputs), interpret(graph, *inputs)
    assert got.stride() == expected.stride()
    torch.testing.assert_close(got, expected, rtol=2e-2, atol=5e-2)


# ---- through torchsmith.compile (capture, autograd_aot, prims, inductor) ----------------------------


class ConvNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(3, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8), nn.ReLU(),
            nn.Conv2d(8, 8, 3, stride=2, padding=1, groups=2), nn.BatchNorm2d(8), nn.ReLU(),
            nn.Conv2d(8, 4, 1),
        )  # fmt: skip

    def forward(self, x):
        y = self.body(x)
        return y, y.mean((2, 3))


def _torchsmith():
    import torchsmith

    if not hasattr(torchsmith, "compile"):
        pytest.skip("needs the torchsmith package (compile_api)")
    return torchsmith


def _model():
    model = ConvNet()
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.running_mean.uniform_(-0.5, 0.5)
                m.running_var.uniform_(0.5, 2.0)
    return model


@pytest.mark.parametrize("memory_format", [torch.contiguous_format, CL])
def test_compiled_model_inference_matches_eager(memory_format):
    torchsmith = _torchsmith()
    model = _model().eval()
    x = torch.randn(2, 3, 12, 12).contiguous(memory_format=memory_format)
    compiled = torchsmith.compile(model, options={"fallback": "raise"})
    with torch.no_grad():
        expected, got = model(x), compiled(x)
    for g, e in zip(got, expected):
        torch.testing.assert_close(g, e, rtol=1e-4, atol=1e-4)
        # a channels-last input gives channels-last convolution results on CPU, which torch's meta
        # convolution does not say: autograd_aot asks the real kernel (device_layouts.py)
        assert g.stride() == e.stride()


def test_compiled_model_training_gradients_match_eager():
    torchsmith = _torchsmith()
    model = _model().train()
    twin = _model().train()
    twin.load_state_dict(model.state_dict())
    compiled = torchsmith.compile(twin, options={"fallback": "raise"})
    x = torch.randn(2, 3, 12, 12)
    for fn in (model, compiled):
        y, pooled = fn(x)
        (y.square().sum() + pooled.sum()).backward()
    for (name, p), q in zip(model.named_parameters(), twin.parameters()):
        torch.testing.assert_close(q.grad, p.grad, rtol=1e-4, atol=1e-4, msg=name)
    for b, c in zip(model.buffers(), twin.buffers()):
        torch.testing.assert_close(c, b, rtol=1e-4, atol=1e-4)


def test_compiled_model_with_dynamic_batch():
    torchsmith = _torchsmith()
    model = _model().eval()
    compiled = torchsmith.compile(model, dynamic=True, options={"fallback": "raise"})
    with torch.no_grad():
        for batch in (2, 3):
            x = torch.randn(batch, 3, 10, 10)
            for g, e in zip(compiled(x), model(x)):
                torch.testing.assert_close(g, e, rtol=1e-4, atol=1e-4)
                assert g.stride() == e.stride()


def test_max_pool_between_convolutions_pads_and_pools_channels_last():
    # max-pool's padding and its windows (slices of the padding) read a channels-last value: they
    # are stored and looped channels-last too (C innermost: vectorized, no strided gather), and the
    # window maxima, a chain of equal-shape pointwise buffers, share one kernel
    def body(g, x, w1, w2):
        params = ([1, 1], [1, 1], [1, 1], False, [0, 0], 1)
        c = g.op("aten.relu.default", g.op("aten.convolution.default", x, w1, None, *params))
        pooled = g.op("aten.max_pool2d_with_indices.default", c, [3, 3], [2, 2], [1, 1])[0]
        return g.op("aten.convolution.default", pooled, w2, None, *params)

    types = {"x": ((2, 3, 10, 11), F32), "w1": ((8, 3, 3, 3), F32), "w2": ((8, 8, 3, 3), F32)}
    graph = make_graph("pool_between", types, body)
    compiled = compile_graph(graph)
    assert_matches_eager(compiled, graph, *_inputs(types), rtol=1e-4, atol=1e-4)
    computed = [b for b in compiled.program.buffers if isinstance(b, ComputedBuffer)]
    pad = next(b for b in computed if b.name.startswith("pad"))
    assert pad.layout.shape[-1] == 8 and pad.layout.strides[-1] == 1  # NHWC: C innermost
    pooled = [b for b in computed if b.layout.shape == (2, 5, 6, 8)]
    assert pooled and all(b.layout.strides[-1] == 1 for b in pooled)
    assert compiled.source.count('extern "C" void kernel') <= 5  # input, 2 weights, pad, pool
