"""NumPy values: opaque to capture, run eagerly between graphs, never folded into a graph."""

import numpy as np
import torch

from torchsmith.capture.numpy_values import is_numpy_value


def test_numpy_values_are_recognized_but_python_numbers_are_not():
    assert is_numpy_value(np.ones(2)) and is_numpy_value(np.float64(2.0)) and is_numpy_value(np.int64(3))
    assert not is_numpy_value(2.0) and not is_numpy_value(torch.ones(2)) and not is_numpy_value([1.0])


def test_an_array_argument_is_read_on_every_call_not_baked_into_the_graph(compile_with, backend):
    def f(x, arr):
        return x * 2, arr * 3, arr

    compiled = compile_with(f)
    for fill in (1.0, 2.0, 5.0):
        arr = np.full(3, fill)
        y, tripled, same = compiled(torch.ones(3), arr)
        torch.testing.assert_close(y, torch.full((3,), 2.0))
        np.testing.assert_array_equal(tripled, np.full(3, 3 * fill))
        assert same is arr
    assert len(backend.graphs) == 1  # x * 2; arr * 3 runs natively after it


def test_numpy_scalars_are_not_float_constants(compile_with, backend):
    def f(x, s):
        return x.sin() * s

    compiled = compile_with(f)
    for s in (np.float64(2.0), np.float64(3.0)):
        x = torch.randn(4)
        torch.testing.assert_close(compiled(x, s), f(x, s))


def test_code_after_a_numpy_operator_is_captured_again(compile_with, backend):
    def f(x):
        a = x.numpy()
        b = a * 2  # runs natively, on its own
        y = x.cos() + 1  # captured
        return y, b

    x = torch.randn(3)
    y, b = compile_with(f)(x)
    torch.testing.assert_close(y, x.cos() + 1)
    np.testing.assert_allclose(b, x.numpy() * 2)
    assert [n.op for g in backend.graphs for n in g.nodes] == ["torch.Tensor.cos", "torch.Tensor.__add__"]


def test_array_and_tensor_share_memory_both_ways(compile_with, backend):
    def f(x):
        a = x.numpy()
        x.add_(1)  # a graph: the write lands in x's storage, which a shares
        a[0] = -5.0  # native: x sees it
        return a.copy(), x * 1

    x = torch.zeros(3)
    seen, y = compile_with(f)(x)
    np.testing.assert_array_equal(seen, [-5.0, 1.0, 1.0])
    torch.testing.assert_close(y, torch.tensor([-5.0, 1.0, 1.0]))
    torch.testing.assert_close(x, torch.tensor([-5.0, 1.0, 1.0]))


def test_same_array_through_two_arguments_is_one_object(compile_with, backend):
    def f(x, a, b):
        if a is b:
            return x + 1
        return x - 1

    compiled = compile_with(f)
    arr = np.zeros(2)
    torch.testing.assert_close(compiled(torch.zeros(2), arr, arr), torch.ones(2))
    torch.testing.assert_close(compiled(torch.zeros(2), arr, np.zeros(2)), -torch.ones(2))


def test_a_second_break_keeps_the_cells_inner_functions_read(compile_with, backend):
    # each NumPy statement is a break; the resume function passes its cell (y) on, filled
    def f(x, arrs, out):
        y = x.sin()
        out[:] = y.numpy()  # a second break, in the resume function of the first
        return [torch.from_numpy(a) * y for a in arrs]

    x, arrs = torch.randn(2), [np.ones(2, dtype=np.float32), np.full(2, 2.0, dtype=np.float32)]
    out = np.zeros(2, dtype=np.float32)
    got = compile_with(f)(x, arrs, out)
    for g, a in zip(got, arrs, strict=True):
        torch.testing.assert_close(g, torch.from_numpy(a) * x.sin())
    np.testing.assert_allclose(out, x.sin().numpy())
