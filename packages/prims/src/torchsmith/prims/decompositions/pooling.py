"""Decompositions of 2-d pooling and nearest upsampling: windows become strided slices of a
padded input (one per kernel offset) combined pointwise, in eager's kernel-offset order so
that sums round the same way and max picks the same index."""

import torch

from torchsmith.ir.symbolic import floordiv, normalize_dim
from torchsmith.prims.decompose import KEEP, register_decomposition
from torchsmith.prims.promotion import opmath_dtype


def _pair(v, default=None):
    if v is None or (isinstance(v, (list, tuple)) and len(v) == 0):
        return default
    return [v, v] if isinstance(v, int) else list(v) * (2 if len(v) == 1 else 1)


def _out_size(size, kernel, stride, padding, dilation=1):
    return normalize_dim(
        floordiv(normalize_dim(size + 2 * padding - dilation * (kernel - 1) - 1), stride) + 1
    )


def _windows(e, x, kernel, stride, padding, dilation, fill):
    """(kernel offset, strided window) for every offset, over the last two dims of `x` padded with `fill`."""
    t = e.type(x)
    rank = t.rank
    h, w = t.shape[-2:]
    out = [_out_size(s, k, st, p, d) for s, k, st, p, d in zip((h, w), kernel, stride, padding, dilation)]
    if any(padding):
        x = e.pad(x, [0, 0] * (rank - 2) + [padding[0], padding[0], padding[1], padding[1]], fill)
    for kh in range(kernel[0]):
        for kw in range(kernel[1]):
            window = x
            for dim, k, st, d, o in (
                (rank - 2, kh, stride[0], dilation[0], out[0]),
                (rank - 1, kw, stride[1], dilation[1], out[1]),
            ):
                window = e.slice(window, dim, k * d, normalize_dim(k * d + (o - 1) * st + 1), st)
            yield (kh, kw), window, out


@register_decomposition("aten.max_pool2d_with_indices.default", declines="ceil_mode=True or non-float inputs")
def max_pool2d_with_indices(e, x, kernel_size, stride=(), padding=0, dilation=1, ceil_mode=False):
    t = e.type(x)
    if ceil_mode or not t.dtype.is_floating_point:
        return KEEP
    kernel = _pair(kernel_size)
    stride, padding, dilation = _pair(stride, kernel), _pair(padding), _pair(dilation)
    width = t.shape[-1]
    best = index = None
    for (kh, kw), window, out in _windows(e, x, kernel, stride, padding, dilation, -float("inf")):
        rows = e.iota(out[0], kh * dilation[0] - padding[0], stride[0], dtype=torch.int64, device=t.device)
        cols = e.iota(out[1], kw * dilation[1] - padding[1], stride[1], dtype=torch.int64, device=t.device)
        flat = e.add(e.broadcast_in_dim(e.mul(rows, width), out, [0]), e.broadcast_in_dim(cols, out, [1]))
        flat = e.broadcast_in_dim(flat, list(e.type(window).shape), [t.rank - 2, t.rank - 1])
        if best is None:
            best, index = window, flat
            continue
        # Eager scans the window row by row and moves on a strictly larger value or a nan.
        take = e.bitwise_or(e.gt(window, best), e.isnan(window))
        best, index = e.where(take, window, best), e.where(take, flat, index)
    return best, index


@register_decomposition("aten.max_pool2d_with_indices_backward.default")
def max_pool2d_with_indices_backward(e, grad, x, kernel_size, stride, padding, dilation, ceil_mode, indices):
    t = e.type(x)
    lead = list(t.shape[:-2])
    plane = normalize_dim(t.shape[-2] * t.shape[-1])
    g = e.type(grad)
    out_plane = normalize_dim(g.shape[-2] * g.shape[-1])
    compute = opmath_dtype(t.dtype)
    zeros = e.full(lead + [plane], 0.0, dtype=compute, device=t.device)
    flat_grad = e.reshape(e.to(grad, compute), lead + [out_plane])
    flat_index = e.reshape(indices, lead + [out_plane])
    summed = e.scatter_add(zeros, len(lead), flat_index, flat_grad)
    return e.to(e.reshape(summed, list(t.shape)), t.dtype)


@register_decomposition("aten.avg_pool2d.default", declines="ceil_mode=True")
def avg_pool2d(
    e, x, kernel_size, stride=(), padding=0, ceil_mode=False, count_include_pad=True, divisor_override=None
):
    t = e.type(x)
    if ceil_mode:
        return KEEP
    kernel = _pair(kernel_size)
    stride, padding = _pair(stride, kernel), _pair(padding)
    compute = opmath_dtype(t.dtype)
    total = None
    for _, window, _ in _windows(e, e.to(x, compute), kernel, stride, padding, [1, 1], 0.0):
        total = window if total is None else e.add(total, window)
    if divisor_override:
        divisor = divisor_override
    elif count_include_pad or not any(padding):
        divisor = kernel[0] * kernel[1]
    else:  # count the real (unpadded) elements of every window
        ones = e.full(list(t.shape[-2:]), 1.0, dtype=compute, device=t.device)
        counts = None
        for _, window, _ in _windows(e, ones, kernel, stride, padding, [1, 1], 0.0):
            counts = window if counts is None else e.add(counts, window)
        divisor = e.broadcast_to(counts, e.type(total).shape)
    return e.to(e.div(total, divisor), t.dtype)


def _adaptive_kernel(e, x, output_size):
    h, w = e.type(x).shape[-2:]
    if not all(isinstance(v, int) for v in (h, w, *output_size)) or h % output_size[0] or w % output_size[1]:
        return None
    return [h // output_size[0], w // output_size[1]]


@register_decomposition(
    "aten._adaptive_avg_pool2d.default", declines="input sizes that the output size does not divide"
)
def adaptive_avg_pool2d(e, x, output_size):
    kernel = _adaptive_kernel(e, x, output_size)
    if kernel is None:
        return KEEP
    return avg_pool2d(e, x, kernel, kernel)


@register_decomposition(
    "aten._adaptive_avg_pool2d_backward.default", declines="input sizes that the output size does not divide"
)
def adaptive_avg_pool2d_backward(e, grad, x):
    t, g = e.type(x), e.type(grad)
    kernel = _adaptive_kernel(e, x, g.shape[-2:])
    if kernel is None:
        return KEEP
    lead = list(t.shape[:-2])
    oh, ow = g.shape[-2:]
    compute = opmath_dtype(t.dtype)
    spread = e.broadcast_in_dim(
        e.to(grad, compute),
        lead + [oh, kernel[0], ow, kernel[1]],
        list(range(len(lead))) + [len(lead), len(lead) + 2],
    )
    return e.to(e.div(e.reshape(spread, list(t.shape)), kernel[0] * kernel[1]), t.dtype)


@register_decomposition("aten.upsample_nearest2d.default")
def upsample_nearest2d_sized(e, x, output_size, scales_h=None, scales_w=None):
    """The `.default` overload: output sizes and optional per-dim scales, no `scale_factors`."""
    return upsample_nearest2d(e, x, output_size, None, scales_h, scales_w)


@register_decomposition("aten.upsample_nearest2d.vec")
def upsample_nearest2d(e, x, output_size, scale_factors=None, scales_h=None, scales_w=None):
    t = e.type(x)
    if output_size is None:
        output_size = [int(s * f) for s, f in zip(t.shape[-2:], scale_factors)]
        scales = [1.0 / f for f in scale_factors]
    else:
        given = [scales_h, scales_w] if scale_factors is None else list(scale_factors)
        scales = [1.0 / f if f else None for f in given]
    indices = []
    for size, out, scale in zip(t.shape[-2:], output_size, scales):
        if scale is None:
            scale = size / out  # eager computes this ratio in float32, as the multiply below is
        position = e.iota(out, 0, 1, dtype=torch.float32, device=t.device)
        source = e.convert_element_type(
            e.floor(e.mul(position, float(torch.tensor(scale, dtype=torch.float32)))), torch.int64
        )
        indices.append(e.minimum(source, size - 1))
    out_shape = list(output_size)
    rows = e.broadcast_in_dim(indices[0], out_shape, [0])
    cols = e.broadcast_in_dim(indices[1], out_shape, [1])
    return e.index(x, [None] * (t.rank - 2) + [rows, cols])


@register_decomposition("aten.avg_pool2d_backward.default", declines="ceil_mode=True")
def avg_pool2d_backward(
    e, grad, x, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override
):
    t = e.type(x)
    if ceil_mode:
        return KEEP
    kernel = _pair(kernel_size)
    stride, padding = _pair(stride, kernel), _pair(padding)
    compute = opmath_dtype(t.dtype)
    g = e.to(grad, compute)
    out = list(e.type(grad).shape[-2:])
    if divisor_override:
        g = e.div(g, divisor_override)
    elif count_include_pad or not any(padding):
        g = e.div(g, kernel[0] * kernel[1])
    else:
        ones = e.full(list(t.shape[-2:]), 1.0, dtype=compute, device=t.device)
        counts = None
        for _, window, _ in _windows(e, ones, kernel, stride, padding, [1, 1], 0.0):
            counts = window if counts is None else e.add(counts, window)
        g = e.div(g, e.broadcast_to(counts, e.type(g).shape))
    # Every kernel offset sends each output's share back to its input position (padded coordinates).
    padded = [normalize_dim(s + 2 * p) for s, p in zip(t.shape[-2:], padding)]
    total = e.full(list(t.shape[:-2]) + padded, 0.0, dtype=compute, device=t.device)
    for kh in range(kernel[0]):
        for kw in range(kernel[1]):
            rows = e.broadcast_in_dim(
                e.iota(out[0], kh, stride[0], dtype=torch.int64, device=t.device), out, [0]
            )
            cols = e.broadcast_in_dim(
                e.iota(out[1], kw, stride[1], dtype=torch.int64, device=t.device), out, [1]
            )
            total = e.index_put(total, [None] * (t.rank - 2) + [rows, cols], g, True)
    for dim, p, size in ((t.rank - 2, padding[0], t.shape[-2]), (t.rank - 1, padding[1], t.shape[-1])):
        if p:
            total = e.slice(total, dim, p, normalize_dim(p + size), 1)
    return e.to(total, t.dtype)


def _linear_source(e, size, out, align_corners, scale, device):
    """(i0, i1, lambda0, lambda1) along one dim: the two source indices and weights per output index."""
    position = e.iota(out, 0, 1, dtype=torch.float32, device=device)
    if align_corners:
        ratio = (size - 1) / (out - 1) if out > 1 else 0.0
        source = e.mul(position, float(torch.tensor(ratio, dtype=torch.float32)))
    else:
        ratio = scale if scale is not None else size / out
        ratio = float(torch.tensor(ratio, dtype=torch.float32))
        source = e.maximum(e.sub(e.mul(e.add(position, 0.5), ratio), 0.5), 0.0)
    low = e.convert_element_type(source, torch.int64)  # source >= 0: truncation is floor
    high = e.minimum(e.add(low, 1), size - 1)
    lambda1 = e.sub(source, e.convert_element_type(low, torch.float32))
    return low, high, e.sub(1.0, lambda1), lambda1


@register_decomposition("aten.upsample_bilinear2d.vec", declines="non-float inputs or symbolic sizes")
def upsample_bilinear2d(e, x, output_size, align_corners, scale_factors=None):
    t = e.type(x)
    if not t.dtype.is_floating_point or not all(isinstance(s, int) for s in t.shape[-2:]):
        return KEEP
    if output_size is None:
        output_size = [int(s * f) for s, f in zip(t.shape[-2:], scale_factors)]
        scales = [1.0 / f for f in scale_factors]
    else:
        scales = [1.0 / f if f else None for f in (scale_factors or [None, None])]
    compute = opmath_dtype(t.dtype)
    work = e.to(x, compute)
    (h0, h1, hl0, hl1), (w0, w1, wl0, wl1) = (
        _linear_source(e, size, out, align_corners, scale, t.device)
        for size, out, scale in zip(t.shape[-2:], output_size, scales)
    )
    out_shape = list(t.shape[:-2]) + list(output_size)
    lead = [None] * (t.rank - 2)
    total = None
    for rows, row_weight in ((h0, hl0), (h1, hl1)):
        for cols, col_weight in ((w0, wl0), (w1, wl1)):
            grid = list(output_size)
            picked = e.index(
                work, lead + [e.broadcast_in_dim(rows, grid, [0]), e.broadcast_in_dim(cols, grid, [1])]
            )
            weight = e.mul(
                e.broadcast_in_dim(row_weight, grid, [0]), e.broadcast_in_dim(col_weight, grid, [1])
            )
            term = e.mul(
                picked, e.broadcast_in_dim(e.to(weight, compute), out_shape, [t.rank - 2, t.rank - 1])
            )
            total = term if total is None else e.add(total, term)
    return e.to(total, t.dtype)
