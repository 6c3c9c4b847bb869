"""Dynamic shapes: automatic dynamic after a size change, dynamic=True/False, mark_dynamic, symbolic
size arithmetic, guards on size comparisons, duck sizing and 0/1 specialization."""

import torch
from cf_harness import program

import torchsmith

D = "dynamic"


def shapes(*sizes, cols=4):
    return [(torch.randn(n, cols),) for n in sizes]


@program(D, graphs=2)
def automatic_dynamic_after_one_recompile():
    def f(x):
        return (x * 2).sum(0) + x.mean()
    return f, shapes(3, 5, 7, 9)


@program(D, graphs=1, dynamic=True)
def dynamic_true_compiles_once():
    def f(x):
        return x.relu() + 1
    return f, shapes(3, 5, 7)


@program(D, graphs=3, dynamic=False)
def dynamic_false_recompiles_every_shape():
    def f(x):
        return x.relu() + 1
    return f, shapes(3, 5, 7)


@program(D, graphs=2)
def size_arithmetic_stays_symbolic():
    def f(x):
        b = x.shape[0]
        y = x.reshape(b * 2, -1)
        return y.sum(1), b // 2 + 1, y.shape
    return f, shapes(4, 6, 8)


@program(D, graphs=3)
def branch_on_size_is_guarded():
    def f(x):
        if x.size(0) > 5:
            return x * 2
        return x - 2
    return f, shapes(3, 4, 8, 9)


@program(D, graphs=2)
def duck_sized_inputs_broadcast():
    def f(x, y):
        return x + y, len(x)
    return f, [(torch.randn(n, 3), torch.randn(n, 3)) for n in (2, 5, 6)]


@program(D, graphs=3)
def size_one_is_specialized():
    def f(x):
        return x.sum(0)
    return f, shapes(3, 5, 1, 7)


@program(D, graphs=1)
def mark_dynamic_starts_symbolic():
    def make_input(n):
        x = torch.randn(n, 4)
        torchsmith.mark_dynamic(x, 0)
        return (x,)

    def f(x):
        return x.softmax(-1) * x.shape[0]
    return f, [make_input(n) for n in (3, 6, 9)]


@program(D, graphs=2)
def dynamic_batch_through_mlp():
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    return model, shapes(2, 3, 5, 7)


@program(D, graphs=2)
def dynamic_dim_in_new_tensor():
    def f(x):
        return x + torch.zeros(x.shape[0], 1), torch.ones_like(x).cumsum(0)
    return f, shapes(3, 4, 5)


@program(D, graphs=2)
def flatten_of_two_dynamic_dims_specializes_safely():
    def f(x):
        return x.flatten().sum()
    return f, [(torch.randn(n, n + 1),) for n in (2, 3, 4)]


@program(D, graphs=2)
def loop_over_dynamic_rows_specializes():
    def f(x):
        total = 0
        for row in x:
            total = total + row
        return total
    return f, shapes(2, 3, 3)
