"""Torch functions returning tuples or lists of tensors, traced to ATen: every part is a real output,
and a traced (meta) tensor never reaches the caller."""

import warnings

import pytest
import torch

from torchsmith.autograd_aot import TraceError, aot_eager, trace
from torchsmith.autograd_aot.errors import AotAutogradError
from torchsmith.autograd_aot.runtime import _refuse_meta_output
from torchsmith.ir import GraphBuilder


def _compile(fn, **kwargs):
    """torchsmith.compile, or a skip where compile_api is not installed (the package's isolated run)."""
    import torchsmith

    if not hasattr(torchsmith, "compile"):
        pytest.skip("needs the torchsmith package (compile_api)")
    return torchsmith.compile(fn, **kwargs)


def test_one_element_tuple_result_is_a_real_output():
    b = GraphBuilder("gradient")
    x = b.input("x", "f32[7] cpu")
    graph = b.build(b.op("torch.gradient", x, out_type="f32[7] cpu"))
    x_value = torch.randn(7)
    (out,) = aot_eager(graph, [x_value])(x_value)
    assert not out.is_meta
    torch.testing.assert_close(out, torch.gradient(x_value)[0])


def test_several_tuple_results_are_real_outputs():
    b = GraphBuilder("parts")
    x = b.input("x", "f32[6, 4] cpu")
    a, c = b.op("torch.split", x, 3, out_type=["f32[3, 4] cpu", "f32[3, 4] cpu"])
    values, indices = b.op("torch.sort", x, 1, out_type=["f32[6, 4] cpu", "i64[6, 4] cpu"])
    graph = b.build(a, c, values, indices)
    x_value = torch.randn(6, 4)
    got = aot_eager(graph, [x_value])(x_value)
    for g, w in zip(got, (*torch.split(x_value, 3), *torch.sort(x_value, 1)), strict=True):
        assert not g.is_meta
        torch.testing.assert_close(g, w)


def test_a_result_count_mismatch_is_a_trace_error_naming_the_node():
    b = GraphBuilder("mismatch")
    x = b.input("x", "f32[6] cpu")
    a, c = b.op("torch.split", x, 2, out_type=["f32[2] cpu", "f32[2] cpu"])
    with pytest.raises(TraceError, match=r"torch\.split.*3 values for 2 outputs"):
        trace(b.build(a, c), [torch.randn(6)], training=False)


def test_a_meta_tensor_output_is_refused_for_real_inputs():
    class Program:
        forward_graph = GraphBuilder("g").build()

    with pytest.raises(AotAutogradError, match="meta tensor"):
        _refuse_meta_output(Program(), 0, [torch.randn(2)])
    _refuse_meta_output(Program(), 0, [torch.randn(2, device="meta")])  # meta in, meta out: eager's answer


@pytest.mark.parametrize("compiler", ["aot_eager", "inductor"])
def test_inference_batch_norm_statistics_are_sized_like_eager(compiler):
    # the CPU kernel returns empty saved statistics in inference; the meta kernel says (C,)
    def f(x, w, b, rm, rv):
        return torch.native_batch_norm(x, w, b, rm, rv, False, 0.1, 1e-5)

    args = (torch.randn(3, 2, 4), torch.randn(2), torch.randn(2), torch.randn(2), torch.rand(2) + 0.5)
    want = f(*args)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no fallback to eager
        got = _compile(f, backend=compiler)(*args)
    for g, w in zip(got, want, strict=True):
        assert g.shape == w.shape
        torch.testing.assert_close(g, w)


_NORMS = {
    # the functional form (after functionalization) of an op updating running statistics in place
    "legit_eval": lambda x, w, b, rm, rv: torch._native_batch_norm_legit(x, w, b, rm, rv, False, 0.1, 1e-5),
    "legit_train": lambda x, w, b, rm, rv: torch._native_batch_norm_legit(x, w, b, rm, rv, True, 0.1, 1e-5),
    "layer_norm": lambda x, w, b, rm, rv: torch.native_layer_norm(x, [4], None, None, 1e-5),
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("name", sorted(_NORMS))
@pytest.mark.parametrize("compiler", ["aot_eager", "inductor"])
def test_norm_statistics_have_the_devices_sizes_and_dtypes(compiler, name, dtype):
    # the CPU kernel returns empty saved statistics in inference, and bfloat16 statistics for
    # bfloat16 inputs and parameters; the meta kernel says (C,) and float32 (device_shapes.py)
    f = _NORMS[name]
    args = [torch.randn(3, 2, 4), torch.randn(2), torch.randn(2), torch.randn(2), torch.rand(2) + 0.5]
    args = [a.to(dtype) for a in args]
    want_args = [a.clone() for a in args]
    want = f(*want_args)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no fallback to eager
        got = _compile(f, backend=compiler)(*args)
    for g, w in zip((*got, *args), (*want, *want_args), strict=True):  # the running statistics too
        assert (g.shape, g.dtype) == (w.shape, w.dtype)
        torch.testing.assert_close(g, w)
