"""Every prim: its NumPy reference against its torch implementation, and its shape/dtype rule
against the torch result, over the shared sample database."""

import warnings

import numpy as np
import pytest
import torch

from torchsmith.ir import lookup_op
from torchsmith.ir.builder import infer_output_types
from torchsmith.ir.graph import Value, freeze_arg
from torchsmith.ir.types import TensorType
from torchsmith.prims import NUMPY_IMPLS, PRIMS
from torchsmith.prims.testing import assert_close, prim_samples, to_numpy
from torchsmith.prims.testing.compare import from_numpy

# Ops whose values are unspecified, so only shape and dtype are compared.
UNSPECIFIED_VALUES = {"prims.empty", "prims.empty_strided"}


def _as_values(arg, counter):
    if isinstance(arg, torch.Tensor):
        return Value(f"v{next(counter)}", TensorType.of(arg))
    if isinstance(arg, (list, tuple)):
        return type(arg)(_as_values(a, counter) for a in arg)
    return arg


def _run(name, sample):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch warns about var_mean with too few elements, on purpose
        return lookup_op(name).eager(*sample.args, **sample.kwargs)


def test_prim_count_is_in_the_designed_range():
    assert 70 <= len(PRIMS) <= 110
    assert set(NUMPY_IMPLS) == set(PRIMS)


@pytest.mark.parametrize("name", sorted(PRIMS))
def test_prim_has_samples(name):
    assert prim_samples(name), f"{name} has no samples in the database"


HALF_DTYPES = (torch.bfloat16, torch.float16)


@pytest.mark.parametrize("name", sorted(PRIMS))
def test_reference_matches_torch_and_rule_matches_result(name):
    for sample in prim_samples(name):
        what = f"{name}{sample!r}"
        actual = _run(name, sample)
        counter = iter(range(10_000))
        args = freeze_arg(tuple(_as_values(a, counter) for a in sample.args))
        kwargs = {k: freeze_arg(_as_values(v, counter)) for k, v in sample.kwargs.items()}
        types, several = infer_output_types(name, args, kwargs)
        results = list(actual) if several else [actual]
        assert len(types) == len(results), what
        with np.errstate(all="ignore"):  # nan and inf samples are on purpose
            reference = NUMPY_IMPLS[name](*to_numpy(sample.args), **sample.kwargs)
        references = list(reference) if several else [reference]
        for declared, got, ref in zip(types, results, references):
            assert tuple(got.shape) == declared.shape and got.dtype == declared.dtype, (
                f"{what}: rule says {declared}, torch gave {TensorType.of(got)}"
            )
            if PRIMS[name].kind == "view" or name == "prims.empty_strided":
                # Views declare their strides; a size-1 dim's stride is meaningless.
                for size, stride, expected in zip(got.shape, got.stride(), declared.strides):
                    assert size <= 1 or stride == expected, (
                        f"{what}: strides {got.stride()} vs {declared.strides}"
                    )
            if name not in UNSPECIFIED_VALUES:
                # torch's half-precision convolutions round their partial sums on CPUs without native
                # bf16 dot products (AVX2), so they sit a few bf16 steps from the float64 reference
                scale = 8.0 if name == "prims.convolution" and got.dtype in HALF_DTYPES else 1.0
                assert_close(got, from_numpy(ref, got.dtype), what=what, scale=scale)


def test_philox_matches_the_published_known_answers():
    # Random123's known-answer vectors for Philox4x32-10.
    from torchsmith.prims.rng import philox_numpy, philox_torch

    for counter, key, expected in (
        ((0, 0, 0, 0), (0, 0), (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
        ((0xFFFFFFFF,) * 4, (0xFFFFFFFF,) * 2, (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)),
    ):
        seed, offset = key[0] | key[1] << 32, counter[2] | counter[3] << 32
        words = philox_numpy(np.array([counter[0]]), np.array([counter[1]]), offset, seed)
        assert tuple(int(w[0]) for w in words) == expected
        words = philox_torch(torch.tensor([counter[0]]), torch.tensor([counter[1]]), offset, seed)
        assert tuple(int(w[0]) for w in words) == expected


def test_philox_rand_is_uniform_and_depends_on_seed_and_offset():
    rand = lookup_op("prims.philox_rand").eager
    a = rand([20000], 7, 0, dtype=torch.float32, device="cpu")
    assert 0 <= float(a.min()) and float(a.max()) < 1
    assert abs(float(a.mean()) - 0.5) < 0.01 and abs(float(a.var()) - 1 / 12) < 0.005
    assert not torch.equal(a, rand([20000], 8, 0, dtype=torch.float32, device="cpu"))
    assert not torch.equal(a, rand([20000], 7, 1, dtype=torch.float32, device="cpu"))
    assert torch.equal(a, rand([20000], 7, 0, dtype=torch.float32, device="cpu"))
    n = lookup_op("prims.philox_randn").eager([20000], 3, 4, dtype=torch.float64, device="cpu")
    assert abs(float(n.mean())) < 0.03 and abs(float(n.std()) - 1) < 0.03


def test_rules_work_on_symbolic_shapes():
    from torchsmith.ir import GraphBuilder
    from torchsmith.ir.symbolic import floordiv, symbol

    s0, s1 = symbol("s0"), symbol("s1")
    b = GraphBuilder("g")
    x = b.input("x", f"f32[{s0}, {s1}] cpu")
    y = b.op("prims.broadcast_in_dim", b.op("prims.sum", x, [1]), [s0, s1], [0])
    assert y.type.shape == (s0, s1) and y.type.strides == (1, 0)
    assert b.op("prims.add", x, y).type.shape == (s0, s1)
    assert b.op("prims.reshape", x, [s0 * s1]).type.shape == (s0 * s1,)
    assert b.op("prims.slice", x, 1, 1, s1, 2).type.shape == (s0, floordiv(s1, 2))
    assert b.op("prims.cat", [x, x], 0).type.shape == (2 * s0, s1)
    assert b.op("prims.pad", x, [1, 0, 0, 2], 0.0).type.shape == (s0 + 1, s1 + 2)
    assert b.op("prims.permute", x, [1, 0]).type.strides == (1, s1)
    var, mean = b.op("prims.var_mean", x, [0], 1)
    assert var.type.shape == (s1,) == mean.type.shape


def test_rules_refuse_what_prims_do_not_do():
    from torchsmith.ir import GraphBuilder
    from torchsmith.ir.symbolic import symbol
    from torchsmith.prims import PrimTypeError

    b = GraphBuilder("g")
    x = b.input("x", "f32[3, 4] cpu")
    h = b.input("h", "f16[3, 4] cpu")
    i = b.input("i", "i64[3, 4] cpu")
    v = b.input("v", "f32[4] cpu")
    s = b.input("s", f"f32[{symbol('s0')}] cpu")
    t = b.input("t", f"f32[{symbol('s1')}] cpu")
    for op, args, message in (
        ("prims.add", (x, h), "same dtype"),
        ("prims.add", (x, v), "same shape"),
        ("prims.add", (s, t), "same shape"),
        ("prims.add", (i, 1.5), "float scalar"),
        ("prims.exp", (i,), "does not accept torch.int64"),
        ("prims.sum", (x, [-1]), "out of range"),
        ("prims.broadcast_in_dim", (v, [3, 5], [1]), "cannot broadcast"),
        ("prims.reshape", (x, [5, 2]), "cannot reshape"),
    ):
        with pytest.raises(PrimTypeError, match=message):
            b.op(op, *args)
