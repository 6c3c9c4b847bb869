"""A fast subset of the OpInfo sweep (opinfo_sweep.py): torch's own samples of common ops through
torchsmith.compile (inductor, CPU) against eager. No sample may give a wrong result; errors and
fallbacks are allowed here (the full sweep, benchmarks/bench_opinfo.py, counts them against
torch.compile's)."""

import pathlib
import sys

import pytest

pytest.importorskip("expecttest")  # torch's test utilities import it
sys.path.insert(0, str(pathlib.Path(__file__).parent))

import opinfo_sweep  # noqa: E402

FAST_OPS = (
    "abs", "add", "addmm", "amax", "argmax", "atan2", "bitwise_and", "bmm", "cat", "clamp", "cumsum",
    "div.floor_rounding", "div.trunc_rounding", "exp", "floor_divide", "fmod", "gather", "index_select",
    "log_softmax", "logsumexp", "masked_fill", "matmul", "max.reduction_with_dim", "mean", "mul",
    "nn.functional.gelu", "nn.functional.layer_norm", "nn.functional.relu", "nn.functional.silu", "pow",
    "remainder", "rsqrt", "sigmoid", "softmax", "sort", "std", "sum", "tanh", "topk", "transpose",
    "tril", "var_mean", "where",
)


def _full_name(op) -> str:
    return op.name if not op.variant_test_name else f"{op.name}.{op.variant_test_name}"


@pytest.fixture(scope="module")
def fast_ops():
    ops = {_full_name(op): op for op in opinfo_sweep.op_database()}
    return [ops[name] for name in FAST_OPS if name in ops]


def test_fast_subset_exists(fast_ops):
    assert len(fast_ops) >= len(FAST_OPS) - 3, "torch's OpInfo names changed: update FAST_OPS"


@pytest.mark.parametrize("name", FAST_OPS)
def test_no_wrong_result(name, fast_ops):
    op = next((op for op in fast_ops if _full_name(op) == name), None)
    if op is None:
        pytest.skip(f"{name} is not in this torch's OpInfo database")
    result = opinfo_sweep.sweep_op(opinfo_sweep.torchsmith_compiler(), op, samples_per_dtype=2)
    assert result.samples["wrong"] == 0, f"{name}: {result.first_problem}"
    assert sum(result.samples.values()) > 0, f"{name}: every sample was skipped"


# Ops that once fell back and now compile, one per mechanism: a class statement inside the op
# (masked.*), integer convolution and hardtanh, a tensor built from data on the input's device
# (unravel_index), an unsigned result dtype (hash_tensor), a conjugate transpose attribute (mH), an
# aten packet call (_softmax_backward_data), bfloat16 batch-norm statistics (nn.functional.batch_norm).
PASSING_OPS = (
    "masked.sum", "nn.functional.conv1d", "nn.functional.hardtanh", "unravel_index", "hash_tensor", "mH",
    "_softmax_backward_data", "nn.functional.batch_norm",
)


@pytest.mark.parametrize("name", PASSING_OPS)
def test_op_compiles_and_passes(name):
    op = next((op for op in opinfo_sweep.op_database() if _full_name(op) == name), None)
    if op is None:
        pytest.skip(f"{name} is not in this torch's OpInfo database")
    result = opinfo_sweep.sweep_op(opinfo_sweep.torchsmith_compiler(), op, samples_per_dtype=1)
    assert result.status == "pass", f"{name}: {result.status}: {result.first_problem}"
    assert sum(result.samples.values()) > 0, f"{name}: every sample was skipped"
