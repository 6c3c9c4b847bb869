"""One-token decode steps of the Llama-style decoder of benchmarks/bench_decode.py (static KV caches
updated by `index_copy_` at a position tensor), compiled by torchsmith on CPU: each step's logits and
both caches of every layer equal eager's over several steps, one graph serves every position, and
nothing breaks the graph."""

import copy
import pathlib
import sys

import pytest
import torch

import torchsmith
from torchsmith.inductor.device_compilers import STATS

BENCHMARKS = pathlib.Path(__file__).resolve().parents[1] / "benchmarks"
if not (BENCHMARKS / "bench_decode.py").exists():
    pytest.skip("benchmarks/ is not beside tests/", allow_module_level=True)
sys.path.insert(0, str(BENCHMARKS))
from bench_decode import QUICK, build  # noqa: E402

PROMPT, STEPS = 12, 5


def _caches(model):
    return [t for block in model.blocks for t in (block.attention.k_cache, block.attention.v_cache)]


@pytest.fixture(scope="module")
def prefilled():
    """The decoder with a prompt prefilled eagerly, and the tokens of the steps after it."""
    model = build(QUICK, "cpu", torch.float32)
    tokens = torch.randint(0, QUICK.vocab, (1, PROMPT + STEPS), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        model(tokens[:, :PROMPT], torch.arange(PROMPT))
    return model, tokens


def test_decode_steps_match_eager_with_one_graph(prefilled):
    model, tokens = prefilled
    eager, compiled_model = copy.deepcopy(model), copy.deepcopy(model)
    step = torchsmith.compile(compiled_model)
    graphs = STATS.graphs
    with torch.no_grad():
        for i in range(PROMPT, PROMPT + STEPS):
            token, pos = tokens[:, i:i + 1], torch.tensor([i])
            expected = eager(token, pos)
            got = step(token, pos)
            torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-4)
            for mine, theirs in zip(_caches(compiled_model), _caches(eager), strict=True):
                torch.testing.assert_close(mine, theirs, rtol=1e-4, atol=1e-4)
            # the step wrote this position of every cache: no longer zero past the prompt
            assert all(c[:, :, i].abs().sum() > 0 for c in _caches(compiled_model))
    assert STATS.graphs - graphs == 1  # no recompile per position


def test_decode_step_has_no_graph_break(prefilled):
    model, tokens = prefilled
    with torch.no_grad():
        token, pos = tokens[:, PROMPT:PROMPT + 1], torch.tensor([PROMPT])
        report = torchsmith.explain(copy.deepcopy(model))(token, pos)
    assert len(report.graphs) == 1 and not report.break_reasons


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need a GPU")
def test_reduce_overhead_decode_replays_one_cuda_graph_writing_the_caches(monkeypatch):
    """mode="reduce-overhead" on CUDA: the first call runs as it is, the second records, and it and
    every later step replay one CUDA graph that reads weights and caches in place and writes the new cache
    entries into the caches themselves; logits and caches equal eager's at every step."""
    model = build(QUICK, "cuda", torch.float32)
    tokens = torch.randint(0, QUICK.vocab, (1, PROMPT + 8), generator=torch.Generator().manual_seed(0))
    tokens = tokens.cuda()
    with torch.no_grad():
        model(tokens[:, :PROMPT], torch.arange(PROMPT, device="cuda"))
    from torchsmith.inductor.runtime import cuda_graphs

    runners = []

    def recording_cudagraphify(*args, **kwargs):
        runners.append(cuda_graphs.CudaGraphRunner(*args, **kwargs))
        return runners[-1]

    monkeypatch.setattr(cuda_graphs, "cudagraphify", recording_cudagraphify)
    eager, compiled_model = copy.deepcopy(model), copy.deepcopy(model)
    step = torchsmith.compile(compiled_model, mode="reduce-overhead")
    caches = [c.data_ptr() for c in _caches(compiled_model)]
    with torch.no_grad():
        for i in range(PROMPT, PROMPT + 8):
            token, pos = tokens[:, i:i + 1], torch.tensor([i], device="cuda")
            torch.testing.assert_close(step(token, pos), eager(token, pos), rtol=1e-3, atol=1e-3)
            for mine, theirs in zip(_caches(compiled_model), _caches(eager), strict=True):
                torch.testing.assert_close(mine, theirs, rtol=1e-3, atol=1e-3)
    assert [c.data_ptr() for c in _caches(compiled_model)] == caches
    assert len(runners) == 1 and runners[0].recordings == 1 and runners[0].replays == 7
    assert len(runners[0].written_back) == 2 * QUICK.layers



def test_profile_script_profiles_a_decode_step(capsys, monkeypatch):
    """benchmarks/profile_workload.py's decode pseudo-workload (what a GPU session profiles) runs
    its quick form here: host time per call and the profiler's table for each system."""
    import profile_workload

    # the extensions as this process has them: the script would point TORCHSMITH_NATIVE_DIR at the
    # user's folder for every later test
    monkeypatch.setattr(profile_workload, "prepare_native", lambda: {})
    profile_workload.main(["decode", "--quick", "--systems", "eager", "torchsmith-default", "--calls", "2"])
    out = capsys.readouterr().out
    assert "=== decode / eager:" in out and "=== decode / torchsmith-default:" in out
    assert out.count("Self CPU time total") == 2
