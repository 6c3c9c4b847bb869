"""Tensor semantics that compiled code must keep: in-place shape changes of inputs, grad mode
switched inside the program or around the call, double backward through compiled graphs, and
mutations through views of intermediates or through inputs that share memory.

Programs that check strides (which the harness does not compare) record them with a step between
calls into `fn.state`, snapshotted after the next call. Programs that run under `no_grad` switch the
grad mode with a step before the call and switch it back after.
"""

import torch
import torch.nn.functional as F
from cf_harness import program
from torch import nn

META = "metadata_mutation"
GRAD = "grad_mode"
DOUBLE = "double_backward"
ALIAS = "view_mutation"


def T(*shape):
    """A random leaf tensor that requires grad."""
    return torch.randn(*shape).requires_grad_()


def with_state(fn, state):
    fn.state = state
    return fn


def record_layout(state, *tensors):
    """A step that appends the shape, strides and offset of `tensors` to `state`."""
    return lambda: state.append([(tuple(t.shape), t.stride(), t.storage_offset()) for t in tensors])


def under_no_grad(*args_list):
    """Calls run with grad mode off (switched back on after each)."""
    calls = []
    for args in args_list:
        calls += [lambda: torch.set_grad_enabled(False), tuple(args), lambda: torch.set_grad_enabled(True)]
    return calls


# --- 1. in-place changes of an input's shape or strides ------------------------------------------


@program(META)
def unsqueeze_then_add_on_input():
    state = []

    def f(x):
        x.unsqueeze_(0)
        x.add_(1)
        return x * 2

    x, y = torch.randn(3), torch.randn(5)
    return with_state(f, state), [
        (x,),
        record_layout(state, x),
        (y,),
        record_layout(state, y),
        (torch.randn(2),),
    ]


@program(META)
def t_then_add_then_reduce():
    state = []

    def f(x):
        x.t_()
        x.add_(torch.arange(2.0))
        return x.sum(0), x[0]

    x = torch.randn(2, 3)
    return with_state(f, state), [(x,), record_layout(state, x), (torch.randn(2, 3),)]


@program(META)
def transpose_on_a_view_input_then_mul():
    base = torch.randn(4, 3)
    state = {"base": base, "layouts": []}

    def f(x):
        x.transpose_(0, 1)
        y = x * 2
        x.mul_(3)
        return y

    x = base[1:]
    return with_state(f, state), [(x,), lambda: state["layouts"].append((tuple(x.shape), x.stride())),
                                  (base[:2].clone(),)]


@program(META, train=True)
def squeeze_input_then_matmul_with_grad():
    def f(x, w):
        x.squeeze_(1)
        return torch.tanh(x @ w)

    return f, [(torch.randn(3, 1, 4), T(4, 2)), (torch.randn(5, 1, 4), T(4, 2))]


@program(META, train=True)
def t_on_non_leaf_input_that_requires_grad():
    def f(h, w):
        h.t_()
        return h * w

    src, w = T(2, 3), T(3, 2)
    return f, [(src * 2, w), (src.detach() * 3, w)]


@program(META)
def unsqueeze_then_graph_break_then_mutate():
    state = []

    def f(x):
        x.unsqueeze_(0)
        print("break")
        x.add_(1)
        return x * 2

    x = torch.randn(3)
    return with_state(f, state), [(x,), record_layout(state, x), (torch.randn(4),)]


@program(META)
def as_strided_in_place_then_read():
    state = []

    def f(x):
        x.as_strided_((2, 2), (1, 2))
        return x + 1

    x = torch.randn(4)
    return with_state(f, state), [(x,), record_layout(state, x), (torch.randn(4),)]


@program(META)
def resize_to_fewer_elements_then_write():
    state = []

    def f(x):
        x.resize_(2, 2)
        x.mul_(2)
        return x.sum(1)

    x = torch.randn(6)
    return with_state(f, state), [(x,), record_layout(state, x)]


@program(META)
def input_returned_after_chained_metadata_changes():
    state = []

    def f(x):
        x.unsqueeze_(0).transpose_(0, 2)
        return x, x.squeeze(1)

    x = torch.randn(3, 4)
    return with_state(f, state), [(x,), record_layout(state, x), (torch.randn(3, 4),)]


@program(META)
def t_on_intermediate_then_mutate():
    def f(x):
        y = x * 2
        y.t_()
        y[0].zero_()
        return y, x + 1

    return f, [(torch.randn(2, 3),)]


@program(META)
def view_taken_before_t_then_mutated():
    def f(x):
        row = x[0]
        x.t_()
        row.add_(1)
        return x.sum(0), row

    return f, [(torch.randn(2, 3),)]


@program(META)
def swapdims_then_fill_a_row():
    state = []

    def f(x):
        x.swapdims_(0, 1)
        x[0].fill_(1)
        return x.sum(1)

    x = torch.randn(3, 2)
    return with_state(f, state), [(x,), record_layout(state, x), (torch.randn(3, 2),)]


@program(META)
def squeeze_every_unit_dim():
    state = []

    def f(x):
        x.squeeze_()
        return x.cumsum(0)

    x = torch.randn(1, 3, 1)
    return with_state(f, state), [(x,), record_layout(state, x)]


# --- 2. grad mode inside the program and around the call -----------------------------------------


@program(GRAD, train=True)
def enable_grad_inside_a_call_under_no_grad():
    def f(x):
        with torch.enable_grad():
            y = x * 2
        return y, x * 3

    return f, under_no_grad([T(3)], [T(3)])


@program(GRAD, train=True)
def no_grad_inside_a_call_with_grad_on():
    def f(x, w):
        with torch.no_grad():
            scale = (x @ w).abs().mean()
        return (x @ w) * scale, scale

    return f, [(T(3, 4), T(4, 2))]


@program(GRAD, train=True, breaks=1)
def graph_break_inside_no_grad_block():
    def f(x):
        with torch.no_grad():
            y = x * 2
            print("inside")
            z = y + x
        return z * x, z

    return f, [(T(3),)]


@program(GRAD, train=True)
def set_grad_enabled_as_a_call():
    def f(x):
        torch.set_grad_enabled(False)
        y = x * 2
        torch.set_grad_enabled(True)
        return y, x.sin() * y

    return f, [(T(3),)]


@program(GRAD, train=True)
def set_grad_enabled_context_under_no_grad():
    def f(x):
        with torch.set_grad_enabled(True):
            y = x.exp()
        with torch.set_grad_enabled(False):
            z = x.exp()
        return y * 2, z

    return f, under_no_grad([T(3)])


@program(GRAD, train=True)
def inference_mode_block():
    def f(x):
        a = x.sin()
        with torch.inference_mode():
            y = x * 2
        return y + a, a

    return f, [(T(3),)]


@program(GRAD, train=True)
def no_grad_decorated_helper_inlined():
    @torch.no_grad()
    def stats(x):
        return x.mean(), x.std()

    def f(x):
        mean, std = stats(x)
        return (x - mean) / std

    return f, [(T(6),)]


@program(GRAD, train=True)
def module_enables_grad_under_outer_no_grad():
    class Probe(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(4, 3)

        def forward(self, x):
            with torch.enable_grad():
                y = F.gelu(self.fc(x))
            return y, self.fc(x)

    return Probe(), under_no_grad([torch.randn(2, 4)], [torch.randn(5, 4)])


@program(GRAD, train=True)
def views_taken_in_other_grad_modes():
    def f(x):
        with torch.no_grad():
            frozen = x[0]
        live = x[1:]
        return frozen, live, x * 2

    return f, [(T(3, 2),)]


@program(GRAD, train=True)
def view_taken_in_enable_grad_under_no_grad():
    def f(x):
        y = x * 2
        with torch.enable_grad():
            row = x[0]
            z = x * 3
        return y, row, z[1:]

    return f, under_no_grad([T(3, 2)])


@program(GRAD, train=True)
def graph_break_inside_enable_grad_under_no_grad():
    def f(x):
        with torch.enable_grad():
            y = x * 2
            print("inside")
            z = y * x
        return z, y

    return f, under_no_grad([T(3)])


@program(GRAD)
def branch_on_is_grad_enabled():
    def f(x, w):
        if torch.is_grad_enabled():
            return x @ w
        return (x @ w) * 0

    return f, under_no_grad([torch.randn(2, 3), T(3, 2)]) + [(torch.randn(2, 3), T(3, 2))]


@program(GRAD)
def set_grad_enabled_call_outlives_the_function():
    state = []

    def f(x):
        y = x * 2
        torch.set_grad_enabled(False)
        return y, x * 3

    def observe_and_restore():
        state.append(torch.is_grad_enabled())
        torch.set_grad_enabled(True)

    return with_state(f, state), [(T(3),), observe_and_restore, (T(3),), observe_and_restore]


# --- 3. double backward through compiled graphs --------------------------------------------------


@program(DOUBLE, train=True)
def gradient_penalty_inside_the_function():
    def f(x, w):
        y = torch.tanh(x @ w).pow(2).sum()
        (g,) = torch.autograd.grad(y, x, create_graph=True)
        return (g ** 2).sum()

    return f, [(T(3, 4), T(4, 2)), (T(5, 4), T(4, 2))]


@program(DOUBLE, train=True)
def wgan_gp_critic_penalty():
    class Penalty(nn.Module):
        def __init__(self):
            super().__init__()
            self.critic = nn.Sequential(nn.Linear(4, 8), nn.LeakyReLU(0.2), nn.Linear(8, 8), nn.Tanh(),
                                        nn.Linear(8, 1))

        def forward(self, real, fake, alpha):
            mixed = (alpha * real + (1 - alpha) * fake).detach().requires_grad_(True)
            score = self.critic(mixed)
            (g,) = torch.autograd.grad(score.sum(), mixed, create_graph=True)
            return ((g.norm(2, dim=1) - 1) ** 2).mean() + score.mean()

    return Penalty(), [(torch.randn(6, 4), torch.randn(6, 4), torch.rand(6, 1))]


@program(DOUBLE)
def hessian_vector_product():
    def f(x, w, v):
        x = x.detach().requires_grad_(True)
        y = torch.sigmoid(x @ w).pow(3).sum()
        (g,) = torch.autograd.grad(y, x, create_graph=True)
        (hv,) = torch.autograd.grad((g * v).sum(), x)
        return hv

    return f, [(torch.randn(3, 4), torch.randn(4, 2), torch.randn(3, 4))]


@program(DOUBLE, train=True)
def third_derivative():
    def f(x):
        y = (x ** 4).sum()
        (g1,) = torch.autograd.grad(y, x, create_graph=True)
        (g2,) = torch.autograd.grad(g1.sum(), x, create_graph=True)
        return g2

    return f, [(T(5),)]


@program(DOUBLE, train=True)
def penalty_through_layernorm_and_gelu():
    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.norm = nn.LayerNorm(6)
            self.fc = nn.Linear(6, 6)

        def forward(self, x):
            return F.gelu(self.fc(self.norm(x))).sum()

    block = Block()

    class Penalized(nn.Module):
        def __init__(self):
            super().__init__()
            self.block = block

        def forward(self, x):
            y = self.block(x)
            (g,) = torch.autograd.grad(y, x, create_graph=True)
            return y + g.pow(2).sum()

    return Penalized(), [(T(2, 6),)]


@program(DOUBLE, train=True)
def double_backward_with_a_mutated_buffer():
    def f(x, count):
        count.add_(1)
        y = (x.sin() * count).sum()
        (g,) = torch.autograd.grad(y, x, create_graph=True)
        return g.pow(2).sum()

    return f, [(T(4), torch.zeros(4)), (T(4), torch.ones(4))]


@program(DOUBLE, train=True)
def penalty_through_batchnorm_in_training_mode():
    class Penalty(nn.Module):
        def __init__(self):
            super().__init__()
            self.net = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4), nn.Tanh(), nn.Linear(4, 1))

        def forward(self, x):
            x = x.detach().requires_grad_(True)
            (g,) = torch.autograd.grad(self.net(x).sum(), x, create_graph=True)
            return g.pow(2).sum()

    return Penalty(), [(torch.randn(5, 3),), (torch.randn(5, 3),)]


@program(DOUBLE)
def jacobian_vector_product_by_double_backward():
    def f(x, v):
        x = x.detach().requires_grad_(True)
        y = torch.tanh(x) * 3
        u = torch.ones_like(y, requires_grad=True)
        (g,) = torch.autograd.grad(y, x, u, create_graph=True)
        (jvp,) = torch.autograd.grad(g, u, v)
        return jvp

    return f, [(torch.randn(4), torch.randn(4))]


# --- 4. mutation through views of intermediates and through inputs that share memory -------------


@program(ALIAS)
def mutate_a_row_view_of_an_intermediate():
    def f(x):
        y = x * 2
        v = y[0]
        v.add_(1)
        return y

    return f, [(torch.randn(3, 2),)]


@program(ALIAS)
def zero_the_diagonal_of_an_intermediate():
    def f(x):
        y = x + 1
        y.diagonal().zero_()
        return y * 2, y.sum()

    return f, [(torch.randn(4, 4),)]


@program(ALIAS, train=True)
def scale_a_column_then_use_the_base():
    def f(x, w):
        y = x @ w
        y[:, 1].mul_(2)
        return y.relu().sum(0), y

    return f, [(torch.randn(3, 4), T(4, 3))]


@program(ALIAS)
def chain_of_views_mutated_twice():
    def f(x):
        y = x * 1
        v = y.t()[1:].unsqueeze(0)
        v.mul_(3)
        v[0, 0].fill_(7)
        return y, v

    return f, [(torch.randn(3, 4),)]


@program(ALIAS)
def split_pieces_mutated_from_each_other():
    def f(x):
        y = x * 2
        a, b = y.split(2)
        a.zero_()
        b.add_(a + 1)
        return y

    return f, [(torch.randn(4, 3),)]


@program(ALIAS)
def overlapping_input_slices_one_mutated():
    base = torch.randn(6)
    state = {"base": base}

    def f(a, b):
        a.add_(1)
        return a + b

    return with_state(f, state), [
        (torch.randn(4), torch.randn(4)),
        (base[:4], base[2:]),
        (base[2:], base[:4]),
    ]


@program(ALIAS)
def same_tensor_passed_twice_one_mutated():
    def f(a, b):
        a.mul_(2)
        return b * 1

    x = torch.randn(4)
    return f, [(torch.randn(4), torch.randn(4)), (x, x)]


@program(ALIAS)
def input_and_its_row_view_row_mutated():
    def f(a, b):
        b.add_(1)
        return a.sum(0), b * 2

    x = torch.randn(3, 4)
    return f, [(torch.randn(3, 4), torch.randn(4)), (x, x[1])]


@program(ALIAS)
def reshaped_views_of_a_clone_mutated():
    def f(x):
        y = x.clone()
        y.view(2, 6)[1].fill_(0)
        y.unflatten(1, (2, 2))[..., 0].mul_(5)
        return y

    return f, [(torch.randn(3, 4),)]


@program(ALIAS)
def input_and_its_transpose_one_mutated():
    def f(x, y):
        y.mul_(2)
        return x + 1

    x = torch.randn(3, 4)
    return f, [(torch.randn(3, 4), torch.randn(4, 3)), (x, x.t())]
