"""CUDA flash attention as autograd_aot traces it for training: one extern call per kernel, its
sequence-length results sizes the graph knows, its RNG state outputs tensors of the graph."""

import torch

import torchsmith.prims  # noqa: F401 - registers the prims ops the pipeline lowers to
from torchsmith.inductor.gpu_pipeline import GPU_PIPELINE, GpuState
from torchsmith.inductor.loop_ir.program import ExternCall
from torchsmith.ir import parse_graph

QKV = "bf16[2, 4, 16, 8] cuda:0"
FORWARD = f"""
graph attention_forward(%q: {QKV}, %k: {QKV}, %v: {QKV}):
  %o: {QKV}, %lse: f32[2, 4, 16] cuda:0, %c1: none, %c2: none, %m1: sym(16), %m2: sym(16), \
%seed: u64[2] cuda:0, %off: u64[] cuda:0, %dbg: bf16[0] cuda:0 = \
aten._scaled_dot_product_flash_attention.default(%q, %k, %v)
  %y: {QKV} = prims.mul(%o, 2.0)
  return (%y, %o, %lse, %seed, %off)
"""

BACKWARD = f"""
graph attention_backward(%q: {QKV}, %k: {QKV}, %v: {QKV}, %o: {QKV}, %lse: f32[2, 4, 16] cuda:0, \
%seed: u64[2] cuda:0, %off: u64[] cuda:0, %g: {QKV}):
  %dq: {QKV}, %dk: {QKV}, %dv: {QKV} = aten._scaled_dot_product_flash_attention_backward.default(\
%g, %q, %k, %v, %o, %lse, None, None, 16, 16, 0.0, False, %seed, %off)
  return (%dq, %dk, %dv)
"""


def _program(text: str):
    state = GpuState(parse_graph(text), {}, groups=None)
    for run in GPU_PIPELINE.iterate(state):
        if run.step == "schedule":
            return run.state.program
    raise AssertionError("the pipeline has no schedule step")


def test_forward_is_one_extern_call_and_its_outputs():
    externs = [b for b in _program(FORWARD).buffers if isinstance(b, ExternCall)]
    kernels = [b.kernel for b in externs]
    assert kernels.count("aten._scaled_dot_product_flash_attention.default") == 1
    # the log-sum-exp and the RNG state the backward reads are outputs of that one call
    assert kernels.count("extern.output") == 3
    assert {b.params for b in externs if b.kernel == "extern.output"} == {(1,), (6,), (7,)}


def test_backward_reads_sizes_as_constants():
    buffers = _program(BACKWARD).buffers
    (call,) = [b for b in buffers if isinstance(b, ExternCall) and b.kernel.startswith("aten.")]
    assert call.kernel == "aten._scaled_dot_product_flash_attention_backward.default"
    assert [int(p) for p in call.params[8:10]] == [16, 16]
    assert call.layout.dtype == torch.bfloat16
