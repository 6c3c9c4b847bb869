"""Tensor programs whose ops return several tensors, and graphs without tensor inputs.

Multi-output: torch functions and methods returning a tuple or list of tensors (gradient, unbind,
split, tensor_split, chunk, meshgrid, broadcast_tensors, aminmax, sort, topk, var_mean, std_mean,
frexp, histogram, unique with counts, torch.ops.aten overloads), one-element results (torch.gradient
of a 1-d tensor returns a one-element tuple), nested results (histogramdd's `(hist, [edges])`), the
parts returned, unpacked, indexed and computed on, under inference and training.

No tensor input: factory functions called with Python arguments only (a graph with no inputs).
"""

import torch
from cf_harness import program

T = "tensors"


@program(T, graphs=1)
def gradient_returns_tuples():
    # 1-d: a one-element tuple; 2-d: one tensor per dim; spacing and dim given
    def fn(v, x):
        return torch.gradient(v), torch.gradient(x), torch.gradient(x, spacing=2.0, dim=1)

    return fn, [(torch.randn(7), torch.randn(5, 4))]


@program(T, graphs=1)
def gradient_parts_computed_on():
    def fn(x):
        (gv,) = torch.gradient(x[0])
        gy, gx = torch.gradient(x)
        return gv * 2, gy + gx, sum(g.sum() for g in torch.gradient(x))

    return fn, [(torch.randn(5, 6),)]


@program(T, graphs=1)
def splitting_ops_return_sequences():
    def fn(x):
        return (
            torch.unbind(x, 1),
            x.unbind(),
            torch.split(x, 4),
            x.split(10),  # one chunk
            torch.tensor_split(x, 3),
            x.chunk(1),
            torch.chunk(x, 3, dim=1),
            torch.dsplit(x.reshape(2, 3, 4), 2),
        )

    return fn, [(torch.randn(6, 4),)]


@program(T, graphs=1)
def broadcasting_ops_return_sequences():
    def fn(v, x, row):
        return (
            torch.meshgrid(v, v, indexing="ij"),
            torch.meshgrid(v, indexing="xy"),
            torch.broadcast_tensors(x, row),
            torch.broadcast_tensors(x),
            torch.atleast_1d(v),
            torch.atleast_2d(v, x),
        )

    return fn, [(torch.randn(5), torch.randn(3, 4), torch.randn(4))]


@program(T, graphs=1)
def reductions_return_named_tuples():
    def fn(x):
        lo, hi = torch.aminmax(x, dim=0)
        s = torch.sort(x, 1, descending=True)
        top = torch.topk(x, 2)
        return lo, hi, s, s.values - s.indices, top, x.max(1), torch.cummax(x, 0), torch.aminmax(x)

    return fn, [(torch.randn(6, 4),)]


@program(T, graphs=1)
def moments_and_frexp():
    def fn(x):
        var, mean = torch.var_mean(x, 0)
        mantissa, exponent = torch.frexp(x)
        return var, mean, torch.std_mean(x), torch.std_mean(x, 1, keepdim=True), mantissa * 2, exponent

    return fn, [(torch.randn(6, 4),)]


@program(T, graphs=1)
def aten_multi_output_overloads():
    def fn(x):
        values, indices = torch.ops.aten.sort.default(x)
        return values, indices, torch.ops.aten.split.Tensor(x, 2), torch.ops.aten.var_mean.correction(x, [0])

    return fn, [(torch.randn(6, 4),)]


@program(T, graphs=1)
def nested_tuples_of_results():
    def fn(x):
        return (torch.split(x, 3), (torch.sort(x), x.sum())), [torch.unbind(x[:2])]

    return fn, [(torch.randn(6, 4),)]


@program(T, graphs=2, breaks=1)
def histograms_and_unique_counts():
    # histogram: (hist, bin_edges); histogramdd: (hist, [edges per dim]), a nested result, their sizes
    # set by the bin counts. unique's size depends on the data: it runs eagerly at a break, and the code
    # using its parts is captured again
    def fn(v, x, i):
        h = torch.histogram(v, 5)
        hd = torch.histogramdd(x[:, :2], bins=[3, 3])
        u = torch.unique(i, return_counts=True)
        return h, hd, u, h.hist * 2 + hd.hist.sum(), u[1].float().mean() + hd.bin_edges[0]

    return fn, [(torch.randn(9), torch.randn(6, 4), torch.randint(0, 4, (10,)))]


@program(T, graphs=2, train=True)
def training_through_split_parts():
    # gradients flow through every part of unbind, split and gradient (one graph per input signature)
    def fn(x):
        a, b = torch.split(x, 3)
        (g,) = torch.gradient(x[0])
        parts = x.unbind(1)
        return a * b, g.sum() * parts[0], torch.sort(x, 0).values

    return fn, [(torch.randn(6, 4, requires_grad=True),), (torch.randn(6, 5, requires_grad=True),)]


@program(T, graphs=1)
def one_element_tuples_indexed_and_unpacked():
    def fn(x):
        first = torch.gradient(x)[0]
        (only,) = x.split(x.shape[0])
        (whole,) = torch.chunk(x, 1)
        return first - only + whole, torch.tensor_split(x, 1)

    return fn, [(torch.randn(8),)]


# --- no tensor input ---------------------------------------------------------------------------------


@program(T, graphs=1)
def factories_without_tensor_arguments():
    def fn(*tensors):
        return torch.arange(5.0), torch.ones(3), torch.zeros(2, 2), torch.full((2,), 7.0), torch.eye(3)

    return fn, [()]


@program(T, graphs=1)
def python_arguments_only():
    def fn(n, start):
        return torch.linspace(start, 1.0, n), torch.arange(n) * 2, torch.signal.windows.hann(n) + 1

    return fn, [(5, 0.0)]


@program(T, graphs=1)
def no_tensor_input_multi_output():
    def fn():
        x = torch.arange(12.0).reshape(3, 4)
        return torch.gradient(x), torch.split(x, 2, dim=1), torch.ones(2) + 1

    return fn, [(), ()]
