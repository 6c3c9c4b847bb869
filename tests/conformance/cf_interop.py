"""Interop programs: memory formats (strides compared, not only values) and NumPy arrays.

"layout": a channels-last (or channels-last-3d, transposed, permuted) input keeps the layout eager
gives every output: pointwise ops with broadcasting and mixed layouts (TensorIterator's rule),
convolution, batch norm, pooling, interpolation, cat, clone/contiguous/.to(memory_format=...),
`*_like`, keepdim reductions, and the gradients of training programs. These programs run with
`strides=True`: every output, mutated argument and gradient is compared with eager's strides too.

"numpy": arrays passed in and out, `x.numpy()`, `torch.from_numpy`, `np.asarray`, NumPy arithmetic
and functions between tensor ops, and memory shared between an array and a tensor, mutated on either
side. Capture runs NumPy code eagerly between graphs (see the capture README), so these programs
also state their graph breaks.
"""

import sys

import numpy as np
import torch
import torch.nn.functional as F
from cf_harness import program
from torch import nn

L = "layout"
N = "numpy"
CL = torch.channels_last
CL3 = torch.channels_last_3d


def cl(*shape):
    """A random channels-last (rank 4) or channels-last-3d (rank 5) tensor."""
    return torch.randn(*shape).to(memory_format=CL if len(shape) == 4 else CL3)


def layout(**options):
    return program(L, strides=True, **options)


# --- layout: pointwise ------------------------------------------------------------------------------


@layout(graphs=1)
def channels_last_pointwise_and_broadcasting():
    def fn(x, bias, row, s):
        return torch.relu(x), x.sin() + 1, -x, x + bias, x * row, x * s, x > 0, x.to(torch.float64)

    return fn, [(cl(2, 3, 4, 5), torch.randn(3, 1, 1), torch.randn(5), torch.tensor(2.0))]


@layout(graphs=1)
def group_norm_keeps_channels_last():
    # the CPU composite normalizes a channels-last input in place of layout; 3-d inputs too
    def fn(x, x3, w, b):
        y = torch.nn.functional.group_norm(x, 2, w, b)
        return y, torch.relu(y) + x, torch.nn.functional.group_norm(x3, 4, None, None, 1e-3)

    return fn, [(cl(2, 4, 5, 6), cl(1, 4, 3, 4, 5), torch.randn(4), torch.randn(4))]


@layout(graphs=1, train=True)
def group_norm_of_channels_last_trains_as_eager():
    norm = torch.nn.GroupNorm(2, 4)

    def fn(x):
        return norm(x).sum(dim=(2, 3)) * 2

    fn.norm = norm
    return fn, [(cl(2, 4, 5, 6).requires_grad_(),)]


@layout(graphs=1)
def mixed_layout_operands_follow_eager():
    # TensorIterator: the first operand that is not contiguous decides; ties go to contiguous
    def fn(x, y, t):
        return x + y, y + x, torch.where(x > 0, x, y), x * y.mean(1, keepdim=True), t.exp() + t.t().t()

    return fn, [(cl(2, 3, 4, 5), torch.randn(2, 3, 4, 5), torch.randn(5, 4).t())]


@layout(graphs=1)
def ambiguous_shapes_keep_eager_strides():
    # size-1 channels or spatial dims: channels-last and contiguous are both true; strides still eager's.
    # (Not here: CPU unary kernels such as exp give a size-1 channel dim a contiguous stride where
    # torch's meta kernels keep the input's; both layouts answer is_contiguous alike.)
    def fn(a, b, c):
        return a * 3, b + 1, c.clone(), c - 1, (a * 2).permute(0, 2, 3, 1), b.sum((2, 3), keepdim=True)

    return fn, [(cl(1, 1, 4, 5), cl(2, 3, 1, 1), torch.randn(2, 1, 3, 3).to(memory_format=CL))]


@layout(graphs=1)
def permuted_and_transposed_inputs():
    def fn(p, t, u):
        return p + 1, t.exp() * 2, (t + u).relu(), (p * 2).transpose(1, 2), (p + 1)[:, 1:]

    return fn, [(torch.randn(2, 3, 4, 5).permute(0, 2, 1, 3), torch.randn(4, 6).t(), torch.randn(6, 4))]


# --- layout: library ops ----------------------------------------------------------------------------


@layout(graphs=1)
def conv_batchnorm_relu_residual_pool():
    def fn(x, w, mean, var, weight, bias):
        y = F.relu(F.batch_norm(F.conv2d(x, w, padding=1), mean, var, weight, bias)) + x
        return y, F.max_pool2d(y, 2), F.adaptive_avg_pool2d(y, 1), F.adaptive_avg_pool2d(y, 1).flatten(1)

    args = (cl(2, 3, 8, 8), torch.randn(3, 3, 3, 3), torch.randn(3), torch.rand(3) + 0.5,
            torch.randn(3), torch.randn(3))
    return fn, [args]


@layout(graphs=1)
def convolution_layout_from_input_or_weight():
    # oneDNN returns channels-last when the input or the weight is; the meta kernel says contiguous
    def fn(x, w_cl, xc, w):
        return F.conv2d(xc, w_cl), F.conv2d(x, w, stride=2), F.conv2d(x, w).flatten(2)

    return fn, [(cl(2, 3, 8, 8), torch.randn(4, 3, 3, 3).to(memory_format=CL), torch.randn(2, 3, 8, 8),
                 torch.randn(4, 3, 3, 3))]


@layout(graphs=1)
def interpolate_cat_pad_pixel_shuffle():
    def fn(x, y, z):
        return (
            F.interpolate(x, scale_factor=2, mode="nearest"),
            F.interpolate(x, size=(6, 7), mode="bilinear"),
            torch.cat([x, y], 1),
            torch.cat([x, z], 1),
            torch.cat([x, x], 0),
            F.pad(x, (1, 1, 1, 1)),
            F.pad(x, (1, 2, 1, 1), mode="reflect"),
            F.pad(x, (2, 2, 1, 1), mode="replicate"),
            F.channel_shuffle(y, 2),
            torch.stack([x, y[:, :3]]),
        )

    return fn, [(cl(2, 3, 4, 4), cl(2, 4, 4, 4), torch.randn(2, 2, 4, 4))]


@layout(graphs=1)
def clone_contiguous_and_to_memory_format():
    def fn(x, c, v):
        return (
            x.clone(),
            x.clone(memory_format=torch.contiguous_format),
            (x + 1).contiguous(),
            (c + 1).to(memory_format=CL),
            c.to(memory_format=CL),
            (v * 2).to(memory_format=CL3),
            x.to(memory_format=torch.contiguous_format) * 2,
        )

    return fn, [(cl(2, 3, 4, 5), torch.randn(2, 3, 4, 5), torch.randn(2, 3, 2, 3, 4))]


@layout(graphs=1)
def like_factories_keep_layout():
    def fn(x):
        return (
            torch.empty_like(x).fill_(2.0),
            torch.zeros_like(x),
            torch.ones_like(x, dtype=torch.float64),
            torch.full_like(x, 3.0) + x,
            torch.zeros_like(x, memory_format=torch.contiguous_format),
            x.new_zeros(x.shape),
        )

    return fn, [(cl(2, 3, 4, 5),)]


@layout(graphs=1)
def keepdim_reductions_and_normalizations():
    def fn(x):
        return (
            x.sum(1, keepdim=True),
            x.mean((2, 3), keepdim=True),
            x.amax(3, keepdim=True),
            x.var(1, keepdim=True),
            x.softmax(1),
            F.layer_norm(x, (5,)),
            x.cumsum(1),
        )

    return fn, [(cl(2, 3, 4, 5),)]


@layout(graphs=1)
def channels_last_3d_pointwise_conv_pool():
    def fn(x, w):
        return x.exp() * 2, F.max_pool3d(x, 2), F.conv3d(x, w), F.interpolate(x, scale_factor=2)

    return fn, [(cl(1, 2, 4, 4, 4), torch.randn(3, 2, 2, 2, 2))]


@layout(graphs=2)
def layout_change_between_calls_recompiles():
    def fn(x):
        return x.relu() * 2, x.sum(1, keepdim=True)

    return fn, [(cl(2, 3, 4, 5),), (torch.randn(2, 3, 4, 5),), (cl(2, 3, 4, 5),)]


@layout(graphs=1, train=True)
def channels_last_training_gradients():
    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(3, 4, 3, padding=1)
            self.bn = nn.BatchNorm2d(4)

        def forward(self, x):
            y = F.relu(self.bn(self.conv(x)))
            return F.max_pool2d(y, 2), F.adaptive_avg_pool2d(y, 1) + x.mean()

    block = Block().to(memory_format=CL)
    return block, [(cl(2, 3, 8, 8).requires_grad_(),), (cl(2, 3, 8, 8).requires_grad_(),)]


@layout(graphs=1, train=True)
def mixed_layout_training_gradients():
    def fn(x, y, b):
        return (x * y + b).tanh(), F.interpolate(x, scale_factor=2, mode="bilinear")

    return fn, [(cl(2, 3, 4, 4).requires_grad_(), torch.randn(2, 3, 4, 4, requires_grad=True),
                 torch.randn(3, 1, 1, requires_grad=True))]


# --- NumPy ------------------------------------------------------------------------------------------


@program(N, graphs=1, breaks=2)
def numpy_view_write_changes_the_tensor():
    def fn(x):
        a = x.numpy()
        a[0] = 5.0
        return x * 2

    return fn, [(torch.arange(4.0),), (torch.arange(4.0) - 1,)]


@program(N, graphs=1, breaks=3)
def tensor_write_seen_by_earlier_array():
    def fn(x):
        a = x.numpy()
        x.add_(1)
        return a, torch.from_numpy(a * 2)

    return fn, [(torch.arange(4.0),), (torch.ones(4),)]


@program(N, graphs=1, breaks=1)
def from_numpy_shares_memory_with_the_array():
    def fn(arr, y):
        t = torch.from_numpy(arr)
        t.mul_(2)
        return t + y, arr

    return fn, [(np.arange(4.0), torch.ones(4)), (np.full(4, 3.0), torch.ones(4))]


@program(N, graphs=2, breaks=4)
def numpy_arithmetic_between_tensor_ops():
    def fn(x):
        y = x.sin()
        a = y.numpy() * 2 + 1
        z = torch.from_numpy(a).cos()
        return z + x, a

    return fn, [(torch.randn(5),), (torch.randn(5),)]


@program(N, graphs=2, breaks=9)
def numpy_functions_on_arrays_from_tensors():
    def fn(x):
        a = np.asarray(x * 2)
        b = np.exp(a) + np.sum(a, axis=0)
        c = np.where(a > 0, a, 0.0)
        return torch.as_tensor(b) + x, c, float(np.max(a))

    return fn, [(torch.randn(3, 4),), (torch.randn(3, 4),)]


@program(N, graphs=2, breaks=3)
def arrays_as_inputs_and_outputs():
    # new array contents on every call: nothing of a first call's array may be kept in a graph
    def fn(x, arr, items):
        return x * 2, arr * 3, arr, items[0] + 1, x + torch.from_numpy(arr)

    return fn, [
        (torch.ones(3), np.ones(3, dtype=np.float32), [np.zeros(2)]),
        (torch.ones(3), np.full(3, 2.0, dtype=np.float32), [np.ones(2)]),
    ]


@program(N, graphs=2, breaks=3)
def numpy_scalars_are_not_constants():
    def fn(x, s, k):
        y = x.sin() + 1
        return y * s, y + k, s * 2, y.cos()

    return fn, [(torch.ones(3), np.float64(2.0), np.int64(3)), (torch.ones(3), np.float64(5.0), np.int64(7))]


@program(N, graphs=3, breaks=4)
def in_place_numpy_on_argument_arrays():
    def fn(x, arr):
        arr += 1
        arr[0] = x.sum().item()
        return x + 1, arr

    return fn, [(torch.ones(3), np.ones(3)), (torch.full((3,), 2.0), np.zeros(3))]


@program(N, graphs=1, breaks=7)
def shared_memory_is_reported_as_in_eager():
    def fn(x):
        a = x.numpy()
        b = a[1:]
        b *= 10
        y = x + 1
        return np.shares_memory(a, x.numpy()), np.shares_memory(y.numpy(), a), y, x

    return fn, [(torch.arange(5.0),)]


@program(N, graphs=3, breaks=2)
def array_aliasing_a_computed_tensor():
    def fn(x):
        y = x * 2
        a = y.numpy()
        y.add_(1)  # the array sees it
        a[0] = -1.0  # the tensor sees it
        return y.sum(), a, y

    return fn, [(torch.arange(4.0),), (torch.ones(4),)]


def _scaled_by_array_sum(a, x):
    return x * float(a.sum()) + 1


@program(N, graphs=1, breaks=2)
def numpy_inside_an_inlined_callee():
    def fn(x, arr):
        return _scaled_by_array_sum(arr, x).relu()

    return fn, [(torch.randn(3), np.ones(2)), (torch.randn(3), np.full(2, 3.0))]


@program(N, graphs=2, breaks=4)
def module_holding_a_numpy_table():
    class Scaled(nn.Module):
        def __init__(self):
            super().__init__()
            self.table = np.arange(3.0)
            self.lin = nn.Linear(3, 3)

        def forward(self, x):
            self.table[0] += 1  # native, every call
            return self.lin(x) * torch.as_tensor(self.table, dtype=torch.float32)

    return Scaled(), [(torch.randn(2, 3),), (torch.randn(2, 3),), (torch.randn(2, 3),)]


@program(N, graphs=2, breaks=3)
def as_tensor_and_asarray_share_memory():
    def fn(x, arr):
        t = torch.as_tensor(arr)  # no copy: a graph's in-place write lands in arr
        t.add_(1)
        a = np.asarray(x)
        a += 1  # lands in x
        return arr, t * 2, x * 2

    return fn, [
        (torch.ones(3), np.ones(3, dtype=np.float32)),
        (torch.zeros(3), np.zeros(3, dtype=np.float32)),
    ]


# 3.12+ inlines the comprehension: each `* y` between two NumPy breaks is a graph of its own
@program(N, graphs=1 if sys.version_info < (3, 12) else 3, breaks=4)
def arrays_in_containers_and_stored_into():
    def fn(x, d, out):
        y = x.sin()
        out[:] = y.numpy()
        return [torch.from_numpy(a) * y for a in d["arrays"]], out, d

    return fn, [
        (torch.randn(2), {"arrays": [np.ones(2, dtype=np.float32), np.full(2, 2.0, dtype=np.float32)]},
         np.zeros(2, dtype=np.float32)),
    ]


@program(N, graphs=1, breaks=1)
def numpy_of_a_tensor_that_requires_grad_raises():
    def fn(x):
        y = x * 2
        return y.numpy()

    return fn, [(torch.randn(3, requires_grad=True),)]
