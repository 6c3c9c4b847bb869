"""Compiled models under DistributedDataParallel (2 processes, gloo): equal to eager DDP, overlapped.

`DDP(torchsmith.compile(model))` and `torchsmith.compile(DDP(model))` train three SGD steps with the
losses, gradients and parameters of eager DDP, with each graph cut at DDP's gradient buckets; the
all-reduce of a bucket starts before the backward of the pieces in front of it runs; state_dict keys
are eager's. The inductor runs the MLP here; GPT-2 and BERT use aot_eager (the same cut graphs and
autograd.Functions, without C++ builds) unless TORCHSMITH_DISTRIBUTED=full.
"""

import copy
import os
import pathlib
import sys

import pytest
import torch

if not torch.distributed.is_available():
    pytest.skip("torch.distributed is not available", allow_module_level=True)

sys.path.insert(0, str(pathlib.Path(__file__).parent))

from harness import run_many  # noqa: E402

FULL = os.environ.get("TORCHSMITH_DISTRIBUTED") == "full"
RUNS = (("ddp_of_compiled", True), ("compiled_ddp", True))


def assert_close_to_eager(eager: dict, got: dict, what: str):
    for step, (a, b) in enumerate(zip(eager["losses"], got["losses"])):
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-6, msg=f"{what}: loss of step {step}")
    for step, (ga, gb) in enumerate(zip(eager["grads"], got["grads"])):
        for i, (a, b) in enumerate(zip(ga, gb)):
            torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-6, msg=f"{what}: grad {i} of step {step}")
    for i, (a, b) in enumerate(zip(eager["params"], got["params"])):
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-6, msg=f"{what}: final parameter {i}")


# (model, backend, runs); the MLP also runs unsplit (ddp.split_at_buckets=False)
CASES = {
    "mlp-inductor": ("mlp", "inductor", RUNS + (("ddp_of_compiled", False), ("compiled_ddp", False))),
    "gpt2-aot_eager": ("gpt2", "aot_eager", RUNS),
    "bert-aot_eager": ("bert", "aot_eager", RUNS),
    # DDP never rebuilds these buckets: the cut follows the reducer's buckets as built
    "mlp-find_unused": ("mlp", "aot_eager", RUNS),
    # the first steps pass parameters through views (the gradient order): DDP's other modes
    "mlp-static_graph": ("mlp", "aot_eager", RUNS),
    "gpt2-bucket_view": ("gpt2", "aot_eager", RUNS),
}
DDP_KWARGS = {"mlp-find_unused": {"find_unused_parameters": True}, "mlp-static_graph": {"static_graph": True},
              "gpt2-bucket_view": {"gradient_as_bucket_view": True}}
SLOW_CASES = {"gpt2-inductor": ("gpt2", "inductor", RUNS), "bert-inductor": ("bert", "inductor", RUNS)}
OVERLAP = ["mlp"] + (["gpt2"] if FULL else [])


@pytest.fixture(scope="module")
def ranks():
    """Every scenario of this file in one set of 2 processes (each start-up costs seconds)."""
    pytest.importorskip("transformers")
    cases = {**CASES, **(SLOW_CASES if FULL else {})}
    calls = {key: ("equal_to_eager", dict(name=n, backend=b, runs=r, **DDP_KWARGS.get(key, {})))
             for key, (n, b, r) in cases.items()}
    calls.update({f"overlap-{name}": ("allreduce_order", {"name": name}) for name in OVERLAP})
    return run_many("ddp_scenarios", calls)


def _case_ids():
    yield from CASES
    for key in SLOW_CASES:
        yield pytest.param(key, marks=pytest.mark.skipif(not FULL, reason="TORCHSMITH_DISTRIBUTED=full"))


@pytest.mark.parametrize("case", list(_case_ids()))
def test_ddp_equals_eager(ranks, case):
    name, _, runs = {**CASES, **SLOW_CASES}[case]
    for rank, all_results in enumerate(ranks):
        result = all_results[case]
        for how, split in runs:
            got = result[f"{how}/{split}"]
            what = f"rank {rank}, {how}, {case}, split={split}"
            assert_close_to_eager(result["eager"], got, what)
            if split:
                assert got["pieces"] and max(got["pieces"]) > 1, f"{what}: no graph was cut at the buckets"
            else:
                assert got["pieces"] == [], f"{what}: ddp.split_at_buckets=False still cut the graph"
            assert got["keys"] == result["eager_keys"], f"{what}: state_dict keys differ from eager DDP's"
            assert got["loaded_equal"], f"{what}: eager DDP's checkpoint did not load back equal"
    # the ranks' parameters stay equal: the gradients were all-reduced
    first, second = (r[case]["ddp_of_compiled/True"]["params"] for r in ranks[:2])
    for a, b in zip(first, second):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


def _positions(events, kind):
    return [i for i, (k, _) in enumerate(events) if k == kind]


@pytest.mark.parametrize("name", [
    "mlp", pytest.param("gpt2", marks=pytest.mark.skipif(not FULL, reason="TORCHSMITH_DISTRIBUTED=full")),
])
def test_allreduce_starts_before_the_last_backward_piece(ranks, name):
    result = ranks[0][f"overlap-{name}"]
    split, whole = result[True], result[False]
    backwards, allreduces = _positions(split["events"], "backward"), _positions(split["events"], "allreduce")
    assert len(backwards) > 1 and allreduces, split["events"]
    assert allreduces[0] < backwards[-1], f"no all-reduce started before the last backward piece: {split}"
    # DDP rebuilt the buckets eager DDP rebuilds, each completed by one piece's backward
    assert split["buckets"] == result["eager"]["buckets"], (split["buckets"], result["eager"]["buckets"])
    # every bucket's all-reduce is launched, in bucket order
    assert [split["events"][i][1] for i in allreduces] == list(range(len(split["buckets"])))
    # with the cut planned from the buckets DDP rebuilt after the first step, every backward piece
    # but the last completes a bucket: an all-reduce launches before the next piece runs
    for a, b in zip(backwards, backwards[1:]):
        assert any(a < i < b for i in allreduces), f"backward pieces {a} and {b} with no all-reduce between"
    # unsplit: one backward, and every all-reduce after it
    backwards, allreduces = _positions(whole["events"], "backward"), _positions(whole["events"], "allreduce")
    assert len(backwards) == 1 and allreduces and min(allreduces) > backwards[0], whole["events"]


def test_ddp_over_one_rank_compiles_graphs_whole(tmp_path):
    """One rank's all-reduces move nothing: no cut, whose boundaries would only cost time."""
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    import torchsmith
    from torchsmith.ir.events import observe

    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        torch.manual_seed(0)
        model = torch.nn.Sequential(*[torch.nn.Linear(16, 16) for _ in range(4)])
        eager = DDP(copy.deepcopy(model), bucket_cap_mb=0.0005)
        compiled = torchsmith.compile(DDP(model, bucket_cap_mb=0.0005), backend="aot_eager")
        x = torch.randn(8, 16)
        with observe() as events:
            for _ in range(2):
                compiled(x).square().sum().backward()
        for _ in range(2):
            eager(x).square().sum().backward()
        assert [e for e in events if e.kind == "ddp_split"] == []
        for a, b in zip(eager.parameters(), model.parameters()):
            torch.testing.assert_close(b.grad, a.grad)
    finally:
        dist.destroy_process_group()
