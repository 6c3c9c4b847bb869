"""`.sum().backward()` hands the compiled backward an expanded gradient (every stride 0); a backward
compiled for symbolic sizes must take it as well as a static one does."""

import torch
import torch.nn.functional as F

import torchsmith


def test_sum_backward_through_a_graph_compiled_for_every_length():
    lin = torch.nn.Linear(3, 5)

    def f(x):
        return lin(F.max_pool1d(x, 2).transpose(1, 2))

    compiled = torchsmith.compile(f, options={"fallback": "raise"})
    for n in (8, 12, 20, 28):  # the second length makes the graph symbolic
        x = torch.randn(2, 3, n, requires_grad=True)
        expected_x = x.detach().clone().requires_grad_()
        lin.zero_grad()
        compiled(x).sum().backward()
        got = [x.grad, lin.weight.grad.clone(), lin.bias.grad.clone()]
        lin.zero_grad()
        f(expected_x).sum().backward()
        expected = [expected_x.grad, lin.weight.grad, lin.bias.grad]
        for a, b in zip(got, expected):
            torch.testing.assert_close(a, b)
