"""Decompositions of weight normalization (`torch.nn.utils.weight_norm` and its parametrization, which
call `aten._weight_norm_interface` on the CPU when the kept dim is the first or the last) and of its
backward: w = g * v / ||v||, the norm taken over every dim but `dim`. Low-precision floats compute in
float32 and round once, as eager's kernel does; the norm is returned in float32 for them too."""

from torchsmith.prims.decompose import register_decomposition
from torchsmith.prims.promotion import opmath_dtype


def _others(e, v, dim: int) -> tuple[int, list[int]]:
    """`dim` made non-negative, and the dims the norm reduces."""
    rank = e.type(v).rank
    dim = dim + rank if dim < 0 else dim
    return dim, [d for d in range(rank) if d != dim]


def _kept(e, x, v, dim: int, others: list[int]):
    """A statistic over `dim` (shape [size of dim]) in the norm's shape (v's, 1 in every other dim)."""
    shape = [1 if d in others else e.type(v).shape[d] for d in range(e.type(v).rank)]
    return e.broadcast_in_dim(x, shape, [dim] if dim < e.type(v).rank else [])


def _spread(e, x, v):
    return e.broadcast_to(x, e.type(v).shape)


@register_decomposition("aten._weight_norm_interface.default")
def weight_norm_interface(e, v, g, dim=0):
    compute = opmath_dtype(e.type(v).dtype)
    dim, others = _others(e, v, dim)
    vc = e.to(v, compute)
    norm = _kept(e, e.sqrt(e.sum(e.mul(vc, vc), others)), v, dim, others)
    scale = e.div(e.to(g, compute), norm)
    w = e.to(e.mul(vc, _spread(e, scale, v)), e.type(v).dtype)
    return w, norm


@register_decomposition("aten._weight_norm_interface_backward.default")
def weight_norm_interface_backward(e, grad_w, saved_v, saved_g, saved_norms, dim):
    # w = g * v / n with n = ||v||: grad_g = sum(grad_w * v) / n, grad_v = g / n * (grad_w - v * grad_g / n)
    dtype = e.type(saved_v).dtype
    compute = opmath_dtype(dtype)
    dim, others = _others(e, saved_v, dim)
    gw, v = e.to(grad_w, compute), e.to(saved_v, compute)
    g, n = e.to(saved_g, compute), e.to(saved_norms, compute)
    grad_g = e.div(_kept(e, e.sum(e.mul(gw, v), others), saved_v, dim, others), n)
    scale = _spread(e, e.div(g, n), saved_v)
    along = _spread(e, e.div(grad_g, n), saved_v)
    grad_v = e.mul(scale, e.sub(gw, e.mul(v, along)))
    return e.to(grad_v, dtype), e.to(grad_g, e.type(saved_g).dtype)
