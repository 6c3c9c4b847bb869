"""Every elementwise prim the C++ backend prints, checked against eager in one graph per dtype
(one compile each), on values that include negatives, zeros and special floats."""

import pytest
import torch

from torchsmith.inductor import compile_graph
from torchsmith.inductor.testing import assert_matches_eager, make_graph
from torchsmith.prims.core import DTYPE_CLASSES, dtype_category
from torchsmith.prims.elementwise import BINARY, UNARY


def _accepts(accepts: str, dtype: torch.dtype) -> bool:
    return dtype_category(dtype) in DTYPE_CLASSES[accepts]


def _inputs(dtype: torch.dtype):
    if dtype.is_floating_point:
        a = torch.tensor(
            [-2.5, -1.0, -0.5, 0.0, 0.3, 0.5, 1.0, 2.5, 7.0, float("nan"), float("inf")], dtype=dtype
        )
        b = torch.tensor([1.5, -2.0, 0.5, 2.0, -0.7, 0.5, 3.0, -1.5, 2.0, 1.0, 2.0], dtype=dtype)
    elif dtype == torch.bool:
        a = torch.tensor([True, False, True, False])
        b = torch.tensor([True, True, False, False])
    else:
        a = torch.tensor([-7, -3, -1, 0, 1, 2, 5, 9, 13], dtype=dtype)
        b = torch.tensor([2, -3, 4, 1, -5, 3, 2, 1, -4], dtype=dtype)
    # Enough elements that vectorized loops (8 or 16 lanes, libmvec math) do most of the work.
    repeats = 64 // a.numel() + 1
    a, b = a.repeat(repeats), b.repeat(repeats)
    if dtype.is_floating_point:
        a, b = a * (1 + torch.rand(a.shape, dtype=dtype)), b * (1 + torch.rand(b.shape, dtype=dtype))
    return a, b


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int64, torch.int32, torch.bool])
def test_every_elementwise_prim(dtype):
    unary = [n for n, (accepts, *_) in UNARY.items() if _accepts(accepts, dtype)]
    binary = [n for n, (accepts, *_) in BINARY.items() if _accepts(accepts, dtype)]
    if not dtype.is_floating_point:
        binary = [n for n in binary if n not in ("shift_left", "shift_right")]  # tested with in-range shifts

    def body(b, x, y):
        outs = [b.op(f"prims.{n}", x) for n in unary]
        outs += [b.op(f"prims.{n}", x, y) for n in binary]
        outs.append(b.op("prims.where", b.op("prims.ne", x, y), x, y))
        return tuple(outs)

    a, c = _inputs(dtype)
    graph = make_graph(
        f"ops_{str(dtype).split('.')[-1]}", {"x": ((a.numel(),), dtype), "y": ((a.numel(),), dtype)}, body
    )
    assert_matches_eager(compile_graph(graph), graph, a, c)
