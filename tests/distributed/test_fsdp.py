"""Compiled models under FSDP2 (`fully_shard`, 2 processes, gloo): equal to eager FSDP.

Both orders: each block sharded and then the model compiled (the call of a sharded block breaks the
graph: its hooks gather and free parameters natively around its own compiled forward; no break per
parameter), and each block compiled and the compiled block sharded. Three SGD steps give eager
FSDP's losses, gradients and parameters; state_dict keys are eager's and eager's checkpoint loads.
GPT-2 and BERT run under aot_eager unless TORCHSMITH_DISTRIBUTED=full.
"""

import os
import pathlib
import sys

import pytest
import torch

if not torch.distributed.is_available():
    pytest.skip("torch.distributed is not available", allow_module_level=True)
pytest.importorskip("torch.distributed.fsdp")

sys.path.insert(0, str(pathlib.Path(__file__).parent))

from harness import run_many  # noqa: E402
from test_ddp import assert_close_to_eager  # noqa: E402

FULL = os.environ.get("TORCHSMITH_DISTRIBUTED") == "full"
HOWS = ("shard_then_compile", "compile_then_shard")


CASES = {"mlp-inductor": ("mlp", "inductor"), "deep_mlp-inductor": ("deep_mlp", "inductor"),
         "gpt2-aot_eager": ("gpt2", "aot_eager"), "bert-aot_eager": ("bert", "aot_eager")}
SLOW_CASES = {"gpt2-inductor": ("gpt2", "inductor"), "bert-inductor": ("bert", "inductor")}


@pytest.fixture(scope="module")
def ranks():
    """Every scenario of this file in one set of 2 processes (each start-up costs seconds)."""
    pytest.importorskip("transformers")
    cases = {**CASES, **(SLOW_CASES if FULL else {})}
    calls = {key: ("equal_to_eager", {"name": n, "backend": b}) for key, (n, b) in cases.items()}
    return run_many("fsdp_scenarios", calls)


def _case_ids():
    yield from CASES
    for key in SLOW_CASES:
        yield pytest.param(key, marks=pytest.mark.skipif(not FULL, reason="TORCHSMITH_DISTRIBUTED=full"))


@pytest.mark.parametrize("case", list(_case_ids()))
def test_fsdp_equals_eager(ranks, case):
    for rank, all_results in enumerate(ranks):
        result = all_results[case]
        for how in HOWS:
            got = result[how]
            what = f"rank {rank}, {how}, {case}"
            assert_close_to_eager(result["eager"], got, what)
            assert got["graphs"] and not got["eager_codes"], f"{what}: code ran eagerly: {got['eager_codes']}"
            # graphs break only at the calls of sharded blocks, never once per parameter
            assert all("FSDP" in reason for reason, _ in got["breaks"]), f"{what}: {got['breaks']}"
            # FSDP2 warns of a block output that is a view (its backward hook is lost when one is
            # written in place): compiled blocks return views where eager's do not, never
            views = [w for w in got["warnings"] if "returned a view" in w]
            assert views == [w for w in result["eager"]["warnings"] if "returned a view" in w], views
            assert len({site for _, site in got["breaks"]}) <= result["num_blocks"], got["breaks"]
            assert len(got["breaks"]) < result["num_params"], f"{what}: {got['breaks']}"
            assert got["keys"] == result["eager_keys"], f"{what}: state_dict keys differ from eager FSDP's"
            assert got["loaded_equal"], f"{what}: eager FSDP's state_dict did not load back equal"


def test_blocks_of_one_class_share_their_compiled_forward(ranks):
    """12 blocks sharded then the model compiled: each block's call breaks the graph and enters
    Block.forward alone; the blocks share its entries (one for the first block, whose input does
    not require grad and whose shapes differ, one for the other 11) and none runs eagerly."""
    for all_results in ranks:
        got = all_results["deep_mlp-inductor"]["shard_then_compile"]
        assert got["entries"]["Block.forward"] == 2, got["entries"]
        assert not got["eager_codes"]
