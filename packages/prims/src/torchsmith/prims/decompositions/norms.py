"""Decompositions of layer, batch and group normalization and their backward ops, in float32 and
float64. In float16/bfloat16 they decline (stay whole): eager computes the statistics and the
affine output in one float32 pass and rounds the output once, but returns statistics in the input
dtype; a prims graph cannot reproduce that fused rounding, and pytorch/pytorch#168126 traced a bf16
training divergence to exactly this decomposition. A backend that wants them decomposed anyway can
convert to float32 around the op."""

import torch

from torchsmith.ir.symbolic import normalize_dim
from torchsmith.prims.decompose import KEEP, register_decomposition
from torchsmith.prims.decompositions.shapes import full

LOW_PRECISION = (torch.float16, torch.bfloat16)
DECLINES = "float16/bfloat16 inputs: eager's fused float32 rounding is not reproducible in prims (#168126)"


def _count(shape, dims):
    total = 1
    for d in dims:
        total = normalize_dim(total * shape[d])
    return total


def _spread(e, stat, shape, kept_dims):
    """A statistic over `kept_dims` broadcast back to the full shape."""
    return e.broadcast_in_dim(stat, list(shape), kept_dims)


@register_decomposition("aten.native_layer_norm.default", declines=DECLINES)
def native_layer_norm(e, x, normalized_shape, weight, bias, eps):
    t = e.type(x)
    if t.dtype in LOW_PRECISION:
        return KEEP
    axis = t.rank - len(normalized_shape)
    dims, batch = list(range(axis, t.rank)), list(range(axis))
    var, mean = e.var_mean(x, dims, 0)
    rstd = e.rsqrt(e.add(var, float(eps)))
    out = e.mul(e.sub(x, _spread(e, mean, t.shape, batch)), _spread(e, rstd, t.shape, batch))
    if weight is not None:
        out = e.mul(out, e.broadcast_to(weight, t.shape))
    if bias is not None:
        out = e.add(out, e.broadcast_to(bias, t.shape))
    return out, e.expand_dims(mean, dims), e.expand_dims(rstd, dims)


@register_decomposition("aten.layer_norm.default")
def layer_norm(e, x, normalized_shape, weight=None, bias=None, eps=1e-5, cudnn_enable=True):
    return e.aten("aten.native_layer_norm.default", x, normalized_shape, weight, bias, eps)[0]


@register_decomposition("aten.native_layer_norm_backward.default", declines=DECLINES)
def native_layer_norm_backward(e, grad_out, x, normalized_shape, mean, rstd, weight, bias, output_mask):
    t = e.type(x)
    if t.dtype in LOW_PRECISION:
        return KEEP
    axis = t.rank - len(normalized_shape)
    dims, batch = list(range(axis, t.rank)), list(range(axis))
    n = _count(t.shape, dims)
    mean_full = e.broadcast_to(mean, t.shape)
    rstd_full = e.broadcast_to(rstd, t.shape)
    x_hat = e.mul(e.sub(x, mean_full), rstd_full)
    grad_input = grad_weight = grad_bias = None
    if output_mask[0]:
        g = e.mul(grad_out, e.broadcast_to(weight, t.shape)) if weight is not None else grad_out
        sum_g = _spread(e, e.sum(g, dims), t.shape, batch)
        sum_g_xhat = _spread(e, e.sum(e.mul(g, x_hat), dims), t.shape, batch)
        inner = e.sub(e.sub(e.mul(g, n), sum_g), e.mul(x_hat, sum_g_xhat))
        grad_input = e.mul(e.div(rstd_full, n), inner)
    if output_mask[1] and weight is not None:
        grad_weight = e.sum(e.mul(grad_out, x_hat), batch)
    if output_mask[2] and bias is not None:
        grad_bias = e.sum(grad_out, batch)
    return grad_input, grad_weight, grad_bias


def _channel_dims(rank):
    return [0] + list(range(2, rank))


@register_decomposition("aten._native_batch_norm_legit_functional.default", declines=DECLINES)
def batch_norm_functional(e, x, weight, bias, running_mean, running_var, training, momentum, eps):
    t = e.type(x)
    if t.dtype in LOW_PRECISION:
        return KEEP
    reduce = _channel_dims(t.rank)
    channel = [1]
    if training:
        var, mean = e.var_mean(x, reduce, 0)
        invstd = e.reciprocal(e.sqrt(e.add(var, float(eps))))
        n = _count(t.shape, reduce)
        new_mean = e.add(e.mul(mean, float(momentum)), e.mul(running_mean, 1.0 - momentum))
        unbiased = e.mul(var, float(n) / max(n - 1, 1)) if isinstance(n, int) else e.div(e.mul(var, n), n - 1)
        new_var = e.add(e.mul(unbiased, float(momentum)), e.mul(running_var, 1.0 - momentum))
        saved_mean, saved_invstd = mean, invstd
    else:
        mean, invstd = running_mean, e.reciprocal(e.sqrt(e.add(running_var, float(eps))))
        new_mean, new_var = e.clone(running_mean), e.clone(running_var)
        # per-channel saved statistics where the trace declared them so (the meta kernel's sizes),
        # empty ones where it asked the device's kernel (_eval_statistics below)
        saved_mean, saved_invstd = e.clone(running_mean), invstd
    out = e.mul(e.sub(x, _spread(e, mean, t.shape, channel)), _spread(e, invstd, t.shape, channel))
    if weight is not None:
        out = e.mul(out, _spread(e, weight, t.shape, channel))
    if bias is not None:
        out = e.add(out, _spread(e, bias, t.shape, channel))
    if not training:
        out, saved_mean, saved_invstd = _eval_statistics(e, (out, saved_mean, saved_invstd))
    return out, saved_mean, saved_invstd, new_mean, new_var


@register_decomposition("aten.native_batch_norm_backward.default", declines=DECLINES)
def batch_norm_backward(
    e, grad_out, x, weight, running_mean, running_var, save_mean, save_invstd, train, eps, output_mask
):
    t = e.type(x)
    if t.dtype in LOW_PRECISION:
        return KEEP
    reduce, channel = _channel_dims(t.rank), [1]
    if train:
        mean, invstd = save_mean, save_invstd
    else:
        mean, invstd = running_mean, e.reciprocal(e.sqrt(e.add(running_var, float(eps))))
    centered = e.sub(x, _spread(e, mean, t.shape, channel))
    grad_sum = e.sum(grad_out, reduce)
    dot = e.sum(e.mul(grad_out, centered), reduce)
    scale = e.mul(invstd, weight) if weight is not None else invstd
    grad_input = grad_weight = grad_bias = None
    if output_mask[0]:
        if train:
            n = _count(t.shape, reduce)
            projection = e.div(e.mul(dot, e.mul(invstd, invstd)), n)
            grad_mean = e.div(grad_sum, n)
            inner = e.sub(
                e.sub(grad_out, e.mul(centered, _spread(e, projection, t.shape, channel))),
                _spread(e, grad_mean, t.shape, channel),
            )
            grad_input = e.mul(inner, _spread(e, scale, t.shape, channel))
        else:
            grad_input = e.mul(grad_out, _spread(e, scale, t.shape, channel))
    if output_mask[1]:
        grad_weight = e.mul(dot, invstd)
    if output_mask[2]:
        grad_bias = grad_sum
    return grad_input, grad_weight, grad_bias


@register_decomposition("aten.native_group_norm.default", declines=DECLINES)
def native_group_norm(e, x, weight, bias, n, c, hxw, group, eps):
    t = e.type(x)
    if t.dtype in LOW_PRECISION:
        return KEEP
    grouped = e.reshape(
        x, [n, group, normalize_dim(c // group * hxw) if isinstance(c, int) else c * hxw // group]
    )
    var, mean = e.var_mean(grouped, [2], 0)
    rstd = e.rsqrt(e.add(var, float(eps)))
    gt = e.type(grouped)
    normalized = e.mul(e.sub(grouped, _spread(e, mean, gt.shape, [0, 1])), _spread(e, rstd, gt.shape, [0, 1]))
    out = e.reshape(normalized, list(t.shape))
    if weight is not None:
        out = e.mul(out, _spread(e, weight, t.shape, [1]))
    if bias is not None:
        out = e.add(out, _spread(e, bias, t.shape, [1]))
    return out, mean, rstd


@register_decomposition("aten.native_group_norm_backward.default", declines=DECLINES)
def native_group_norm_backward(e, grad_out, x, mean, rstd, weight, n, c, hxw, group, output_mask):
    t = e.type(x)
    if t.dtype in LOW_PRECISION:
        return KEEP
    per_group = normalize_dim(c // group * hxw) if isinstance(c, int) else c * hxw // group
    grouped_shape = [n, group, per_group]
    x_hat = e.mul(
        e.sub(e.reshape(x, grouped_shape), _spread(e, mean, grouped_shape, [0, 1])),
        _spread(e, rstd, grouped_shape, [0, 1]),
    )
    channel_shape = [n, c, hxw]
    dy = e.reshape(grad_out, channel_shape)
    grad_input = grad_weight = grad_bias = None
    if output_mask[0]:
        g = e.mul(dy, _spread(e, weight, channel_shape, [1])) if weight is not None else dy
        g = e.reshape(g, grouped_shape)
        sum_g = _spread(e, e.sum(g, [2]), grouped_shape, [0, 1])
        sum_g_xhat = _spread(e, e.sum(e.mul(g, x_hat), [2]), grouped_shape, [0, 1])
        inner = e.sub(e.sub(e.mul(g, per_group), sum_g), e.mul(x_hat, sum_g_xhat))
        grad_input = e.reshape(
            e.mul(e.div(_spread(e, rstd, grouped_shape, [0, 1]), per_group), inner), list(t.shape)
        )
    if output_mask[1]:
        grad_weight = e.sum(e.mul(dy, e.reshape(x_hat, channel_shape)), [0, 2])
    if output_mask[2]:
        grad_bias = e.sum(dy, [0, 2])
    return grad_input, grad_weight, grad_bias


@register_decomposition("aten._native_batch_norm_legit_no_training.default", declines=DECLINES)
def batch_norm_inference(e, x, weight, bias, running_mean, running_var, momentum, eps):
    result = batch_norm_functional(e, x, weight, bias, running_mean, running_var, False, momentum, eps)
    return result if result is KEEP else result[:3]


def _eval_statistics(e, result):
    """Inference batch norm's saved statistics: empty where the trace declared them empty (the CPU
    kernel returns empty ones; autograd_aot's device_shapes asks it), else the statistics used."""
    out, saved_mean, saved_invstd = result
    declared = [v.type for v in e.current_outputs[1:3]]
    if len(declared) == 2 and all(getattr(t, "shape", None) == (0,) for t in declared):
        saved_mean, saved_invstd = (
            full(e, [0], 0.0, dtype=t.dtype, device=torch.device(t.device)) for t in declared
        )
    return out, saved_mean, saved_invstd


@register_decomposition(
    "aten.native_batch_norm.default",
    "aten._native_batch_norm_legit.default",
    declines="training=True, which updates the running statistics in place (functionalization "
    "turns it into _native_batch_norm_legit_functional), and " + DECLINES,
)
def batch_norm_eval(e, x, weight, bias, running_mean, running_var, training, momentum, eps):
    if training:
        return KEEP
    result = batch_norm_functional(e, x, weight, bias, running_mean, running_var, False, momentum, eps)
    return result if result is KEEP else result[:3]
