"""Channels-last under dynamic shapes (issue 17): every output, mutated argument and gradient keeps
eager's strides (`strides=True`), each program called at three sizes with `dynamic=True`.

Two kinds of program. Most take a contiguous input, which capture makes symbolic, and lay it out
channels-last inside: every value after that is a channels-last tensor with symbolic sizes and
strides, through autograd_aot's symbolic lowering, the inductor's kernels and the outputs'
re-striding, one graph for all three sizes. The others take channels-last inputs, whose sizes capture
keeps static (it makes only contiguous inputs dynamic), so each size compiles its own graph: those
check that the recompiles keep eager's layouts, and their graph counts say when capture starts
making them dynamic.
"""

import torch
import torch.nn.functional as F
from cf_harness import program
from torch import nn

LD = "layout_dynamic"
CL = torch.channels_last
CL3 = torch.channels_last_3d


def dynamic_layout(**options):
    return program(LD, strides=True, dynamic=True, **options)


def images(sizes, channels=3, grad=False):
    return [(torch.randn(2, channels, n, n + 2, requires_grad=grad),) for n in sizes]


@dynamic_layout(graphs=1)
def pointwise_chain_on_channels_last():
    def f(x):
        y = x.to(memory_format=CL)
        z = torch.relu(y) + y.sin() * 2
        return z, z > 0, y.exp() - 1, z + torch.ones(1, 3, 1, 1)

    return f, images((4, 6, 9))


@dynamic_layout(graphs=1)
def batch_norm_eval_relu_add():
    norm = nn.BatchNorm2d(3).eval()
    norm.running_mean.uniform_(-1, 1)
    norm.running_var.uniform_(0.5, 2)

    def f(x):
        y = x.contiguous(memory_format=CL)
        z = torch.relu(norm(y))
        return z + y, z * 3

    return f, images((5, 6, 8))


@dynamic_layout(graphs=1)
def group_norm_and_nearest_upsample():
    def f(x, w, b):
        y = F.group_norm(x.to(memory_format=CL), 2, w, b)
        return y, F.interpolate(torch.relu(y), scale_factor=2, mode="nearest") + 1

    return f, [(torch.randn(2, 4, n, n + 1), torch.randn(4), torch.randn(4)) for n in (5, 6, 7)]


@dynamic_layout(graphs=1)
def bilinear_upsample_then_add():
    def f(x):
        y = x.to(memory_format=CL)
        up = F.interpolate(y, scale_factor=2, mode="bilinear", align_corners=False)
        return up, up.tanh() + 1

    return f, images((4, 5, 8))


@dynamic_layout(graphs=1)
def average_pool_of_channels_last():
    # even sizes: the pooled size is a floor division, fitted on one residue class
    def f(x):
        y = torch.relu(x.to(memory_format=CL))
        return F.avg_pool2d(y, 2), F.adaptive_avg_pool2d(y, 1) * 2, y.mean(dim=(2, 3), keepdim=True)

    return f, [(torch.randn(2, 3, n, 2 * n),) for n in (4, 6, 10)]


@dynamic_layout(graphs=1)
def one_pixel_pools_added():
    # (N, C, 1, 1) operands are channels-last and contiguous at once: eager's CPU sum and its meta
    # function stride the size-1 dims differently; those strides address no memory, the rest must match
    def f(x):
        y = torch.relu(x.to(memory_format=CL))
        return F.adaptive_avg_pool2d(y, 1) + y.mean(dim=(2, 3), keepdim=True)

    return f, [(torch.randn(2, 3, n, 2 * n),) for n in (4, 6, 10)]


@dynamic_layout(graphs=1, train=True)
def pointwise_and_group_norm_train():
    norm = nn.GroupNorm(2, 4)

    def f(x):
        y = x.to(memory_format=CL)
        return norm(torch.relu(y) * y) + y

    return f, images((5, 6, 9), channels=4, grad=True)


@dynamic_layout(graphs=1, train=True)
def batch_norm_train_relu_add():
    norm = nn.BatchNorm2d(3)

    def f(x):
        y = x.to(memory_format=CL)
        z = torch.relu(norm(y))
        return z + y.sin(), F.interpolate(z, scale_factor=2, mode="nearest")

    return f, images((4, 5, 7), grad=True)


@dynamic_layout(graphs=1, train=True)
def bilinear_and_pool_train():
    def f(x, scale):
        y = x.to(memory_format=CL) * scale
        up = F.interpolate(y, scale_factor=2, mode="bilinear", align_corners=False)
        return up.tanh(), F.avg_pool2d(y, 2)

    scale = torch.randn(1, 3, 1, 1, requires_grad=True)
    return f, [(torch.randn(2, 3, n, 2 * n, requires_grad=True), scale) for n in (4, 6, 8)]


@dynamic_layout(graphs=3)
def conv_batch_norm_relu_on_channels_last_inputs():
    conv = nn.Conv2d(3, 4, 3, padding=1).to(memory_format=CL)
    norm = nn.BatchNorm2d(4).eval()

    def f(x):
        y = torch.relu(norm(conv(x)))
        return y, F.avg_pool2d(y, 2) * 2, F.interpolate(y, scale_factor=2, mode="nearest")

    return f, [(torch.randn(2, 3, n, n).to(memory_format=CL),) for n in (4, 6, 8)]


@dynamic_layout(graphs=3, train=True)
def conv_group_norm_train_on_channels_last_inputs():
    conv = nn.Conv2d(3, 4, 3, padding=1)
    norm = nn.GroupNorm(2, 4)

    def f(x):
        y = conv(x)
        return norm(torch.relu(y)) + y

    return f, [(torch.randn(2, 3, n, n + 1).to(memory_format=CL).requires_grad_(),) for n in (4, 5, 7)]


@dynamic_layout(graphs=1)
def channels_last_3d_pointwise():
    def f(x):
        y = x.to(memory_format=CL3)
        return torch.relu(y) + 1, y * y

    return f, [(torch.randn(1, 2, n, 3, n + 1),) for n in (4, 5, 7)]
