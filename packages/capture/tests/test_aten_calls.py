"""Calls of ATen operator packets (`torch.ops.aten.x(...)`) are recorded as the overload torch picks
for the arguments (aten_calls.py), each compared with eager."""

import pytest
import torch

from torchsmith.capture import FullGraphError


def test_packet_calls_are_recorded_as_the_overload_torch_picks(compile_with, backend):
    def f(x, g):
        y = torch.softmax(x, -1)
        dx = torch.ops.aten._softmax_backward_data(g, y, -1, torch.float32)  # .default
        up = torch.ops.aten._upsample_bilinear2d_aa(x[None, None], None, False, [2.0, 1.5])  # .vec
        return dx, up

    compiled = compile_with(f, fullgraph=True)
    x, g = torch.randn(4, 6), torch.randn(4, 6)
    for got, expected in zip(compiled(x, g), f(x, g)):
        torch.testing.assert_close(got, expected)
    ops = backend.graphs[0].ops()
    assert "aten._softmax_backward_data.default" in ops and "aten._upsample_bilinear2d_aa.vec" in ops


def test_a_packet_call_no_overload_takes_is_a_break_naming_it(compile_with):
    def f(x):
        return torch.ops.aten._softmax_backward_data(x, x, -1, torch.float32, "extra") + 1

    with pytest.raises(FullGraphError, match="aten._softmax_backward_data"):
        compile_with(f, fullgraph=True)(torch.randn(3))


def test_private_aten_bound_torch_functions_are_ops(compile_with, backend):
    # torch._chunk_cat and torch._unsafe_masked_index: in ir's table of private torch ops
    def f(a, b, mask, index):
        return torch._chunk_cat([a, b], 1, 2), torch._unsafe_masked_index(a, mask, [index], 0.0)

    a, b = torch.randn(3, 4), torch.randn(3, 6)
    mask, index = torch.tensor([[True], [False], [True]]), torch.tensor([2, 0, 1])
    compiled = compile_with(f, fullgraph=True)
    for got, expected in zip(compiled(a, b, mask, index), f(a, b, mask, index)):
        torch.testing.assert_close(got, expected)
    assert {"torch._chunk_cat", "torch._unsafe_masked_index"} <= set(backend.graphs[0].ops())


def test_an_op_reading_a_tensor_arguments_value_is_a_break_saying_so(compile_with):
    def f(x, start):
        return torch.narrow(x, 1, start, 2) * 2  # the view's offset is the tensor's value

    with pytest.raises(FullGraphError, match=r"torch.narrow reads the value of a tensor argument"):
        compile_with(f, fullgraph=True)(torch.randn(3, 5), torch.tensor(1))
    x, start = torch.randn(3, 5), torch.tensor(1)
    torch.testing.assert_close(compile_with(f)(x, start), f(x, start))  # runs eagerly, correct
