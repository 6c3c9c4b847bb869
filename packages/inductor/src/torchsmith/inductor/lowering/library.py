"""Lowerings of the kept library prims to extern calls of PyTorch's kernels: mm, bmm, convolution
and scaled dot-product attention (their constant arguments travel in `ExternCall.params`); a bias
added to an mm result joins the call as `addmm`."""

import dataclasses

import torch

from torchsmith.inductor.loop_ir.program import ExternCall, Layout, TensorView, loads
from torchsmith.inductor.lowering.channels_last import lower_convolution_channels_last
from torchsmith.inductor.lowering.fallback import extern_params
from torchsmith.inductor.lowering.lower import LoweringContext, register_lowering
from torchsmith.inductor.lowering.view_refs import ViewRef, as_tensor_view, strided_ref
from torchsmith.inductor.runtime.aligned_matmul import padded_columns
from torchsmith.ir import Node, Value
from torchsmith.ir.types import TensorType


@register_lowering("prims.mm", "prims.bmm")
def _lower_matmul(ctx: LoweringContext, node: Node) -> ViewRef:
    if node.op == "prims.bmm":
        one_matrix = _shared_matrix_bmm(ctx, node)
        if one_matrix is not None:
            return one_matrix
    (ref,) = ctx.extern(node, node.op, tensors=node.args)
    t = node.outputs[0].type
    # Only when asked (lower(addmm=True)): Triton fuses an mm's consumers into its own template.
    if ctx.fuse_addmm and node.op == "prims.mm" and t.dtype in (torch.float32, torch.float64):
        ctx.matmuls[node.outputs[0].name] = ref.buffer
    if node.op == "prims.mm" and needs_aligned_columns(t):
        return _aligned_columns(ctx, ref, "extern.aligned_mm")
    return ref


def _rows_as_one_dim(batch, rows, batch_stride, row_stride):
    """(stride of the merged rows, strides of the (batch, row) result dims in a dense product) when
    the rows of every batch element form one strided run of rows in memory, else None: batch-major
    (a contiguous input) or row-major across the batch (a sequence-first view of a batch-first tensor,
    as nn.MultiheadAttention makes)."""
    if batch_stride == rows * row_stride:
        return row_stride, lambda n: (rows * n, n)
    if row_stride == batch * batch_stride:
        return batch_stride, lambda n: (n, batch * n)
    return None


def _shared_matrix_bmm(ctx: LoweringContext, node: Node) -> ViewRef | None:
    """A bmm whose right operand is one matrix broadcast over the batch (a linear layer applied to
    a 3-d input whose rows do not merge into a 2-d view in index order) as a single mm over all
    rows taken in memory order; the product is read back through strides. A batched product with a
    stride-0 batch is several times slower in the library than one mm of the same work. None when
    the operands do not have that form (then the bmm is called as is)."""
    lhs, rhs = (as_tensor_view(ctx.ref(v)) for v in node.args)
    out = node.outputs[0].type
    if lhs is None or rhs is None or not all(isinstance(d, int) for d in (*lhs.shape, *rhs.shape)):
        return None
    if not all(isinstance(s, int) for s in (*lhs.strides, *rhs.strides)):
        return None
    batch, rows, inner = lhs.shape
    columns = rhs.shape[2]
    if batch < 2 or rows < 2 or rhs.strides[0] != 0:
        return None
    merged = _rows_as_one_dim(batch, rows, lhs.strides[0], lhs.strides[1])
    if merged is None:
        return None
    row_stride, product_strides = merged
    a = TensorView(lhs.buffer, (batch * rows, inner), (row_stride, lhs.strides[2]), lhs.offset, lhs.dtype)
    b = TensorView(rhs.buffer, (inner, columns), rhs.strides[1:], rhs.offset, rhs.dtype)
    name = ctx.fresh(node.outputs[0].name)
    layout = Layout((batch * rows, columns), (columns, 1), out.dtype)
    ctx.buffers.append(ExternCall(name, layout, "prims.mm", (a, b), ctx.origin))
    return strided_ref(name, out.shape, (*product_strides(columns), 1), out.dtype)


def fuse_bias_add(ctx: LoweringContext, node: Node) -> ViewRef | None:
    """`prims.add` of a tensor and the result of a float `prims.mm` read nowhere else (a linear
    layer's bias, as aten.addmm decomposes): the mm call becomes `torch.addmm(bias, a, b)`, which
    adds the bias inside the GEMM (eager's own path for nn.Linear) instead of a separate pass.
    None when `node` is not such an add."""
    for product, bias in (node.args[::-1], node.args):
        if not (isinstance(product, Value) and isinstance(bias, Value)):
            return None
        if product.name not in ctx.matmuls or ctx.use_count.get(product.name) != 1:
            continue
        if not isinstance(bias.type, TensorType) or bias.type.dtype != product.type.dtype:
            continue
        out = node.outputs[0].type
        bias_view = ctx.realize(ctx.ref(bias), f"{node.outputs[0].name}_bias")
        # Run where the add stands (after the bias is computed); the mm call it replaces goes away.
        position = next(k for k, b in enumerate(ctx.buffers) if b.name == ctx.matmuls[product.name])
        matmul = ctx.buffers.pop(position)
        name = ctx.fresh(node.outputs[0].name)
        layout = Layout(out.shape, out.strides, out.dtype)
        origin = f"{matmul.origin}; {ctx.origin}"
        ctx.buffers.append(ExternCall(name, layout, "extern.addmm", (bias_view, *matmul.args), origin))
        return strided_ref(name, out.shape, out.strides, out.dtype)
    return None


def fuse_convolution_relu(ctx: LoweringContext, node: Node) -> ViewRef | None:
    """`prims.maximum(y, 0)` (a ReLU) of a float32 channels-last 2-D convolution result `y` read
    nowhere else: the convolution call becomes `extern.convolution_relu` (runtime/conv_relu.py:
    oneDNN's ReLU post-op where the operands are finite, cuDNN's fused kernel on CUDA), its result
    the ReLU's, and no ReLU kernel reads and writes the image again. None when `node` is not such a
    ReLU, the image is small (conv_fold.large_image) or this torch has no fused convolution for it."""
    from torchsmith.inductor.lowering.conv_fold import large_image
    from torchsmith.inductor.runtime.conv_relu import available

    value, zero = node.args
    if not isinstance(value, Value) or isinstance(zero, Value) or isinstance(zero, bool) or zero != 0:
        return None
    buffer = ctx.convolutions.get(value.name)
    if buffer is None or ctx.use_count.get(value.name) != 1 or value.type.dtype != torch.float32:
        return None
    device = torch.device(value.type.device)
    if device.type not in ("cpu", "cuda") or not large_image(value.type.shape):
        return None
    if node.outputs[0].name in ctx.layout.nhwc_loops:
        # A graph output is copied into eager's NCHW layout anyway: the ReLU runs in that copy.
        return None
    position = next(k for k, b in enumerate(ctx.buffers) if b.name == buffer)
    call = ctx.buffers[position]
    if call.params[6] or len(call.layout.shape) != 4 or not available(device):  # transposed
        return None
    ctx.buffers[position] = dataclasses.replace(call, kernel="extern.convolution_relu",
                                                origin=f"{call.origin}; {ctx.origin}")
    return ctx.ref(value)


@register_lowering("aten.addmm.default")
def _lower_addmm(ctx: LoweringContext, node: Node) -> ViewRef:
    """`bias + a @ b` as one library call (triton/bias_matmul.py puts half-precision linear layers
    back together on the GPU path); an unaligned vocabulary head pads its operand as mm does."""
    bias, a, b = node.args[:3]
    if node.args[3:] or node.kwargs:
        raise ValueError(f"{node.op}: only beta = alpha = 1 runs as a library call")
    (ref,) = ctx.extern(node, "extern.addmm", tensors=(bias, a, b))
    if needs_aligned_columns(node.outputs[0].type):
        return _aligned_columns(ctx, ref, "extern.aligned_addmm")
    return ref


# Columns (a vocabulary head's 50257) from which an unaligned half-precision product is padded.
MIN_ALIGNED_COLUMNS = 1024


def needs_aligned_columns(t: TensorType) -> bool:
    """Whether a float16/bfloat16 CUDA mm result of type `t` (static sizes) has a column count of
    at least `MIN_ALIGNED_COLUMNS` that is not a multiple of 8: cuBLAS's kernel for it is slow."""
    return (
        t.dtype in (torch.float16, torch.bfloat16)
        and str(t.device).startswith("cuda")
        and t.rank == 2
        and all(isinstance(d, int) for d in t.shape)
        and t.shape[1] >= MIN_ALIGNED_COLUMNS
        and padded_columns(t.shape[1]) != t.shape[1]
    )


def _aligned_columns(ctx: LoweringContext, ref: ViewRef, kernel: str) -> ViewRef:
    """The mm call as `extern.aligned_mm` (runtime/aligned_matmul.py: the right operand's columns
    padded per call, the product's first columns returned as a view), its result typed with the
    padded row stride that view has; readers index it in place, a graph output is copied into
    eager's dense layout by the lowering, as any output is."""
    call = ctx.buffers[-1]
    strides = (padded_columns(call.layout.shape[1]), 1)
    layout = Layout(call.layout.shape, strides, call.layout.dtype)
    ctx.buffers[-1] = dataclasses.replace(call, kernel=kernel, layout=layout)
    return strided_ref(call.name, call.layout.shape, strides, call.layout.dtype)


# Rows from which a padded product that is a graph output is written dense by the Triton matmul
# instead of copied: below, the copy is small and the library's kernel the faster.
MIN_DENSE_ROWS = 512
_DENSE_KERNELS = {"extern.aligned_mm": "extern.dense_mm", "extern.aligned_addmm": "extern.dense_addmm"}


def dense_padded_outputs(ctx: LoweringContext, refs: list) -> None:
    """Each padded product (`_aligned_columns`) that only graph outputs read, through views that
    are eager's dense layout once the padded row stride is the real one (`logits.view(B, T, V)`),
    becomes `extern.dense_mm`: written dense in the first place, so the output needs no copy.
    `refs`: the ViewRef of each graph output, in order; the buffers in `ctx.buffers` change."""
    views = [as_tensor_view(ref) for ref in refs]
    readers = {}
    for buffer in ctx.buffers:
        for name in _buffers_read(buffer):
            readers[name] = readers.get(name, 0) + 1
    for k, call in enumerate(ctx.buffers):
        if not isinstance(call, ExternCall) or call.kernel not in _DENSE_KERNELS or readers.get(call.name):
            continue
        rows, columns = call.layout.shape
        padded = call.layout.strides[0]
        uses = [view for ref, view in zip(refs, views) if ref.buffer == call.name]
        if rows < MIN_DENSE_ROWS or not uses or any(v is None or not _dense_once_unpadded(v, padded, columns)
                                                    for v in uses):
            continue
        dense = Layout(call.layout.shape, (columns, 1), call.layout.dtype)
        ctx.buffers[k] = dataclasses.replace(call, kernel=_DENSE_KERNELS[call.kernel], layout=dense)
        for position, ref in enumerate(refs):
            if ref.buffer == call.name:
                view = views[position]
                refs[position] = strided_ref(call.name, view.shape, _unpadded(view.strides, padded, columns),
                                             view.dtype)


def _buffers_read(buffer) -> set[str]:
    if isinstance(buffer, ExternCall):
        return {arg.buffer for arg in buffer.args}
    body = getattr(buffer, "body", None)
    if body is None or not hasattr(body, "value"):
        return {"*"}  # a buffer kind this does not know: count it as reading everything
    return {load.buffer for load in loads(body.value)}


def _unpadded(strides, padded: int, columns: int) -> tuple:
    """Strides over rows `padded` elements apart as they are over rows `columns` apart."""
    return tuple((s // padded) * columns + s % padded for s in strides)


def _dense_once_unpadded(view: TensorView, padded: int, columns: int) -> bool:
    """Whether `view` (of a [rows, padded]-strided product) reads the product in eager's dense
    order: offset 0, every stride a whole number of rows or within one row, and dense once the
    row stride is `columns`."""
    if view.offset != 0 or not all(isinstance(s, int) and s >= 0 for s in (*view.strides, *view.shape)):
        return False
    if any(s % padded and s >= padded for s in view.strides):
        return False
    dense, step = [], 1
    for d in reversed(view.shape):
        dense.append(step)
        step *= d
    strides = _unpadded(view.strides, padded, columns)
    return all(d == 1 or s == e for d, s, e in zip(view.shape, strides, reversed(dense)))


@register_lowering("prims.convolution", "prims.scaled_dot_product_attention")
def _lower_library_call(ctx: LoweringContext, node: Node) -> ViewRef:
    if ctx.layout is not None and node.outputs[0].name in ctx.layout.convolutions:
        return lower_convolution_channels_last(ctx, node)
    # The prim's torch implementation calls aten's kernel (oneDNN convolution, flash attention on CPU).
    params, kwargs, tensors = extern_params(ctx, node)
    (ref,) = ctx.extern(node, node.op, params=params, kwargs=kwargs, tensors=tensors)
    if node.op == "prims.scaled_dot_product_attention":
        t = node.outputs[0].type
        follows_query = torch.device(t.device).type == "cpu" or (
            t.dtype in (torch.float16, torch.bfloat16) and len(ctx.buffers[-1].args) == 3
        )
        return _heads_last_layout(ctx, ref, follows_query)
    return ref


def _heads_last_layout(ctx: LoweringContext, ref: ViewRef, follows_query: bool) -> ViewRef:
    """A 4-d attention result (B, H, L, E) stored as (B, L, H, E), the order the attention kernels
    write when the query is a head split of a (B, L, H*E) projection (nn.MultiheadAttention,
    transformers): merging the heads back before the out-projection is then a view, not a copy,
    and the kernel's result needs no copy into the buffer either. Where the kernel torch picks
    writes in the query's order (`follows_query`: CPU flash attention; on a GPU the cuDNN and flash
    kernels of half-precision attention without a mask), a contiguous query (B, H, L, E) keeps a
    contiguous result; GPU memory-efficient attention (float32, masks) always writes heads last."""
    call = ctx.buffers[-1]
    shape = call.layout.shape
    if len(shape) != 4 or not all(isinstance(d, int) for d in shape):
        return ref
    batch, heads, length, width = shape
    strides = (length * heads * width, width, heads * width, 1)
    query = call.args[0] if call.args else None
    if follows_query and query is not None and not _heads_last(query):
        return ref
    ctx.buffers[-1] = dataclasses.replace(call, layout=Layout(shape, strides, call.layout.dtype))
    return strided_ref(call.name, shape, strides, call.layout.dtype)


def _heads_last(view) -> bool:
    """Whether a (B, H, L, E) view steps over heads inside positions (a head split of a projection),
    as CPU flash attention decides its result's order; with one head or one position either."""
    _, heads, length, _ = view.shape
    return heads == 1 or length == 1 or view.strides[1] < view.strides[2]
