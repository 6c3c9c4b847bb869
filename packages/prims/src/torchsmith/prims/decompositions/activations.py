"""Decompositions of activation functions and their backward ops, written as eager's CPU kernels
write them so that results match: each formula runs in opmath and rounds once."""

import math

from torchsmith.prims.decompose import dtype_is_int, register_decomposition
from torchsmith.prims.promotion import PromotionKind

SQRT1_2 = 1 / math.sqrt(2)
GELU_BETA = math.sqrt(2 / math.pi)
GELU_KAPPA = 0.044715
NORMAL_PDF = 0.5 * (2 / math.sqrt(math.pi)) * SQRT1_2  # 1 / sqrt(2 pi)


@register_decomposition("aten.relu.default")
def relu(e, a):
    # maximum propagates nan, as eager relu does.
    return e.pointwise(
        lambda x: e.maximum(x, 0 if not e.type(x).dtype.is_floating_point else 0.0),
        a,
        kind=PromotionKind.NO_OPMATH,
    )


@register_decomposition("aten.gelu.default")
def gelu(e, a, *, approximate="none"):
    def body(x):
        if approximate == "tanh":
            inner = e.mul(e.add(x, e.mul(e.mul(e.mul(x, x), x), GELU_KAPPA)), GELU_BETA)
            return e.mul(e.mul(x, 0.5), e.add(e.tanh(inner), 1.0))
        return e.mul(e.mul(x, 0.5), e.add(e.erf(e.mul(x, SQRT1_2)), 1.0))

    return e.pointwise(body, a)


@register_decomposition("aten.gelu_backward.default")
def gelu_backward(e, grad, a, *, approximate="none"):
    def body(g, x):
        if approximate == "tanh":
            x_sq = e.mul(x, x)
            inner = e.mul(e.add(x, e.mul(e.mul(x_sq, x), GELU_KAPPA)), GELU_BETA)
            tanh_inner = e.tanh(inner)
            right = e.add(tanh_inner, 1.0)
            left_derivative = e.mul(right, 0.5)
            right_derivative = e.mul(
                e.mul(e.sub(1.0, e.mul(tanh_inner, tanh_inner)), GELU_BETA),
                e.add(e.mul(x_sq, 3 * GELU_KAPPA), 1.0),
            )
            return e.mul(g, e.add(left_derivative, e.mul(e.mul(x, 0.5), right_derivative)))
        cdf = e.mul(e.add(e.erf(e.mul(x, SQRT1_2)), 1.0), 0.5)
        pdf = e.mul(e.exp(e.mul(e.mul(x, x), -0.5)), NORMAL_PDF)
        return e.mul(g, e.add(cdf, e.mul(x, pdf)))

    return e.pointwise(body, grad, a)


def _sigmoid(e, x):
    return e.reciprocal(e.add(e.exp(e.neg(x)), 1.0))


@register_decomposition("aten.silu.default")
def silu(e, a):
    return e.pointwise(lambda x: e.div(x, e.add(e.exp(e.neg(x)), 1.0)), a)


@register_decomposition("aten.silu_backward.default")
def silu_backward(e, grad, a):
    def body(g, x):
        s = _sigmoid(e, x)
        return e.mul(e.mul(g, s), e.add(e.mul(x, e.sub(1.0, s)), 1.0))

    return e.pointwise(body, grad, a)


@register_decomposition("aten.sigmoid_backward.default")
def sigmoid_backward(e, grad, output):
    return e.pointwise(lambda g, y: e.mul(g, e.mul(e.sub(1.0, y), y)), grad, output)


@register_decomposition("aten.tanh_backward.default")
def tanh_backward(e, grad, output):
    return e.pointwise(lambda g, y: e.mul(g, e.sub(1.0, e.mul(y, y))), grad, output)


@register_decomposition("aten.threshold_backward.default")
def threshold_backward(e, grad, a, threshold):
    return e.pointwise(
        lambda g, x: e.where(e.le(x, threshold), 0.0 if e.type(g).dtype.is_floating_point else 0, g),
        grad,
        a,
        kind=PromotionKind.NO_OPMATH,
    )


@register_decomposition("aten.hardtanh.default")
def hardtanh(e, a, min_val=-1, max_val=1):
    if dtype_is_int(e.type(a).dtype):
        # an integer input keeps its dtype: eager truncates the bounds to integers (-1.5 -> -1)
        min_val, max_val = int(min_val), int(max_val)
    return e.aten("aten.clamp.default", a, min_val, max_val)


@register_decomposition("aten.hardtanh_backward.default")
def hardtanh_backward(e, grad, a, min_val, max_val):
    return e.pointwise(
        lambda g, x: e.where(e.bitwise_or(e.le(x, min_val), e.ge(x, max_val)), 0.0, g),
        grad,
        a,
        kind=PromotionKind.NO_OPMATH,
    )


@register_decomposition("aten.hardsigmoid.default")
def hardsigmoid(e, a):
    return e.pointwise(lambda x: e.div(e.minimum(e.maximum(e.add(x, 3.0), 0.0), 6.0), 6.0), a)


@register_decomposition("aten.hardswish.default")
def hardswish(e, a):
    return e.pointwise(lambda x: e.div(e.mul(x, e.minimum(e.maximum(e.add(x, 3.0), 0.0), 6.0)), 6.0), a)


@register_decomposition("aten.leaky_relu.default")
def leaky_relu(e, a, negative_slope=0.01):
    return e.pointwise(lambda x: e.where(e.gt(x, 0.0), x, e.mul(x, negative_slope)), a)


@register_decomposition("aten.elu.default")
def elu(e, a, alpha=1, scale=1, input_scale=1):
    def body(x):
        negative = e.mul(e.expm1(e.mul(x, float(input_scale))), float(alpha) * float(scale))
        return e.where(e.gt(x, 0.0), e.mul(x, float(scale)), negative)

    return e.pointwise(body, a)


@register_decomposition("aten.softplus.default")
def softplus(e, a, beta=1, threshold=20):
    def body(x):
        scaled = e.mul(x, float(beta))
        return e.where(e.gt(scaled, float(threshold)), x, e.div(e.log1p(e.exp(scaled)), float(beta)))

    return e.pointwise(body, a)


@register_decomposition("aten.hardswish_backward.default")
def hardswish_backward(e, grad, a):
    def body(g, x):
        middle = e.mul(g, e.add(e.div(x, 3.0), 0.5))
        return e.where(e.lt(x, -3.0), 0.0, e.where(e.le(x, 3.0), middle, g))

    return e.pointwise(body, grad, a)


@register_decomposition("aten.leaky_relu_backward.default")
def leaky_relu_backward(e, grad, a, negative_slope, self_is_result):
    return e.pointwise(lambda g, x: e.where(e.gt(x, 0.0), g, e.mul(g, negative_slope)), grad, a)


@register_decomposition("aten.native_dropout_backward.default")
def native_dropout_backward(e, grad, mask, scale):
    # the float scale takes part in promotion: an integer gradient gives a default-dtype result, as in eager
    return e.pointwise(
        lambda g, m, s: e.mul(e.mul(g, m), s), grad, e.to(mask, e.type(grad).dtype), float(scale)
    )
