"""Vectorized math in generated C++ (libmvec's exp/tanh/erf/log, our inline exp, ...) against torch, in
units in the last place; and the loops that must vectorize do (read from GCC's own report)."""

import ctypes
import subprocess

import pytest
import torch

from torchsmith.inductor import compile_graph
from torchsmith.inductor.cpp.build import CXX_FLAGS, compiler, load_library
from torchsmith.inductor.cpp.prelude import CPP_PRELUDE
from torchsmith.inductor.cpp.vector_math import INLINE_MATH, libmvec_functions, link_flags
from torchsmith.inductor.testing import assert_matches_eager, make_graph

F32, F64 = torch.float32, torch.float64


def _ulps(got: torch.Tensor, expected: torch.Tensor) -> torch.Tensor:
    """|got - expected| in ulps of `got`'s dtype at the expected value (normal range only)."""
    eps = torch.finfo(got.dtype).eps
    tiny = torch.finfo(got.dtype).tiny
    scale = expected.abs().clamp_min(tiny)
    return (got.double() - expected).abs() / (eps * scale)


OPS = {  # op -> (aten op, input range, max ulps vs the float64 result)
    "exp": ("aten.exp.default", (-103.0, 88.7), 2),
    "log": ("aten.log.default", (1e-30, 1e30), 4),
    "tanh": ("aten.tanh.default", (-10.0, 10.0), 4),
    "erf": ("aten.erf.default", (-4.0, 4.0), 4),
    "sigmoid": ("aten.sigmoid.default", (-30.0, 30.0), 4),
    "expm1": ("aten.expm1.default", (-5.0, 5.0), 4),
    "sin": ("aten.sin.default", (-100.0, 100.0), 4),
}


@pytest.mark.parametrize("name", sorted(OPS))
def test_math_within_a_few_ulps(name):
    op, (lo, hi), max_ulps = OPS[name]
    graph = make_graph(name, {"x": ((200001,), F32)}, lambda b, x: b.op(op, x))
    x = torch.linspace(lo, hi, 200001) if name != "log" else torch.logspace(-30, 30, 200001)
    got = compile_graph(graph)(x)[0]
    exact = getattr(torch, name)(x.double())
    normal = exact.abs() > torch.finfo(F32).tiny
    assert _ulps(got, exact)[normal].max() <= max_ulps
    # And close to eager's float32 result, which has its own error of about an ulp.
    torch.testing.assert_close(got, getattr(torch, name)(x), rtol=5e-7 * max_ulps, atol=1e-30)


def test_exp_special_values():
    special = [float("nan"), float("inf"), float("-inf"), 88.72283935546875, 88.8, -87.3, -103.9, -104.0,
               0.0, -0.0, 1e-30, -100.0]  # fmt: skip
    x = torch.tensor(special)
    graph = make_graph("exp_special", {"x": ((len(special),), F32)}, lambda b, x: b.op("aten.exp.default", x))
    torch.testing.assert_close(compile_graph(graph)(x)[0], torch.exp(x), equal_nan=True, rtol=3e-7, atol=0)


INLINE_EXP_PROBE = """
extern "C" void exp_probe(const float* __restrict__ x, float* __restrict__ y, long n) {
  #pragma omp simd
  for (long i = 0; i < n; ++i) y[i] = ts::exp_f32(x[i]);
}
"""


def test_inline_exp_within_two_ulps():
    # Used where libmvec has no vector expf (then loops still vectorize): test it directly.
    library = load_library(CPP_PRELUDE + INLINE_MATH + INLINE_EXP_PROBE)
    x = torch.cat(
        [torch.linspace(-103.9, 88.7, 300001), torch.tensor([float("nan"), float("inf"), -float("inf")])]
    )
    y = torch.empty_like(x)
    library.exp_probe(ctypes.c_void_p(x.data_ptr()), ctypes.c_void_p(y.data_ptr()), ctypes.c_long(x.numel()))
    exact = torch.exp(x.double())
    normal = (exact.abs() > torch.finfo(F32).tiny) & torch.isfinite(exact)
    assert _ulps(y, exact)[normal].max() <= 2
    torch.testing.assert_close(y, torch.exp(x), equal_nan=True, rtol=3e-7, atol=3e-45)  # subnormals: 1 ulp


def _vectorized_lines(source: str, tmp_path) -> set[int]:
    """Source lines of the loops GCC reports as vectorized."""
    path = tmp_path / "kernels.cpp"
    path.write_text(source)
    command = [compiler(), *CXX_FLAGS, "-fopt-info-vec-optimized", str(path), "-o", str(tmp_path / "k.so")]
    done = subprocess.run(command + list(link_flags()), capture_output=True, text=True, check=True)
    return {int(line.split(":")[1]) for line in done.stderr.splitlines() if "loop vectorized" in line}


def test_gelu_softmax_layer_norm_loops_vectorize(tmp_path):
    def body(b, x, w, bias, mask):
        gelu = b.op("aten.gelu.default", x)
        gelu_tanh = b.op("aten.gelu.default", x, approximate="tanh")
        soft = b.op("aten._softmax.default", x, -1, False)
        norm = b.op("aten.native_layer_norm.default", x, [512], w, bias, 1e-5)[0]
        # A bool mask (loaded as bytes) and sin/cos of one value (which g++ would merge into scalar sincos).
        masked = b.op("aten._softmax.default", b.op("aten.where.ScalarOther", mask, x, -1e9), -1, False)
        rotary = b.op("aten.add.Tensor", b.op("aten.sin.default", x), b.op("aten.cos.default", x))
        return gelu, gelu_tanh, soft, norm, masked, rotary

    types = {
        "x": ((64, 512), F32),
        "w": ((512,), F32),
        "bias": ((512,), F32),
        "mask": ((64, 512), torch.bool),
    }
    graph = make_graph("vectorize", types, body)
    compiled = compile_graph(graph)
    inputs = torch.randn(64, 512), torch.randn(512), torch.randn(512), torch.rand(64, 512) > 0.3
    assert_matches_eager(compiled, graph, *inputs, rtol=1e-5, atol=1e-5)
    vectorized = _vectorized_lines(compiled.source, tmp_path)
    lines = compiled.source.splitlines()
    simd = [
        k + 1
        for k, line in enumerate(lines)
        if "#pragma omp" in line and "simd" in line and "declare" not in line
    ]
    # GCC reports a loop at its pragma's line (-O3) or at the first statement of its body (-O2),
    # which a register-lane reduction loop opens after its lane declarations and a block.
    missed = [lines[k - 1] for k in simd if not vectorized & set(range(k, k + 5))]
    assert simd and not missed, missed


def _kernel_sources(source: str) -> dict[str, str]:
    """Each generated kernel's code by its function name."""
    parts = source.split('extern "C" void ')[1:]
    return {part.split("(")[0]: part for part in parts if part.startswith("kernel")}


def test_softmax_reading_a_stored_padding_mask_uses_inline_exp():
    # transformers' padding mask: where(keep, 0, finfo.min) stored once, read by every head's softmax
    # (broadcast, so not inlined). The softmax kernel holds no large constant, yet half its scores
    # are ~-3.4e38: libmvec's expf would take its scalar path on each such lane.
    def body(b, scores, keep):
        mask = b.op("aten.where.Scalar", keep, 0.0, torch.finfo(F32).min)
        return b.op("aten._softmax.default", b.op("aten.add.Tensor", scores, mask), -1, False)

    # (a mask of more than cpp/prologue.py's MAX_PROLOGUE_ELEMENTS: stored by a kernel of its own)
    inputs = {"scores": ((2, 4, 67, 67), F32), "keep": ((2, 1, 67, 67), torch.bool)}
    graph = make_graph("padding", inputs, body)
    compiled = compile_graph(graph)
    scores, keep = torch.randn(2, 4, 67, 67), torch.ones(2, 1, 67, 67, dtype=torch.bool)
    keep[0, :, :, 19:] = False  # padding in the first sequence
    keep[1, :, 3] = False  # a fully masked row: every score at finfo.min, uniform as in eager
    assert_matches_eager(compiled, graph, scores, keep, rtol=1e-5, atol=1e-6)
    kernels = _kernel_sources(compiled.source)
    (softmax,) = [code for code in kernels.values() if "in_where" in code and "exp" in code]
    assert "ts::exp_f32(" in softmax and "expf(" not in softmax


def test_softmax_without_masks_keeps_libmvec_exp():
    # Nothing masked upstream: libmvec's vector expf (a little faster on ordinary values) stays.
    def body(b, x):
        return b.op("aten._softmax.default", x, -1, False)

    graph = make_graph("plain", {"x": ((8, 64), F32)}, body)
    compiled = compile_graph(graph)
    assert_matches_eager(compiled, graph, torch.randn(8, 64), rtol=1e-5, atol=1e-6)
    expected = "expf(" if "expf" in libmvec_functions() else "ts::exp_f32("
    assert expected in compiled.source


def test_mask_ends_at_a_library_call():
    # The masked softmax's probabilities go through a matmul; the exp after it (a SiLU-like layer)
    # sees finite sums, not masked values, and keeps libmvec's exp.
    def body(b, x, keep, w):
        mask = b.op("aten.where.Scalar", keep, 0.0, torch.finfo(F32).min)
        p = b.op("aten._softmax.default", b.op("aten.add.Tensor", x, mask), -1, False)
        return b.op("aten.exp.default", b.op("aten.mm.default", p, w))

    types = {"x": ((16, 64), F32), "keep": ((1, 64), torch.bool), "w": ((64, 32), F32)}
    graph = make_graph("mask_then_mm", types, body)
    compiled = compile_graph(graph)
    keep = torch.ones(1, 64, dtype=torch.bool)
    keep[0, 40:] = False
    weight = torch.randn(64, 32) / 8
    assert_matches_eager(compiled, graph, torch.randn(16, 64), keep, weight, rtol=1e-5, atol=1e-6)
    kernels = [code for code in _kernel_sources(compiled.source).values() if "exp" in code]
    # the mask is stored (in_where) or computed first in the softmax's kernel (l_where, a prologue)
    softmax = [code for code in kernels if "_where" in code]
    after = [code for code in kernels if "_where" not in code]
    assert len(softmax) == 1 and "ts::exp_f32(" in softmax[0]
    if "expf" in libmvec_functions():
        assert len(after) == 1 and "expf(" in after[0] and "ts::exp_f32(" not in after[0]
