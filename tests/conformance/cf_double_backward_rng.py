"""Double backward through graphs that draw random numbers (issue 17).

Every program here runs with `double_backward=True`: after each call the harness takes the
gradient penalty of the result (`g = grad(loss, leaves, create_graph=True)`, then
`sum((g**2).sum()).backward()`) and compares the outputs, `g` and the second-order gradients with
eager's, with the global seed set identically on both sides. The compiled forward draws from torch's
generators as eager does; the differentiable backward re-runs the graph from the generator state the
forward started from, so both orders of gradient see the forward's dropout masks and noise. Calls
follow each other without reseeding, so a backward that left the generators elsewhere than eager's
would change the next call's numbers.
"""

import torch
import torch.nn.functional as F
from cf_harness import program
from torch import nn

import torchsmith

D = "double_backward"


def penalty(**options):
    return program(D, double_backward=True, **options)


def leaf(*shape):
    return torch.randn(*shape, requires_grad=True)


@penalty(graphs=1)
def dropout_in_training_mode():
    def f(x, w):
        return F.dropout(torch.tanh(x @ w), 0.4, training=True) * x.sum()

    return f, [(leaf(4, 5), leaf(5, 3)) for _ in range(3)]


@penalty(graphs=1)
def rand_like_noise():
    def f(x):
        noise = torch.rand_like(x)
        return (x * (1 + 0.5 * noise)).sin() * x

    return f, [(leaf(3, 4),), (leaf(3, 4),)]


@penalty(graphs=1)
def bernoulli_mask():
    def f(x, p):
        mask = torch.bernoulli(p.expand_as(x))
        return (x ** 3) * mask + x.exp() * (1 - mask)

    return f, [(leaf(6, 2), torch.full((1, 2), 0.6)) for _ in range(2)]


@penalty(graphs=1)
def randn_times_input():
    def f(x):
        return torch.randn(x.shape) * x.pow(2) + torch.randn(2, 1) * x.cos()

    return f, [(leaf(2, 5),), (leaf(2, 5),)]


@penalty(graphs=2, breaks=1)
def dropout_then_graph_break():
    def f(x, w):
        y = F.dropout(torch.sigmoid(x @ w), 0.5, training=True)
        print("between")
        return (y * torch.rand_like(y)).pow(2) + y.tanh()

    return f, [(leaf(3, 4), leaf(4, 4)) for _ in range(2)]


@penalty(graphs=1)
def dropout_module_gradient_penalty_on_parameters():
    # the WGAN-GP shape: the penalty of a network with dropout, differentiated into its weights
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(5, 8), nn.Tanh(), nn.Dropout(0.3), nn.Linear(8, 1)).train()
    return net, [(leaf(4, 5),) for _ in range(3)]


@penalty(graphs=1)
def two_random_ops_and_two_outputs():
    def f(x, y):
        a = F.dropout(x * y, 0.25, training=True)
        b = torch.rand_like(y) * y.pow(3)
        return a.tanh(), b + a

    return f, [(leaf(3, 3), leaf(3, 3)), (leaf(3, 3), leaf(3, 3))]


@penalty(graphs=1, dynamic=True)
def dropout_with_dynamic_sizes():
    def f(x, w):
        return F.dropout(F.gelu(x @ w), 0.3, training=True).pow(2)

    return f, [(leaf(n, 4), leaf(4, 2)) for n in (3, 5, 8)]


@penalty(graphs=1)
def random_draw_that_only_shifts_the_stream():
    # a random op whose value never reaches an output still moves the generator: the re-run must too
    def f(x):
        torch.rand(7)
        return F.dropout(x.sin(), 0.5, training=True) * x

    return f, [(leaf(4),), (leaf(4),)]


@penalty(graphs=1)
def penalty_through_only_one_input():
    def f(x, w):
        return F.dropout(F.softplus(x @ w), 0.2, training=True)

    return f, [(leaf(3, 4), torch.randn(4, 2)), (leaf(3, 4), torch.randn(4, 2))]


@program(D, graphs=2, breaks=1, train=True)
def gradient_penalty_inside_the_function():
    # autograd.grad(create_graph=True) inside the compiled function: it breaks the graph and runs
    # on the first graph's outputs, whose dropout mask the double backward must replay
    def f(x, w):
        y = F.dropout(torch.tanh(x @ w), 0.5, training=True)
        (g,) = torch.autograd.grad(y.sum(), w, create_graph=True)
        return y, (g ** 2).sum()

    return f, [(torch.randn(3, 4), leaf(4, 2)) for _ in range(2)]


@torchsmith.disable
def _noise_outside(x):
    return x * torch.rand_like(x)


@penalty(graphs=2, breaks=1)
def random_numbers_drawn_eagerly_between_graphs():
    # the generator moves between the two graphs too: each graph replays its own state
    def f(x):
        y = F.dropout(x.exp(), 0.5, training=True)
        z = _noise_outside(y)
        return torch.bernoulli(torch.full_like(z, 0.5)) * z.sin()

    return f, [(leaf(5),), (leaf(5),)]
