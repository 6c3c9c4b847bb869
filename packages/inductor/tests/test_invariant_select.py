"""A select whose condition is the same across the innermost loop (a padded border row) is written
as bit operations (`ts::blend`), which GCC vectorizes where it gives up on `?:`; it must give the
select's exact bits, NaN and infinities included, in float32 and float64."""

import pytest
import torch

from torchsmith.inductor import compile_graph
from torchsmith.inductor.testing import assert_matches_eager, make_graph


def _pad_rows(b, x):
    # rows 5 and 6 of the result are padding: the condition depends on the row, not the column
    padded = b.op("aten.constant_pad_nd.default", x, [0, 0, 0, 2], 0.0)
    return b.op("aten.mul.Tensor", padded, 2.0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_a_padded_border_is_a_blend_with_the_select_bits(dtype):
    graph = make_graph("pad_rows", {"x": ((4, 5, 16), dtype)}, _pad_rows)
    compiled = compile_graph(graph)
    assert "ts::blend(" in compiled.source
    x = torch.randn(4, 5, 16, dtype=dtype)
    x[0, 0, :3] = torch.tensor([float("nan"), float("inf"), -float("inf")], dtype=dtype)
    x[1, 4, 0] = -0.0
    out = compiled(x)[0]
    expected = torch.nn.functional.pad(x, (0, 0, 0, 2)) * 2
    torch.testing.assert_close(out, expected, equal_nan=True, rtol=0, atol=0)
    assert torch.equal(torch.signbit(out), torch.signbit(expected))  # -0.0 stays -0.0
    assert_matches_eager(compiled, graph, torch.randn(4, 5, 16, dtype=dtype))
