"""Tensor programs: torch functions, nn.functional, methods, operators, in-place ops, indexing, views."""

import torch
import torch.nn.functional as F
from cf_harness import program

T = lambda *shape: torch.randn(*shape)
X = "tensors"


def one(fn, *args):
    return fn, [args]


_CASES = [
    ("add_mul_sub_div", lambda x, y: (x + y, x - y, x * y, x / y), (T(3, 4), T(3, 4))),
    ("reflected_scalar_ops", lambda x: (2 + x, 3 - x, 4 * x, 1 / (x.abs() + 1), 2**x), (T(5),)),
    ("pow_floordiv_mod", lambda x: (x**2, x // 0.5, x % 0.7), (T(5),)),
    ("matmul_operator", lambda a, b: a @ b, (T(3, 4), T(4, 5))),
    (
        "comparisons_give_bool_tensors",
        lambda x, y: (x < y, x <= y, x > 0, x >= y, x == y, x != y),
        (T(4), T(4)),
    ),
    ("unary_ops", lambda x: (-x, +x, abs(x), ~(x > 0)), (T(4),)),
    (
        "bitwise_ops_on_ints",
        lambda a, b: (a & b, a | b, a ^ b, a << 1, a >> 1),
        (torch.arange(8), torch.arange(8).flip(0)),
    ),
    (
        "torch_functions",
        lambda x: (torch.sin(x), torch.exp(x), torch.tanh(x), torch.sigmoid(x), torch.clamp(x, -0.5, 0.5)),
        (T(3, 3),),
    ),
    (
        "reductions",
        lambda x: (x.sum(), x.mean(dim=0), x.amax(dim=1, keepdim=True), torch.std(x), x.prod(1)),
        (T(3, 4),),
    ),
    (
        "max_with_dim_named_tuple",
        lambda x: (torch.max(x, dim=1).values, torch.max(x, 1)[1], x.min(dim=0).indices),
        (T(3, 4),),
    ),
    (
        "softmax_and_log_softmax",
        lambda x: (F.softmax(x, dim=-1), F.log_softmax(x, dim=1), x.softmax(0)),
        (T(2, 5),),
    ),
    (
        "activations",
        lambda x: (F.relu(x), F.gelu(x), F.silu(x), F.leaky_relu(x, 0.1), F.elu(x), F.hardtanh(x)),
        (T(6),),
    ),
    ("linear_functional", lambda x, w, b: F.linear(x, w, b), (T(2, 4), T(3, 4), T(3))),
    ("conv2d_functional", lambda x, w: F.conv2d(x, w, padding=1, stride=2), (T(1, 2, 8, 8), T(3, 2, 3, 3))),
    (
        "pooling",
        lambda x: (F.max_pool2d(x, 2), F.avg_pool2d(x, 2), F.adaptive_avg_pool2d(x, 1)),
        (T(1, 2, 4, 4),),
    ),
    ("layer_norm_functional", lambda x, w, b: F.layer_norm(x, (4,), w, b), (T(2, 4), T(4), T(4))),
    ("dropout_eval_is_identity", lambda x: F.dropout(x, p=0.5, training=False), (T(4),)),
    (
        "cat_stack_split",
        lambda x, y: (torch.cat([x, y], dim=0), torch.stack((x, y)), torch.split(x, 1, dim=0)),
        (T(2, 3), T(2, 3)),
    ),
    ("chunk_and_unbind", lambda x: (x.chunk(2, dim=1), x.unbind(0)), (T(2, 4),)),
    (
        "view_reshape_permute",
        lambda x: (x.view(6, 4), x.reshape(-1), x.permute(2, 0, 1), x.transpose(0, 1)),
        (T(2, 3, 4),),
    ),
    (
        "flatten_squeeze_unsqueeze",
        lambda x: (x.flatten(1), x.unsqueeze(0).shape, x[:, :1].squeeze(1)),
        (T(2, 3, 1),),
    ),
    (
        "expand_repeat_contiguous",
        lambda x: (x.expand(3, 4), x.repeat(2, 1), x.expand(2, 4).contiguous()),
        (T(1, 4),),
    ),
    ("T_and_mT_properties", lambda x: (x.T, x.mT, x.t()), (T(3, 4),)),
    ("basic_indexing", lambda x: (x[0], x[1:, ::2], x[..., -1], x[None, :, 1], x[:, [0, 2]]), (T(3, 4),)),
    (
        "index_with_tensor",
        lambda x, i: (x[i], x.index_select(0, i), torch.gather(x, 1, i.unsqueeze(1).expand(2, 2))),
        (T(4, 3), torch.tensor([2, 0])),
    ),
    ("where_and_masked_fill", lambda x: (torch.where(x > 0, x, 0.0), x.masked_fill(x < 0, 1.0)), (T(5),)),
    (
        "creation_functions",
        lambda x: (
            torch.zeros(2, 3) + x,
            torch.ones_like(x),
            torch.full((2, 3), 7.0),
            torch.arange(6).view(2, 3) * x,
            torch.eye(3),
        ),
        (T(2, 3),),
    ),
    (
        "dtype_conversions",
        lambda x: (x.to(torch.float64), x.int(), x.long().float(), x.type_as(torch.zeros(1).half())),
        (T(4),),
    ),
    (
        "shape_queries_as_constants",
        lambda x: x.new_zeros(x.shape[0], x.size(1)) + x.numel() + x.dim() + len(x),
        (T(3, 2),),
    ),
    (
        "einsum_and_bmm",
        lambda a, b: (torch.einsum("bij,bjk->bik", a, b), torch.bmm(a, b)),
        (T(2, 3, 4), T(2, 4, 2)),
    ),
    ("cumsum_sort_topk", lambda x: (x.cumsum(0), torch.sort(x).values, torch.topk(x, 2).indices), (T(6),)),
    (
        "norm_and_normalize",
        lambda x: (x.norm(), F.normalize(x, dim=1), torch.linalg.vector_norm(x, dim=0)),
        (T(3, 4),),
    ),
    ("integer_and_bool_tensors", lambda x: ((x > 0).sum(), (x > 0).any(), x.argmax(), x.int() + 1), (T(6),)),
    ("type_promotion_int_plus_float", lambda a, b: (a + b, a * 2.5, a / 2), (torch.arange(4), T(4))),
    ("scalar_tensor_broadcast", lambda x, s: x * s + s, (T(3, 3), torch.tensor(2.0))),
    ("tensor_from_python_list", lambda x: x + torch.tensor([1.0, 2.0, 3.0]), (T(3),)),
    ("clone_detach", lambda x: (x.clone(), x.detach() * 2), (torch.randn(3, requires_grad=True),)),
    ("requires_grad_propagates", lambda x, w: (x * w).sum(), (T(3), torch.randn(3, requires_grad=True))),
    ("complex_expression", lambda x, y: torch.tanh(x @ y.t() / 3) * (x.sum() + 1), (T(4, 5), T(6, 5))),
    (
        "lerp_addcmul_baddbmm",
        lambda a, b, c: (torch.lerp(a, b, 0.3), torch.addcmul(a, b, c, value=0.5)),
        (T(4), T(4), T(4)),
    ),
    (
        "scatter_functional",
        lambda x, i: torch.zeros(3, 4).scatter(0, i, x),
        (T(2, 4), torch.tensor([[0, 1, 2, 0], [2, 0, 1, 1]])),
    ),
    (
        "embedding_and_one_hot",
        lambda w, i: (F.embedding(i, w), F.one_hot(i, 5)),
        (T(5, 3), torch.tensor([1, 4, 0])),
    ),
    (
        "cross_entropy_and_mse",
        lambda x, t, y: (F.cross_entropy(x, t), F.mse_loss(x, y)),
        (T(4, 5), torch.tensor([1, 0, 4, 2]), T(4, 5)),
    ),
]


def _register(name, fn, args):
    def make():
        return fn, [tuple(a.clone() if isinstance(a, torch.Tensor) else a for a in args)]

    make.__name__ = name
    program(X)(make)


for _name, _fn, _args in _CASES:
    _register(_name, _fn, _args)


@program(X)
def inplace_ops_on_intermediate():
    def f(x):
        y = x * 2
        y.add_(1)
        y.mul_(3)
        y.clamp_(min=0)
        return y

    return one(f, T(4))


@program(X)
def augmented_assignment_on_tensor():
    def f(x, y):
        z = x.clone()
        z += y
        z *= 2
        z -= 1
        z /= 4
        return z

    return f, [(T(3), T(3))]


@program(X)
def index_assignment():
    def f(x):
        y = torch.zeros(3, 4)
        y[0] = x[0]
        y[1:, 2] = 5.0
        y[y > 4] = -1.0
        return y

    return one(f, T(3, 4))


@program(X)
def views_share_storage():
    def f(x):
        y = x.clone()
        v = y.view(-1)
        v[0] = 100.0
        return y, v.sum()

    return one(f, T(2, 2))


@program(X)
def out_of_place_method_chain():
    def f(x):
        return x.abs().sqrt().log1p().mul(2).sub(1).div(3).pow(2).neg().exp()

    return one(f, T(5))


@program(X)
def loop_building_tensor_list():
    def f(x):
        outs = []
        for i in range(x.shape[0]):
            outs.append(x[i] * i)
        return torch.stack(outs)

    return one(f, T(4, 3))


@program(X)
def iterate_over_tensor_rows():
    def f(x):
        total = torch.zeros(3)
        for row in x:
            total = total + row
        return total

    return one(f, T(4, 3))


@program(X)
def unpack_tensor_rows():
    def f(x):
        a, b = x
        return a - b

    return one(f, T(2, 3))


@program(X, graphs=1)
def error_inside_the_graph_has_eager_type():
    # The index is only known at run time, so the graph itself raises: the user must see the same
    # exception type and message as eager, not a wrapper.
    def f(x, index):
        return torch.index_select(x, 0, index) * 2

    x = torch.randn(4, 3)
    return f, [(x, torch.tensor([0, 2])), (x, torch.tensor([1, 7]))]
