"""Integer division and modulo by zero in generated C++ raise eager's RuntimeError("ZeroDivisionError")
from the compiled call instead of killing the process (x86's idiv traps with SIGFPE; GCC compiles a
constant zero divisor to an illegal instruction or folds it to a silently wrong 0).

Every case runs in a child process, so a crash is a failing exit code naming the last case started,
not a dead pytest."""

import json
import os
import subprocess
import sys
import textwrap

import pytest

OPS = ("floordiv", "mod", "fmod", "remainder", "div_trunc", "div_floor")
DTYPES = ("int32", "int64", "uint8")

CHILD = textwrap.dedent(
    """
    import json, sys
    import torch
    import torchsmith

    OPS = {
        "floordiv": lambda a, b: a // b,
        "mod": lambda a, b: a % b,
        "fmod": lambda a, b: torch.fmod(a, b),
        "remainder": lambda a, b: torch.remainder(a, b),
        "div_trunc": lambda a, b: torch.div(a, b, rounding_mode="trunc"),
        "div_floor": lambda a, b: torch.div(a, b, rounding_mode="floor"),
    }

    def outcome(fn, *args):
        try:
            return ["ok", fn(*args).tolist()]
        except RuntimeError as error:
            return ["raised", str(error).splitlines()[0]]

    dtype = getattr(torch, sys.argv[1])
    signed = dtype.is_signed
    a = torch.tensor([7, -1, 0, -5, 9, -100, 3, -8] if signed else [7, 1, 0, 5, 9, 100, 3, 8], dtype=dtype)
    b_zero = torch.tensor([2, 3, 0, 1, 4, 7, 5, 3] if not signed else [2, -3, 0, 1, -4, 7, 5, 3], dtype=dtype)
    b_nonzero = b_zero.clone()
    b_nonzero[2] = 6
    for name, op in OPS.items():
        cases = {
            "constant zero": (lambda a, op=op: op(a, 0), (a,)),
            "runtime zero": (op, (a, b_zero)),
            "no zero": (op, (a, b_nonzero)),
            "constant divisor": (lambda a, op=op: op(a, 3), (a,)),
        }
        for kind, (fn, args) in cases.items():
            print(json.dumps(["start", name, kind]), flush=True)
            expected = outcome(fn, *args)
            got = outcome(torchsmith.compile(fn), *args)
            again = outcome(torchsmith.compile(fn), *args)  # the flag is cleared by the first call's check
            print(json.dumps(["done", name, kind, expected, got, again]), flush=True)
    """
)


@pytest.mark.parametrize("dtype", DTYPES)
def test_integer_division_by_zero_raises_like_eager(dtype, tmp_path):
    env = dict(os.environ, TORCHSMITH_CACHE_DIR=str(tmp_path))
    done = subprocess.run(
        [sys.executable, "-c", CHILD, dtype], env=env, capture_output=True, text=True, timeout=900
    )
    records = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("[")]
    started = [r for r in records if r[0] == "start"]
    assert done.returncode == 0, (
        f"child died with exit code {done.returncode} during {started[-1][1:] if started else '?'}:\n"
        f"{done.stderr[-3000:]}"
    )
    finished = [r for r in records if r[0] == "done"]
    assert len(finished) == len(OPS) * 4
    for _, name, kind, expected, got, again in finished:
        assert got == expected, f"{name} {dtype} ({kind}): eager {expected}, compiled {got}"
        assert again == expected, f"{name} {dtype} ({kind}), second call: eager {expected}, compiled {again}"
        if "zero" in kind and kind != "no zero":
            assert expected == ["raised", "ZeroDivisionError"], (name, kind, expected)


EDGE_CHILD = textwrap.dedent(
    """
    import json
    import torch
    import torchsmith

    results = {}
    # An empty tensor divided by zero: eager divides nothing and raises nothing.
    empty = torch.empty(0, 4, dtype=torch.int32)
    results["empty"] = torchsmith.compile(lambda a: a // 0)(empty).shape == (0, 4)
    # The most negative int divided by -1: eager's own kernel traps on it (SIGFPE); the compiled
    # kernel must not, and its modulo is 0 as eager's is.
    low = torch.tensor([-2**31, 5], dtype=torch.int32)
    minus_one = torch.tensor([-1, -1], dtype=torch.int32)
    results["mod_min"] = torchsmith.compile(lambda a, b: a % b)(low, minus_one).tolist() == [0, 0]
    results["fmod_min"] = torchsmith.compile(lambda a, b: torch.fmod(a, b))(low, minus_one).tolist() == [0, 0]
    results["div_min"] = torchsmith.compile(lambda a, b: torch.div(a, b, rounding_mode="trunc"))(
        low, minus_one).tolist() == [-2**31, -5]
    # A zero divisor inside a larger fused kernel, and an error that leaves later calls clean.
    def fused(a, b):
        return ((a * 3 + 1) // b).sum(dim=1) + (a % (b + 1)).amax(dim=1)

    x = torch.randint(-50, 50, (64, 33), dtype=torch.int64)
    y = torch.randint(1, 9, (64, 33), dtype=torch.int64)
    compiled = torchsmith.compile(fused)
    results["fused_ok"] = torch.equal(compiled(x, y), fused(x, y))
    y0 = y.clone()
    y0[17, 5] = 0
    try:
        compiled(x, y0)
        results["fused_zero"] = "no error"
    except RuntimeError as error:
        results["fused_zero"] = str(error)
    results["fused_after"] = torch.equal(compiled(x, y), fused(x, y))
    print(json.dumps(results))
    """
)


def test_division_edge_cases_do_not_crash(tmp_path):
    env = dict(os.environ, TORCHSMITH_CACHE_DIR=str(tmp_path))
    done = subprocess.run(
        [sys.executable, "-c", EDGE_CHILD], env=env, capture_output=True, text=True, timeout=900
    )
    assert done.returncode == 0, f"exit code {done.returncode}:\n{done.stderr[-3000:]}"
    results = json.loads(done.stdout.strip().splitlines()[-1])
    assert results == {
        "empty": True, "mod_min": True, "fmod_min": True, "div_min": True,
        "fused_ok": True, "fused_zero": "ZeroDivisionError", "fused_after": True,
    }  # fmt: skip
