"""Convolution epilogues taken into the convolution: per-channel affine chains (eval BatchNorm)
folded into its weight and bias (lowering/conv_fold.py), and a ReLU run as oneDNN's post-op
(lowering/library.py fuse_convolution_relu, runtime/conv_relu.py). Values against eager, NaN
kept where eager keeps it, parameters read on every call, training graphs untouched."""

import os

import pytest
import torch
from torch import nn

import torchsmith.prims
from torchsmith.inductor.cpu_pipeline import compile_graph
from torchsmith.inductor.loop_ir.program import ComputedBuffer, ExternCall
from torchsmith.inductor.lowering import conv_fold
from torchsmith.inductor.lowering.conv_fold import fold_conv_affine, match_folds
from torchsmith.inductor.runtime import conv_relu
from torchsmith.inductor.testing import assert_matches_eager, make_graph
from torchsmith.ir import interpret, verify

F32 = torch.float32
CPU = torch.device("cpu")
needs_onednn = pytest.mark.skipif(not conv_relu.available(CPU), reason="torch without oneDNN convolutions")
MIN_ELEMENTS = conv_fold.MIN_ELEMENTS


@pytest.fixture(autouse=True)
def fold_small_images(monkeypatch):
    """The tests' images are small: fold and fuse them anyway, without the compile cache (which
    would hand those programs to graphs compiled under the real threshold)."""
    monkeypatch.setattr(conv_fold, "MIN_ELEMENTS", 1)
    monkeypatch.setenv("TORCHSMITH_COMPILE_CACHE", "0")


def _bn(g, x, mean, var, gamma, beta):
    return g.op("aten._native_batch_norm_legit_no_training.default", x, gamma, beta, mean, var, 0.1, 1e-5)[0]


# (in channels, out channels, kernel, stride, padding, dilation, groups, bias)
VARIANTS = {
    "3x3_no_bias": (3, 8, 3, 1, 1, 1, 1, False),
    "stride2_bias": (4, 8, 3, 2, 0, 1, 1, True),
    "groups2_dilation2": (4, 6, 3, 1, 2, 2, 2, True),
    "depthwise": (6, 6, 3, 1, 1, 1, 6, False),
}


def _block_graph(cin, cout, k, stride, padding, dilation, groups, bias, *, relu=True, dtype=F32,
                 device="cpu"):
    """conv -> BN(eval) [-> ReLU] -> conv -> BN(eval) [-> ReLU], returning the last value."""
    n, h, w = 2, 9, 11
    types = {
        "x": ((n, cin, h, w), dtype), "w1": ((cout, cin // groups, k, k), dtype),
        "w2": ((cout, cout // groups, k, k), dtype), "b": ((cout,), dtype),
        "mean": ((cout,), dtype), "var": ((cout,), dtype),
        "gamma": ((cout,), dtype), "beta": ((cout,), dtype),
    }  # fmt: skip
    types = {name: (shape, dtype, device) for name, (shape, dtype) in types.items()}
    params = ([stride] * 2, [padding] * 2, [dilation] * 2, False, [0, 0], groups)

    def body(g, x, w1, w2, b, mean, var, gamma, beta):
        c = x
        for weight in (w1, w2):
            c = g.op("aten.convolution.default", c, weight, b if bias else None, *params)
            c = _bn(g, c, mean, var, gamma, beta)
            c = g.op("aten.relu.default", c) if relu else c
        return c

    return make_graph("block", types, body), types


def _inputs(types, dtype=F32):
    return [
        torch.rand(*shape, dtype=dtype) + 0.5 if name == "var" else torch.randn(*shape, dtype=dtype)
        for name, (shape, *_) in types.items()
    ]


def _externs(compiled):
    return [b.kernel for b in compiled.program.buffers if isinstance(b, ExternCall)]


def _image_kernels(compiled):
    """Computed buffers of rank 4 with more than a weight's elements: passes over an image."""
    return [
        b.name for b in compiled.program.buffers
        if isinstance(b, ComputedBuffer) and len(b.layout.shape) == 4 and b.layout.shape[0] == 2
    ]  # fmt: skip


def test_batch_norm_chain_folds_into_one_convolution():
    graph, _ = _block_graph(*VARIANTS["stride2_bias"])
    prims_graph = torchsmith.prims.decompose(graph)
    folds = match_folds(prims_graph)
    assert [len(f.steps) for f in folds] == [4, 4]  # sub mean, mul 1/std, mul gamma, add beta
    folded = fold_conv_affine(prims_graph)
    verify(folded)
    ops = [n.op for n in folded.nodes]
    assert ops.count("prims.convolution") == 2
    # No elementwise op over the image is left between the convolutions but the ReLU.
    image_ops = [n.op for n in folded.nodes if n.outputs and n.outputs[0].type.rank == 4]
    assert [op for op in image_ops if op not in ("prims.broadcast_in_dim", "prims.mul")] == [
        "prims.convolution", "prims.maximum", "prims.convolution", "prims.maximum",
    ]  # fmt: skip
    inputs = _inputs(_block_graph(*VARIANTS["stride2_bias"])[1])
    for got, expected in zip(interpret(folded, *inputs), interpret(graph, *inputs)):
        torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
    assert fold_conv_affine(folded) is folded  # nothing left to fold


def test_before_relu_folds_only_chains_a_relu_reads():
    """The GPU folds where cuDNN's fused convolution + ReLU takes the bias: the second block's
    ReLU result is the graph output, so only the first chain folds; without ReLUs none does."""
    with_relu = torchsmith.prims.decompose(_block_graph(*VARIANTS["3x3_no_bias"])[0])
    folds = match_folds(with_relu, before_relu=True)
    assert len(folds) == 1 and folds[0].convolution is next(
        n for n in with_relu.nodes if n.op == "prims.convolution")
    folded = fold_conv_affine(with_relu, before_relu=True)
    assert [n.op for n in folded.nodes].count("prims.convolution") == 2
    inputs = _inputs(_block_graph(*VARIANTS["3x3_no_bias"])[1])
    for got, expected in zip(interpret(folded, *inputs), interpret(with_relu, *inputs)):
        torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
    plain = torchsmith.prims.decompose(_block_graph(*VARIANTS["3x3_no_bias"], relu=False)[0])
    assert match_folds(plain, before_relu=True) == []
    doubles = torchsmith.prims.decompose(_block_graph(*VARIANTS["3x3_no_bias"], dtype=torch.float64)[0])
    assert match_folds(doubles, before_relu=True) == []  # the fused ReLU runs in float32 only


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("relu", [True, False], ids=["relu", "no_relu"])
def test_folded_blocks_match_eager(variant, relu):
    graph, types = _block_graph(*VARIANTS[variant], relu=relu)
    compiled = compile_graph(graph)
    inputs = _inputs(types)
    assert_matches_eager(compiled, graph, *inputs, rtol=1e-4, atol=1e-4)
    (got,), (expected,) = compiled(*inputs), interpret(graph, *inputs)
    assert got.stride() == expected.stride()
    if relu and conv_relu.available(CPU):
        # The first ReLU is the first convolution's post-op; the last one runs in the output copy.
        assert _externs(compiled) == ["extern.convolution_relu", "prims.convolution"]
    else:
        assert _externs(compiled) == ["prims.convolution", "prims.convolution"]
    assert len(_image_kernels(compiled)) <= 2  # at most the input's and the output's copies


def test_small_images_keep_the_plain_convolution_and_their_epilogue(monkeypatch):
    """Below MIN_ELEMENTS results aten's own small-image kernels beat oneDNN's fixed cost."""
    monkeypatch.setattr(conv_fold, "MIN_ELEMENTS", MIN_ELEMENTS)
    graph, types = _block_graph(*VARIANTS["3x3_no_bias"])
    assert match_folds(torchsmith.prims.decompose(graph)) == []
    compiled = compile_graph(graph)
    assert _externs(compiled) == ["prims.convolution", "prims.convolution"]
    assert_matches_eager(compiled, graph, *_inputs(types), rtol=1e-4, atol=1e-4)
    assert conv_fold.large_image((8, 32, 56, 56)) and not conv_fold.large_image((2, 8, 9, 11))
    assert not conv_fold.large_image(("s0", 32, 56, 56))


def test_parameters_and_statistics_changed_between_calls_give_the_new_result():
    graph, types = _block_graph(*VARIANTS["3x3_no_bias"])
    compiled = compile_graph(graph)
    inputs = _inputs(types)
    first = compiled(*inputs)[0].clone()
    names = list(types)
    inputs[names.index("w1")].mul_(-1.5)  # in place: nothing may be folded from the values once
    inputs[names.index("var")].mul_(4.0)
    inputs[names.index("beta")].add_(0.25)
    second = compiled(*inputs)[0]
    torch.testing.assert_close(second, interpret(graph, *inputs)[0], rtol=1e-4, atol=1e-4)
    assert not torch.allclose(first, second)


def test_affine_ops_in_either_order_and_a_quotient_fold():
    def body(g, x, w, v, s):
        c = g.op("aten.convolution.default", x, w, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1)
        v4 = g.op("aten.view.default", v, [1, 4, 1, 1])
        s4 = g.op("aten.view.default", s, [1, 4, 1, 1])
        c = g.op("aten.add.Tensor", c, 1.0)
        c = g.op("aten.sub.Tensor", v4, c)  # v - (conv + 1): the scale changes sign
        c = g.op("aten.div.Tensor", c, s4)
        c = g.op("aten.mul.Tensor", s4, c)
        c = g.op("aten.sub.Tensor", c, 0.5)
        return g.op("aten.relu.default", c)

    types = {"x": ((2, 3, 6, 7), F32), "w": ((4, 3, 3, 3), F32), "v": ((4,), F32), "s": ((4,), F32)}
    graph = make_graph("affine", types, body)
    assert [len(f.steps) for f in match_folds(torchsmith.prims.decompose(graph))] == [5]
    compiled = compile_graph(graph)
    x, w, v, s = _inputs(types)
    assert_matches_eager(compiled, graph, x, w, v, s.abs() + 0.5, rtol=1e-4, atol=1e-4)


def test_a_chain_value_read_elsewhere_ends_the_fold():
    def body(g, x, w, m):
        c = g.op("aten.convolution.default", x, w, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1)
        shifted = g.op("aten.sub.Tensor", c, g.op("aten.view.default", m, [1, 4, 1, 1]))
        scaled = g.op("aten.mul.Tensor", shifted, 2.0)
        return g.op("aten.relu.default", scaled), shifted  # `shifted` is an output too

    types = {"x": ((2, 3, 6, 7), F32), "w": ((4, 3, 3, 3), F32), "m": ((4,), F32)}
    graph = make_graph("read_elsewhere", types, body)
    assert [len(f.steps) for f in match_folds(torchsmith.prims.decompose(graph))] == [1]
    assert_matches_eager(compile_graph(graph), graph, *_inputs(types), rtol=1e-4, atol=1e-4)


def test_training_batch_norm_is_not_folded():
    def body(g, x, w, gamma, beta):
        c = g.op("aten.convolution.default", x, w, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1)
        y = g.op("aten.native_batch_norm.default", c, gamma, beta, None, None, True, 0.1, 1e-5)[0]
        return g.op("aten.relu.default", y)

    types = {"x": ((2, 3, 6, 7), F32), "w": ((4, 3, 3, 3), F32), "gamma": ((4,), F32), "beta": ((4,), F32)}
    graph = make_graph("train_bn", types, body)
    assert match_folds(torchsmith.prims.decompose(graph)) == []
    assert_matches_eager(compile_graph(graph), graph, *_inputs(types), rtol=1e-4, atol=1e-4)


def test_transposed_and_float64_convolutions_are_not_fused_but_match():
    def body(g, x, w, wt, mean, var, gamma, beta):
        c = g.op("aten.convolution.default", x, w, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1)
        c = g.op("aten.relu.default", _bn(g, c, mean, var, gamma, beta))
        up = g.op("aten.convolution.default", c, wt, None, [2, 2], [1, 1], [1, 1], True, [1, 1], 1)
        return g.op("aten.relu.default", _bn(g, up, mean, var, gamma, beta))

    types = {
        "x": ((2, 3, 5, 6), F32), "w": ((4, 3, 3, 3), F32), "wt": ((4, 4, 3, 3), F32),
        "mean": ((4,), F32), "var": ((4,), F32), "gamma": ((4,), F32), "beta": ((4,), F32),
    }  # fmt: skip
    graph = make_graph("transposed", types, body)
    assert len(match_folds(torchsmith.prims.decompose(graph))) == 1  # the forward one only
    assert_matches_eager(compile_graph(graph), graph, *_inputs(types), rtol=1e-4, atol=1e-4)
    graph64, types64 = _block_graph(*VARIANTS["3x3_no_bias"], dtype=torch.float64)
    compiled = compile_graph(graph64)
    assert "extern.convolution_relu" not in _externs(compiled)  # folded, but NCHW and no oneDNN post-op
    assert_matches_eager(compiled, graph64, *_inputs(types64, torch.float64))


@needs_onednn
@pytest.mark.parametrize("where", ["x", "w1", "var", "x_inf"])
def test_nan_and_inf_propagate_as_in_eager(where):
    """oneDNN's ReLU post-op turns NaN into 0; the fused call runs only on finite operands."""
    graph, types = _block_graph(*VARIANTS["3x3_no_bias"])
    compiled = compile_graph(graph)
    assert "extern.convolution_relu" in _externs(compiled)
    names = list(types)
    inputs = _inputs(types)
    target = inputs[names.index(where.removesuffix("_inf"))]
    target.view(-1)[3] = float("inf") if where.endswith("_inf") else float("nan")
    if where == "var":
        target.view(-1)[3] = -1.0  # sqrt of a negative variance: a NaN channel
    (got,), (expected,) = compiled(*inputs), interpret(graph, *inputs)
    assert expected.isnan().any()
    assert torch.equal(got.isnan(), expected.isnan())
    torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-4, equal_nan=True)
    # A finite call afterwards takes the fused path again and is right.
    clean = _inputs(types)
    assert_matches_eager(compiled, graph, *clean, rtol=1e-4, atol=1e-4)


@needs_onednn
def test_oneDNN_disabled_at_run_time_takes_the_exact_path():
    graph, types = _block_graph(*VARIANTS["stride2_bias"])
    compiled = compile_graph(graph)
    inputs = _inputs(types)
    with torch.backends.mkldnn.flags(enabled=False):
        assert_matches_eager(compiled, graph, *inputs, rtol=1e-4, atol=1e-4)


def test_convolution_relu_kernel_matches_eager_and_marks_only_finite_results():
    x = torch.randn(2, 4, 7, 9).contiguous(memory_format=torch.channels_last)
    w = torch.randn(5, 4, 3, 3).contiguous(memory_format=torch.channels_last)
    b = torch.randn(5)
    args = ([2, 1], [1, 0], [1, 1], False, [0, 0], 1)
    expected = torch.relu(torch.ops.aten.convolution.default(x, w, b, *args))
    got = conv_relu.convolution_relu(x, w, b, *args)
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
    assert conv_relu._known_finite(got) == conv_relu.available(CPU)
    w[0, 0, 1, 1] = float("nan")
    expected = torch.relu(torch.ops.aten.convolution.default(x, w, b, *args))
    got = conv_relu.convolution_relu(x, w, b, *args)
    assert expected.isnan().any() and torch.equal(got.isnan(), expected.isnan())
    assert not conv_relu._known_finite(got)


# ---- through torchsmith.compile --------------------------------------------------------------------


class ConvBnRelu(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(3, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8), nn.ReLU(),
            nn.Conv2d(8, 8, 3, stride=2, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
            nn.Conv2d(8, 6, 3, padding=1, groups=2, bias=False), nn.BatchNorm2d(6), nn.ReLU(),
        )  # fmt: skip
        with torch.no_grad():
            for m in self.modules():
                if isinstance(m, nn.BatchNorm2d):
                    m.running_mean.uniform_(-0.5, 0.5)
                    m.running_var.uniform_(0.5, 2.0)
                    m.weight.uniform_(0.5, 1.5)
                    m.bias.uniform_(-0.5, 0.5)

    def forward(self, x):
        return self.body(x)


def _torchsmith():
    import torchsmith

    if not hasattr(torchsmith, "compile"):
        pytest.skip("needs the torchsmith package (compile_api)")
    return torchsmith


@pytest.mark.parametrize("memory_format", [torch.contiguous_format, torch.channels_last])
def test_compiled_model_eval_matches_eager_and_follows_new_weights(memory_format):
    torchsmith = _torchsmith()
    model = ConvBnRelu().eval()
    compiled = torchsmith.compile(model, options={"fallback": "raise"})
    x = torch.randn(2, 3, 13, 13).contiguous(memory_format=memory_format)
    with torch.no_grad():
        for _ in range(2):
            expected, got = model(x), compiled(x)
            scale = expected.abs().max()
            torch.testing.assert_close(got / scale, expected / scale, rtol=1e-5, atol=1e-5)
            assert got.stride() == expected.stride()
            model.body[0].weight.mul_(-0.5)  # the next call must see it (and the statistics below)
            model.body[4].running_var.mul_(3.0)


def test_compiled_model_training_step_matches_eager():
    torchsmith = _torchsmith()
    model, twin = ConvBnRelu().train(), ConvBnRelu().train()
    twin.load_state_dict(model.state_dict())
    compiled = torchsmith.compile(twin, options={"fallback": "raise"})
    x = torch.randn(2, 3, 9, 9)
    for fn in (model, compiled):
        fn(x).square().sum().backward()
    for (name, p), q in zip(model.named_parameters(), twin.parameters()):
        torch.testing.assert_close(q.grad, p.grad, rtol=1e-4, atol=1e-4, msg=name)
    for b, c in zip(model.buffers(), twin.buffers()):  # running statistics updated as eager does
        torch.testing.assert_close(c, b, rtol=1e-4, atol=1e-4)


needs_cuda = pytest.mark.skipif(
    not torch.cuda.is_available() or os.environ.get("TRITON_INTERPRET") == "1", reason="needs a CUDA GPU"
)


@needs_cuda
@pytest.mark.parametrize("where", [None, "x", "w1", "var", "x_inf"])
def test_gpu_runs_folded_batch_norm_and_relu_in_cudnn_convolutions(where):
    """On CUDA a float32 conv -> BN -> ReLU is one channels-last cuDNN call (bias and ReLU in its
    kernel); its NaN and infinities are eager's. The second block's ReLU is the graph output, which
    is copied into eager's NCHW layout anyway: no fold there."""
    from torchsmith.inductor.gpu_pipeline import compile_graph_triton

    graph, types = _block_graph(*VARIANTS["3x3_no_bias"], device="cuda")
    compiled = compile_graph_triton(graph)
    assert _externs(compiled) == ["extern.convolution_relu", "prims.convolution"]
    names = list(types)
    inputs = [x.cuda() for x in _inputs(types)]
    if where is not None:
        target = inputs[names.index(where.removesuffix("_inf"))]
        target.view(-1)[3] = float("inf") if where.endswith("_inf") else float("nan")
        if where == "var":
            target.view(-1)[3] = -1.0  # sqrt of a negative variance: a NaN channel
    with torch.backends.cudnn.flags(enabled=True, allow_tf32=False):
        (got,), (expected,) = compiled(*inputs), interpret(graph, *inputs)
    if where is not None:
        assert expected.isnan().any()
    assert torch.equal(got.isnan(), expected.isnan())
    torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-4, equal_nan=True)
