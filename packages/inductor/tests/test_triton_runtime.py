"""The Triton runtime around the kernels: launch-config tuning remembered on disk, input checks,
the matmul template with fused epilogues (max-autotune) and CUDA graph replay (reduce-overhead).
On a GPU everything runs on CUDA; here kernels run in Triton's interpreter and CUDA graphs only
check their refusals."""

import json
import logging
import os
import re

import pytest
import torch

if not torch.cuda.is_available():  # before triton's first import: see test_triton_kernels
    os.environ["TRITON_INTERPRET"] = "1"
pytest.importorskip("triton", reason="triton is not installed (pip install triton==3.6.0)")

from torchsmith.inductor.errors import LoweringError, RuntimeCallError  # noqa: E402
from torchsmith.inductor.gpu_pipeline import compile_graph_triton  # noqa: E402
from torchsmith.inductor.runtime import triton_launch as triton_runtime  # noqa: E402
from torchsmith.inductor.runtime.cuda_graphs import cudagraphify, skip_reason  # noqa: E402
from torchsmith.inductor.testing import assert_matches_eager, make_graph  # noqa: E402
from torchsmith.inductor.triton.matmul import ACTIVATIONS, eager_linear, matmul_epilogue, tuned_linear  # noqa: E402
from torchsmith.ir import TensorType  # noqa: E402

ON_GPU = torch.cuda.is_available()
DEVICE = "cuda" if ON_GPU else "cpu"
F32 = torch.float32


def t(*shape, dtype=F32):
    return TensorType.make(shape, dtype, device=DEVICE)


def randn(*shape, dtype=F32):
    return torch.randn(*shape, dtype=dtype, device=DEVICE)


def gelu_graph(n: int):
    return make_graph("gelu", {"x": t(n)}, lambda b, x: b.op("aten.gelu.default", x))


def test_tuned_config_is_remembered_on_disk(monkeypatch, private_cache_dir):
    monkeypatch.setattr(triton_runtime, "TUNE_IN_INTERPRETER", True)
    graph = gelu_graph(4096)  # big enough that the pointwise configs differ
    compiled = compile_graph_triton(graph)
    assert len(compiled.kernels[0].configs) > 1
    before = triton_runtime.STATS.benchmarked
    assert_matches_eager(compiled, graph, randn(4096), rtol=1e-5, atol=1e-5)
    assert triton_runtime.STATS.benchmarked == before + 1
    choices = json.loads((private_cache_dir / "inductor_triton" / "autotune.json").read_text())
    assert any(compiled.kernels[0].name in key and "[4096]" in key for key in choices)
    # A new process: nothing in memory, the choice comes from disk and nothing is timed again.
    monkeypatch.setattr(triton_runtime, "_CHOICES", {})
    hits = triton_runtime.STATS.disk_hits
    again = compile_graph_triton(graph)
    assert_matches_eager(again, graph, randn(4096), rtol=1e-5, atol=1e-5)
    assert triton_runtime.STATS.disk_hits == hits + 1
    assert triton_runtime.STATS.benchmarked == before + 1


def test_kernels_compile_ahead_with_every_config_until_tuned_then_the_chosen_one(monkeypatch, tmp_path):
    monkeypatch.setattr(triton_runtime, "TUNE_IN_INTERPRETER", True)
    monkeypatch.setenv("TORCHSMITH_CACHE_DIR", str(tmp_path))  # a new machine: nothing tuned yet
    monkeypatch.setattr(triton_runtime, "_CHOICES", {})
    # the thread path alone: with compile workers running (started by an earlier GPU test), the
    # workers' specialization pass calls compile_ahead once more per config
    monkeypatch.setattr(triton_runtime, "running", lambda: None)
    compiled = compile_graph_triton(gelu_graph(4096))
    launcher = compiled._steps[0][1]
    compiled_ahead = []
    monkeypatch.setattr(
        triton_runtime.TritonLauncher,
        "compile_ahead",
        lambda self, config, numels, tensors, symbols: compiled_ahead.append((config, tensors)),
    )
    work = [(launcher, [F32, randn(4096)], [], [4096])]
    triton_runtime.compile_in_parallel(work, torch.device(DEVICE))
    assert [c for c, _ in compiled_ahead] == list(launcher.spec.configs)
    assert compiled_ahead[0][1][0] is F32  # a buffer not computed yet stands in by its dtype
    launcher.config_for([4096], [torch.empty(4096, device=DEVICE), randn(4096)], [])  # tunes
    compiled_ahead.clear()
    triton_runtime.compile_in_parallel(work, torch.device(DEVICE))
    assert [c for c, _ in compiled_ahead] == [launcher.chosen[(4096,)]]


def test_inputs_unlike_the_compiled_ones_are_refused():
    graph = gelu_graph(64)
    compiled = compile_graph_triton(graph)
    with pytest.raises(RuntimeCallError, match="recompile"):
        compiled(randn(65))


def test_cpu_graph_without_the_interpreter_is_refused(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    graph = make_graph("cpu", {"x": TensorType.make((4,), F32)}, lambda b, x: b.op("aten.relu.default", x))
    with pytest.raises(LoweringError, match="CUDA tensors"):
        compile_graph_triton(graph)


@pytest.mark.parametrize("activation", ACTIVATIONS)
def test_matmul_template_fuses_its_epilogue(activation):
    a, b, bias, residual = randn(33, 20), randn(20, 17), randn(17), randn(33, 17)
    config = (16, 16, 16, 4, 1)
    got = matmul_epilogue(a, b, bias, activation, residual, config=config)
    torch.testing.assert_close(got, eager_linear(a, b, bias, activation, residual), rtol=1e-4, atol=1e-4)


def test_matmul_template_in_half_precision():
    # The interpreter's tl.dot misreads bfloat16 tiles (NumPy has no bfloat16): float16 there.
    dtype = torch.bfloat16 if ON_GPU else torch.float16
    a, b = randn(40, 24, dtype=dtype), randn(24, 18, dtype=dtype)
    got = matmul_epilogue(a, b, config=(16, 16, 16, 4, 1))
    assert got.dtype == dtype
    torch.testing.assert_close(got, eager_linear(a, b), rtol=2e-2, atol=5e-2)


def test_tuned_linear_matches_eager():
    a, b, bias = randn(64, 32), randn(32, 48), randn(48)
    torch.testing.assert_close(
        tuned_linear(a, b, bias, "relu"), eager_linear(a, b, bias, "relu"), rtol=1e-4, atol=1e-4
    )


def test_max_autotune_option_compiles_matmuls():
    def body(b, x, w):
        return b.op("aten.relu.default", b.op("aten.mm.default", x, w))

    graph = make_graph("mlp", {"x": t(16, 8), "w": t(8, 12)}, body)
    compiled = compile_graph_triton(graph, options={"max_autotune": True})
    assert_matches_eager(compiled, graph, randn(16, 8), randn(8, 12), rtol=1e-4, atol=1e-4)


def test_cuda_graphs_refuse_what_they_cannot_replay(caplog):
    assert "mutates inputs [0]" in skip_reason([torch.ones(2)], mutated_inputs=[0])
    reason = skip_reason([torch.ones(2)])
    assert "cpu tensor" in reason or "CUDA is not available" in reason
    runner = cudagraphify(lambda x: [x * 2])
    with caplog.at_level(logging.INFO, logger="torchsmith.inductor.cudagraphs"):
        out = runner(torch.ones(3))
    torch.testing.assert_close(out[0], torch.full((3,), 2.0))
    assert runner.recordings == 0 and runner.skipped
    assert "CUDA graphs skipped" in caplog.text


@pytest.mark.skipif(not ON_GPU, reason="CUDA graphs need a GPU")
def test_cuda_graph_replays_and_never_overwrites_returned_outputs():
    def body(b, x, y):
        return b.op("aten.sum.dim_IntList", b.op("aten.mul.Tensor", x, y), [1])

    graph = make_graph("replay", {"x": t(64, 128), "y": t(64, 128)}, body)
    compiled = compile_graph_triton(graph, options={"triton.cudagraphs": True})
    x1, y1, x2, y2 = randn(64, 128), randn(64, 128), randn(64, 128), randn(64, 128)
    compiled(x1, y1)  # the first call of a signature runs without recording
    first = compiled(x2, y2)[0]
    kept = first.clone()
    second = compiled(x1, y1)[0]
    assert compiled.recordings == 1 and compiled.replays == 2
    torch.testing.assert_close(first, kept)  # the second replay did not write into the first result
    torch.testing.assert_close(second, (x1 * y1).sum(1), rtol=1e-4, atol=1e-4)


@pytest.mark.skipif(not ON_GPU, reason="CUDA graphs need a GPU")
def test_cuda_graph_reads_inputs_at_a_stable_address_in_place():
    """A weight passed at one address is read where it lies (a change to it shows in the next
    replay without a copy); an input that moves is copied; a weight that moves is recorded again."""
    weight, other_weight = randn(8, 8), randn(8, 8)
    runner = cudagraphify(lambda x, w: [x @ w])
    first_x = randn(4, 8)  # kept alive: the next input must not reuse its memory
    runner(first_x, weight)
    x = randn(4, 8)
    torch.testing.assert_close(runner(x, weight)[0], x @ weight)
    assert runner.recordings == 1
    (recording,) = runner.signatures[0].recordings
    assert [k for k, _ in recording.in_place] == [1] and [k for k, _ in recording.copied] == [0]
    weight.mul_(2)  # read in place: the replay sees the new values
    x = randn(4, 8)
    torch.testing.assert_close(runner(x, weight)[0], x @ weight)
    torch.testing.assert_close(runner(x, other_weight)[0], x @ other_weight)
    assert runner.recordings == 2 and runner.replays == 3


@pytest.mark.skipif(not ON_GPU, reason="CUDA graphs need a GPU")
def test_cuda_graph_writes_back_into_the_input_itself():
    """`written_back={1: 0}`: output 1 is the new value of input 0, written into it by the replay;
    the call returns the input itself at that position, as a functionalized in-place update wants."""
    cache = torch.zeros(4, 8, device=DEVICE)

    def step(cache, row, pos):
        return [row.sum(), cache.index_copy(0, pos, row)]

    runner = cudagraphify(step, written_back={1: 0})
    for i in range(4):
        row, pos = randn(1, 8), torch.tensor([i], device=DEVICE)
        expected = cache.index_copy(0, pos, row)
        total, new = runner(cache, row, pos)
        if new is not cache:  # the first call runs as it is: the caller writes back
            cache.copy_(new)
        torch.testing.assert_close(cache, expected)
        torch.testing.assert_close(total, row.sum())
    assert runner.recordings == 1 and runner.replays == 3


def test_lent_outputs_count_as_held_while_any_alias_of_them_lives():
    """The bookkeeping behind lending, on any device: an output is lendable unless it is an input's
    memory, and counts as held while a tensor made from it (an alias, a view) is alive."""
    from torchsmith.inductor.runtime.cuda_graphs import _LENT_STORAGES, CudaGraphRunner, _Recording

    runner = CudaGraphRunner(lambda x: [x])
    runner.lend_outputs([0, 1, 2])
    x = torch.ones(4)
    outputs = [torch.zeros(4), x, torch.zeros(2, 2)]  # output 1 is the input itself
    recording = _Recording(None, (), (), outputs, runner._lendable([x], outputs))
    assert [j for j, _ in recording.lent] == [0, 2] and not recording.lent_out_held()
    lent = {outputs[j].untyped_storage().data_ptr() for j in (0, 2)}
    assert lent <= _LENT_STORAGES
    alias = outputs[0].detach()
    assert recording.lent_out_held()
    del alias
    row = outputs[2][0]  # a view keeps the memory too
    assert recording.lent_out_held()
    del row
    assert not recording.lent_out_held()


@pytest.mark.skipif(not ON_GPU, reason="CUDA graphs need a GPU")
def test_cuda_graph_lends_outputs_while_no_earlier_one_is_held():
    """Lent outputs are the recording's memory itself; a call made while an earlier lent result is
    still held runs without replaying (into fresh memory), so that result keeps its values."""
    runner = cudagraphify(lambda x: [x.sum(), x * 2])
    runner.lend_outputs([1])
    runner(randn(64))  # the first call of a signature runs without recording
    x = randn(64)  # one input tensor throughout, so that one recording serves every call
    first = x.clone()
    total, doubled = runner(x)
    assert runner.recordings == 1 and runner.replays == 1
    (recording,) = runner.signatures[0].recordings
    assert doubled.data_ptr() == recording.outputs[1].data_ptr()  # no copy
    second = x.copy_(randn(64)).clone()
    _, held = runner(x)  # `doubled` is still held: no replay
    assert runner.replays == 1 and held.data_ptr() != doubled.data_ptr()
    torch.testing.assert_close(doubled, first * 2)
    torch.testing.assert_close(held, second * 2)
    del doubled, held
    third = x.copy_(randn(64)).clone()
    total, doubled = runner(x)  # nothing held: replays again
    assert runner.recordings == 1 and runner.replays == 2
    torch.testing.assert_close(doubled, third * 2)
    torch.testing.assert_close(total, third.sum())


@pytest.mark.skipif(not ON_GPU, reason="CUDA graphs need a GPU")
def test_reduce_overhead_training_lends_saved_values_and_accumulates_gradients():
    """A training step under mode="reduce-overhead": the forward's saved activations are lent, not
    copied, and two forwards before their backwards (gradient accumulation) give eager's gradients."""
    import copy

    import torchsmith
    from torchsmith.inductor_backend import inductor_backend

    functions = []

    def backend(graph, example_inputs, options=None):
        functions.append(inductor_backend(graph, example_inputs, options))
        return functions[-1]

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.GELU(), torch.nn.Linear(64, 8)).to(DEVICE)
    reference = copy.deepcopy(model)
    compiled = torchsmith.compile(model, backend=backend, options={"triton.cudagraphs": True})
    batches = [randn(16, 32) for _ in range(8)]
    for step in range(3):  # plain steps: forward, backward
        for m, f in ((model, compiled), (reference, reference)):
            m.zero_grad(set_to_none=True)
            f(batches[step]).square().mean().backward()
        for p, q in zip(model.parameters(), reference.parameters()):
            torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-5)
    for m, f in ((model, compiled), (reference, reference)):  # accumulation: two forwards, then backwards
        m.zero_grad(set_to_none=True)
        first, second = f(batches[4]).square().mean(), f(batches[5]).abs().mean()
        second.backward()
        first.backward()
    for p, q in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-5)
    programs = [p for f in functions for p in f.programs.values() if p.is_training]
    assert programs and all(p.forward_fn.lent and p.forward_fn.replays for p in programs)
    for program in programs:  # the backward reads the lent activations where they lie
        forward = program.forward_fn.signatures[0].recordings[0]
        backward = program._backward_fn.signatures[0].recordings[0]
        read_in_place = {address for _, address in backward.in_place}
        assert all(forward.outputs[j].data_ptr() in read_in_place for j, _ in forward.lent)


def test_matmul_consumer_runs_as_the_template_epilogue(monkeypatch):
    from torchsmith.inductor.triton import mm_epilogue as triton_mm_epilogue

    def body(b, x, w, bias, r):
        return b.op("aten.add.Tensor", b.op("aten.gelu.default", b.op("aten.addmm.default", bias, x, w)), r)

    graph = make_graph("mlp", {"x": t(33, 20), "w": t(20, 17), "bias": t(17), "r": t(33, 17)}, body)
    compiled = compile_graph_triton(graph, options={"max_autotune": True})
    assert len(compiled.epilogues) == 1
    fused = next(iter(compiled.epilogues.values()))
    assert "tl.erf" in fused.template and "product" in fused.template
    inputs = randn(33, 20), randn(20, 17), randn(17), randn(33, 17)
    if not ON_GPU:  # nothing is timed in the interpreter: force the fused kernel, with a small tile
        monkeypatch.setattr(triton_mm_epilogue, "ALWAYS_FUSE", True)
        monkeypatch.setattr(triton_mm_epilogue, "CONFIGS", ((16, 16, 16, 4, 1),))
    assert_matches_eager(compiled, graph, *inputs, rtol=1e-4, atol=1e-4)
    assert fused.choice is not None
    if not ON_GPU:
        assert fused.choice == 0


def _matmul_conv_views(b, x, w, image, kernel):
    """A matmul reading a transposed weight, a convolution, kernels and an output that is a view."""
    product = b.op("aten.mm.default", x, b.op("aten.t.default", w))
    conv = b.op("aten.convolution.default", image, kernel, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1)
    relu = b.op("aten.relu.default", product)
    return relu, b.op("aten.t.default", product), b.op("aten.relu.default", conv)


_MATMUL_CONV_TYPES = {"x": t(16, 8), "w": t(12, 8), "image": t(2, 3, 8, 8), "kernel": t(4, 3, 3, 3)}


def test_static_graph_calls_after_the_first_run_precomputed_steps(monkeypatch):
    """A matmul reading a transposed view, a convolution (an extern with parameters), a kernel and
    an output that is a view: the second call takes the static steps (no `_bind`) and agrees."""

    graph = make_graph("static_steps", _MATMUL_CONV_TYPES, _matmul_conv_views)
    compiled = compile_graph_triton(graph)
    inputs = [randn(16, 8), randn(12, 8), randn(2, 3, 8, 8), randn(4, 3, 3, 3)]
    assert_matches_eager(compiled, graph, *inputs, rtol=1e-4, atol=1e-4)
    monkeypatch.setattr(type(compiled), "_bind", lambda self, inputs: pytest.fail("took the general path"))
    assert_matches_eager(compiled, graph, *inputs, rtol=1e-4, atol=1e-4)
    other = [x.clone() for x in inputs]
    assert_matches_eager(compiled, graph, *other, rtol=1e-4, atol=1e-4)
    assert compiled(*other)[1].stride() == (1, 12)


def test_static_graph_runs_as_one_generated_function_after_its_first_static_call():
    """From the third call a static graph runs its steps as one generated function (input checks,
    kernel launches and matmuls written out, a transposed weight's view made once per storage),
    with the same results: after the weight's storage is swapped, and with a profiler's hook on
    launches (then the closures run, so Triton sees each launch); inputs unlike the compiled ones
    are still refused."""
    from triton import knobs

    graph = make_graph("straight", _MATMUL_CONV_TYPES, _matmul_conv_views)
    compiled = compile_graph_triton(graph)
    weight = torch.nn.Parameter(randn(12, 8), requires_grad=False)
    inputs = [randn(16, 8), weight, randn(2, 3, 8, 8), randn(4, 3, 3, 3)]
    for _ in range(2):
        assert_matches_eager(compiled, graph, *inputs, rtol=1e-4, atol=1e-4)
    straight = compiled._straight
    assert straight is not None and "x1.as_strided" not in straight.source  # the weight's view is kept
    # the convolution (a library call with constants) is written out too: no step runs as a closure
    assert "e" not in {name.rstrip("0123456789") for name in re.findall(r"(\w+)\(T\)", straight.source)}
    calls = []
    compiled._straight = lambda inputs: calls.append(1) or straight(inputs)
    assert_matches_eager(compiled, graph, *inputs, rtol=1e-4, atol=1e-4)
    weight.data = randn(12, 8)  # same object, new storage: the kept view must not be read
    assert_matches_eager(compiled, graph, *inputs, rtol=1e-4, atol=1e-4)
    assert compiled(*inputs)[1].stride() == (1, 12)
    assert len(calls) == 3
    # it checks the inputs itself: others than compiled take the general path, which refuses them
    with pytest.raises(RuntimeCallError, match="recompile"):
        compiled(randn(16, 9), *inputs[1:])
    with pytest.raises(RuntimeCallError, match="recompile"):
        compiled(inputs[0].to(torch.float64), *inputs[1:])
    seen = []
    previous = knobs.runtime.launch_enter_hook
    knobs.runtime.launch_enter_hook = lambda metadata: seen.append(metadata)
    try:
        assert straight(inputs) is None
        assert_matches_eager(compiled, graph, *inputs, rtol=1e-4, atol=1e-4)
    finally:
        knobs.runtime.launch_enter_hook = previous


def test_run_to_run_differences_of_atomic_sums_keep_the_straight_line_form():
    """Kernels that add atomically (split reductions, attention backwards) sum in another order
    each run: the check of the straight-line form allows that, and nothing more."""
    from torchsmith.inductor.runtime.triton_graph import _same_tensor

    torch.manual_seed(0)
    x = torch.randn(64, 32) * 100
    x[0, 0], x[1, 1], x[2, 2] = float("nan"), float("inf"), -float("inf")
    noisy = x * (1 + 1e-6 * torch.randn_like(x))
    assert _same_tensor(noisy, x)
    assert _same_tensor(x.bfloat16() + 0.5, x.bfloat16())  # under 2e-2 of the largest (about 400)
    assert not _same_tensor(x * 1.01, x)
    assert not _same_tensor(torch.roll(x, 1, 0), x)  # a wrong buffer or offset
    swapped = x.clone()
    swapped[1, 1] = -float("inf")
    assert not _same_tensor(swapped, x)
    assert not _same_tensor(x.t().contiguous().t(), x)  # same values, other layout
    assert not _same_tensor(torch.arange(6) + 1, torch.arange(6))


def test_a_straight_line_form_that_computes_other_values_is_not_used(monkeypatch, caplog):
    graph = gelu_graph(64)
    compiled = compile_graph_triton(graph)
    x = randn(64)
    wrong = lambda inputs: [torch.zeros(64, device=DEVICE)]  # noqa: E731
    monkeypatch.setattr(type(compiled), "_straight_line", lambda self, inputs=(): wrong)
    with caplog.at_level(logging.WARNING, logger="torchsmith.inductor.triton_runtime"):
        for _ in range(3):
            assert_matches_eager(compiled, graph, x, rtol=1e-4, atol=1e-4)
    assert compiled._straight is False
    assert "computed other values" in caplog.text


def test_a_multi_output_library_call_keeps_the_straight_line_form(caplog):
    """A library call with several results (topk: values, indices) reads its second result through
    an `extern.output` step; the generated function runs it as a closure, and is still made."""

    def body(b, x):
        values, indices = b.op("aten.topk.default", b.op("aten.mul.Tensor", x, 2.0), 3)
        return b.op("aten.relu.default", values), b.op("aten.add.Tensor", indices, 1)

    graph = make_graph("topk", {"x": t(4, 9)}, body)
    compiled = compile_graph_triton(graph)
    x = randn(4, 9)
    with caplog.at_level(logging.WARNING, logger="torchsmith.inductor.triton_runtime"):
        for _ in range(3):
            assert_matches_eager(compiled, graph, x, rtol=1e-5, atol=1e-5)
    assert compiled._straight, caplog.text
