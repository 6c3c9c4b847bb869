"""Large float32 CPU matmuls through oneDNN (runtime/onednn_matmul.py): the same products as torch.mm
and torch.addmm for every operand layout, torch's call kept for what oneDNN is not given, and
compiled graphs (static and with size symbols) running their large products through it."""

import pytest
import torch

from torchsmith.inductor import compile_graph
from torchsmith.inductor.runtime import onednn_matmul
from torchsmith.inductor.testing import make_graph
from torchsmith.ir import TensorType
from torchsmith.ir.symbolic import symbol

F32 = torch.float32

pytestmark = pytest.mark.skipif(not onednn_matmul.available(), reason="this torch build has no oneDNN")


@pytest.fixture
def onednn(monkeypatch):
    """oneDNN taken whatever the machine's measurement says; counts its calls."""
    calls = []
    real = onednn_matmul._linear

    def counted(a, weight, bias):
        calls.append(tuple(a.shape))
        return real(a, weight, bias)

    monkeypatch.setattr(onednn_matmul, "FORCE", True)
    monkeypatch.setattr(onednn_matmul, "_linear", counted)
    return calls


def layouts(rows: int, cols: int):
    """The same kind of operand laid out in each way a graph can hand it to a matmul."""
    yield "contiguous", torch.randn(rows, cols)
    yield "transposed", torch.randn(cols, rows).t()
    yield "row slice", torch.randn(rows, cols + 7)[:, 3:3 + cols]
    yield "transposed slice", torch.randn(cols, rows + 5)[:, 2:2 + rows].t()
    yield "offset", torch.randn(rows + 3, cols)[3:]
    yield "broadcast", torch.randn(1, cols).expand(rows, cols)
    yield "every other column", torch.randn(rows, 2 * cols)[:, ::2]


BLAS_LAYOUTS = {"contiguous", "transposed", "row slice", "transposed slice", "offset"}


@pytest.mark.parametrize("a_kind", [k for k, _ in layouts(2, 2)])
@pytest.mark.parametrize("b_kind", [k for k, _ in layouts(2, 2)])
def test_products_match_torch_for_every_layout(onednn, a_kind, b_kind):
    a = dict(layouts(200, 130))[a_kind]
    b = dict(layouts(130, 170))[b_kind]
    torch.testing.assert_close(onednn_matmul.mm(a, b), torch.mm(a, b), rtol=1e-4, atol=1e-4)
    for bias in (torch.randn(170), torch.randn(170).expand(200, 170), torch.randn(200, 170)):
        expected = torch.addmm(bias, a, b)
        torch.testing.assert_close(onednn_matmul.addmm(bias, a, b), expected, rtol=1e-4, atol=1e-4)
    # BLAS layouts go to oneDNN (mm, and addmm with a row bias, twice); others keep torch's call
    assert len(onednn) == (3 if a_kind in BLAS_LAYOUTS and b_kind in BLAS_LAYOUTS else 0)


def test_small_products_other_dtypes_and_disabled_onednn_keep_torch(onednn, monkeypatch):
    small = torch.randn(16, 16)
    onednn_matmul.mm(small, small)
    big = torch.randn(256, 256, dtype=torch.float64)
    onednn_matmul.mm(big, big)
    a = torch.randn(256, 256)
    monkeypatch.setattr(torch.backends.mkldnn, "enabled", False)
    torch.testing.assert_close(onednn_matmul.mm(a, a), torch.mm(a, a))
    assert onednn == []
    monkeypatch.setattr(torch.backends.mkldnn, "enabled", True)
    onednn_matmul.mm(a, a)
    assert onednn == [(256, 256)]


def test_choose_replaces_only_torchs_own_large_matmuls(monkeypatch):
    monkeypatch.setattr(onednn_matmul, "FORCE", True)
    big, small = [(256, 256), (256, 256)], [(8, 8), (8, 8)]
    assert onednn_matmul.choose("prims.mm", torch.mm, big) is onednn_matmul.mm
    assert onednn_matmul.choose("extern.addmm", torch.addmm, [(256,), *big]) is onednn_matmul.addmm
    assert onednn_matmul.choose("prims.mm", torch.mm, small) is torch.mm
    assert onednn_matmul.choose("prims.bmm", torch.bmm, None) is torch.bmm
    replaced = lambda a, b: a @ b  # noqa: E731 - a kernel a user or test put in EXTERN_KERNELS
    assert onednn_matmul.choose("prims.mm", replaced, big) is replaced
    monkeypatch.setattr(onednn_matmul, "FORCE", False)
    assert onednn_matmul.choose("prims.mm", torch.mm, big) is torch.mm


def test_measuring_leaves_the_random_stream_alone(monkeypatch):
    monkeypatch.setattr(onednn_matmul, "FORCE", None)
    monkeypatch.setattr(onednn_matmul, "_measured", [])
    torch.manual_seed(0)
    expected = torch.randn(4)
    torch.manual_seed(0)
    assert onednn_matmul.faster_here() in (True, False)
    torch.testing.assert_close(torch.randn(4), expected)


def mlp_graph(rows):
    def body(b, x, w1, b1, w2):
        h = b.op("aten.addmm.default", b1, x, w1, out_type=TensorType.make((rows, 192), F32))
        h = b.op("aten.relu.default", h, out_type=h.type)
        return b.op("aten.mm.default", h, w2, out_type=TensorType.make((rows, 96), F32))

    types = {"x": TensorType.make((rows, 128), F32), "w1": ((128, 192), F32), "b1": ((192,), F32),
             "w2": ((192, 96), F32)}
    return make_graph("mlp", types, body)


@pytest.mark.parametrize("rows", [160, symbol("s0")], ids=["static", "symbolic"])
def test_compiled_graph_runs_large_products_through_onednn(onednn, rows):
    compiled = compile_graph(mlp_graph(rows))
    weights = [torch.randn(128, 192), torch.randn(192), torch.randn(192, 96)]
    for n in (160, 224) if not isinstance(rows, int) else (160,):
        x = torch.randn(n, 128)
        (got,) = compiled(x, *weights)
        expected = torch.relu(torch.addmm(weights[1], x, weights[0])) @ weights[2]
        torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-4)
    assert len(onednn) == (2 if isinstance(rows, int) else 4)
