"""Layout optimization for 2-D convolutions: run them, and the pointwise work around them, on
channels-last (NHWC) tensors.

oneDNN's CPU convolutions are much faster on channels-last tensors than on NCHW ones, and a
convolution given a channels-last input returns a channels-last result. So when a prims graph holds
a 2-D convolution of a float16/bfloat16/float32 tensor whose result is not a graph output,
`plan_channels_last` picks:

- `convolutions`: those convolutions; their input and weight are made channels-last (a small copy
  kernel each call when they are not: nothing is cached, weights may change between calls), and
  their results are channels-last (torch returns them so: no copy);
- `values`, stored channels-last: forward, an elementwise result of rank 4 that reads a channels-last
  value of its own shape (a BatchNorm + ReLU epilogue), or a slice of one (a max-pool's window), so
  the next convolution takes it as it is, and the padding of a channels-last value (max-pool's);
  backward, one read only by chosen convolutions (as their input) or by channels-last values (a
  normalization of the image before the first convolution);
- `nhwc_loops`: an elementwise graph output that reads a channels-last value keeps the layout the
  graph declares (eager's strides: what the user sees never changes), but loops in NHWC order.

Not chosen: a convolution whose result is a graph output. In a training forward every convolution
result is one (saved for the backward, whose aten.convolution_backward runs NCHW): channels-last
there only adds a copy per convolution, so training graphs keep NCHW. float64 stays NCHW too
(oneDNN has no float64 convolution).

How it is stored: a channels-last buffer is written in memory order, as an NHWC-shaped buffer whose
loops run over (N, H, W, C) with C innermost (vectorized, contiguous loads of the other channels-last
buffers and of per-channel parameters); readers see it through an NCHW view with strides (HWC, 1,
WC, C), which is also what extern calls get as a `TensorView`.
"""

from dataclasses import dataclass

import torch

from torchsmith.inductor.fusion.scheduler import FusionDecision, log_decision
from torchsmith.inductor.loop_ir.program import (
    ComputedBuffer,
    ExternCall,
    Layout,
    Pointwise,
    index_var,
    substitute,
)
from torchsmith.inductor.lowering.view_refs import ViewRef, as_tensor_view, strided_ref
from torchsmith.ir import Graph, Node, Value
from torchsmith.ir.symbolic import compare, normalize_dim
from torchsmith.ir.types import TensorType

CONVOLUTION = "prims.convolution"
DTYPES = (torch.float32, torch.bfloat16, torch.float16)
# The logical dims of an NCHW tensor in memory order when it is channels-last.
NHWC_ORDER = (0, 2, 3, 1)


@dataclass(frozen=True, slots=True)
class ChannelsLastPlan:
    """The values of a prims graph stored channels-last: `convolutions` (their results) and `values`
    (elementwise results); `nhwc_loops`: elementwise graph outputs that read channels-last values,
    computed in NHWC loop order into their declared layout; `decision` records it in the fusion log."""

    convolutions: frozenset[str]
    values: frozenset[str]
    nhwc_loops: frozenset[str]
    decision: FusionDecision


def channels_last_strides(shape) -> tuple:
    """The strides of an NCHW `shape` laid out NHWC (`torch.channels_last`)."""
    n, c, h, w = shape
    return (normalize_dim(h * w * c), 1, normalize_dim(w * c), c)


def _is_4d_float(value) -> bool:
    t = getattr(value, "type", None)
    return isinstance(t, TensorType) and len(t.shape) == 4 and t.dtype in DTYPES


def _elementwise(node: Node) -> bool:
    from torchsmith.prims.core import PRIMS

    info = PRIMS.get(node.op)
    return info is not None and info.kind.startswith("elementwise.") and len(node.outputs) == 1


def _eligible_convolution(node: Node) -> bool:
    return node.op == CONVOLUTION and _is_4d_float(node.args[0]) and _is_4d_float(node.outputs[0])


def plan_channels_last(graph: Graph) -> ChannelsLastPlan | None:
    """Which values of `graph` to store channels-last; None when it holds no 2-D convolution of a
    float16/bfloat16/float32 tensor (then every value keeps its declared layout)."""
    outputs = {v.name for v in graph.outputs if isinstance(v, Value)}
    found = [n for n in graph.nodes if _eligible_convolution(n)]
    convolutions = [n for n in found if n.outputs[0].name not in outputs]
    if not convolutions:
        if found:
            # A training forward returns every convolution result (saved for the backward, which
            # runs aten's NCHW kernels): channels-last would only add a copy per convolution.
            names = ", ".join(f"%{n.outputs[0].name}" for n in found)
            reason = (
                "convolution layout: NCHW: each 2-D convolution result is a graph output (saved for backward)"
            )
            log_decision(FusionDecision("layout", names, graph.name, False, reason))
        return None
    chosen = {n.outputs[0].name for n in convolutions}
    conv_results = set(chosen)

    def candidate_layout(out) -> bool:
        return _is_4d_float(out) and out.name not in outputs and out.name not in chosen

    def candidate(node: Node) -> bool:
        return _elementwise(node) and candidate_layout(node.outputs[0] if node.outputs else None)

    nhwc_loops = set()
    views = set()  # slices of channels-last values: channels-last strides, no storage of their own
    for node in graph.nodes:  # forward: epilogues of channels-last values
        out = node.outputs[0] if node.outputs else None
        source = getattr(node.args[0], "name", None) if node.args else None
        if node.op == "prims.slice" and _is_4d_float(out) and source in chosen | views:
            views.add(out.name)
        elif node.op == "prims.pad" and candidate_layout(out) and source in chosen:
            chosen.add(out.name)  # max-pool's padding: its windows are then read channels-last too
        elif _elementwise(node) and _is_4d_float(out) and out.name not in chosen:
            shape = out.type.shape
            if any(v.name in chosen | views and v.type.shape == shape for v in node.inputs):
                # An output keeps its layout, but loops in the order of what it reads: contiguous,
                # vectorized loads and scattered stores beat scattered loads and contiguous stores.
                (chosen if candidate(node) else nhwc_loops).add(node.outputs[0].name)
    users = graph.users()
    for node in reversed(graph.nodes):  # backward: prologues of convolutions
        if not candidate(node):
            continue
        readers = users.get(node.outputs[0].name, [])
        if readers and all(_wants_channels_last(r, node.outputs[0], chosen, conv_results) for r in readers):
            chosen.add(node.outputs[0].name)
    names = ", ".join(f"%{n.outputs[0].name}" for n in convolutions)
    reason = (
        f"convolution layout: channels-last for {len(convolutions)} 2-D convolution(s) and "
        f"{len(chosen) - len(conv_results)} elementwise result(s) around them; graph outputs keep eager's "
        "strides"
    )
    decision = FusionDecision("layout", names, graph.name, True, reason)
    log_decision(decision)
    values = frozenset(chosen - conv_results)
    return ChannelsLastPlan(frozenset(conv_results), values, frozenset(nhwc_loops), decision)


def _wants_channels_last(reader: Node, value: Value, chosen: set[str], conv_results: set[str]) -> bool:
    """Whether `reader` reads `value` where a channels-last tensor is what it wants: as the input
    (not the weight) of a chosen convolution, or as an operand of a channels-last value."""
    if not reader.outputs or reader.outputs[0].name not in chosen:
        return False
    if reader.outputs[0].name in conv_results:
        return getattr(reader.args[0], "name", None) == value.name and all(
            getattr(a, "name", None) != value.name for a in reader.args[1:]
        )
    return True


# ---- lowering -------------------------------------------------------------------------------------


def _is_channels_last(ref: ViewRef) -> bool:
    view = as_tensor_view(ref)
    if view is None:
        return False
    want = channels_last_strides(ref.shape)
    return all(
        compare("==", d, 1) is True or compare("==", s, w) is True
        for d, s, w in zip(ref.shape, view.strides, want)
    )


def _nhwc_buffer(ctx, name: str, ref_shape, dtype, value, strides=None) -> ViewRef:
    """A buffer computed in NHWC loop order whose element (n, c, h, w) is `value` (over the NCHW
    loop variables `i0..i3`), stored with NCHW `strides` (default: channels-last ones), read back
    through its NCHW view."""
    order = NHWC_ORDER
    # Loop k of the buffer runs over logical dim order[k]: rename the value's variables to match.
    renamed = substitute(value, {index_var(order[k]): index_var(k) for k in range(4)})
    shape = tuple(normalize_dim(ref_shape[d]) for d in order)
    strides = channels_last_strides(ref_shape) if strides is None else tuple(strides)
    name = ctx.fresh(name)
    layout = Layout(shape, tuple(strides[d] for d in order), dtype)
    ctx.buffers.append(ComputedBuffer(name, layout, Pointwise(shape, renamed), ctx.origin))
    return strided_ref(name, ref_shape, strides, dtype)


def _fresh_pointwise(ctx, ref: ViewRef) -> ComputedBuffer | None:
    """The 4-d pointwise buffer that `ref` reads plainly, if the node just lowered wrote it (so
    nothing has read it yet and its loops and storage may still change)."""
    last = ctx.buffers[-1] if ctx.buffers else None
    if (
        isinstance(last, ComputedBuffer)
        and last.name == ref.buffer
        and isinstance(last.body, Pointwise)
        and len(last.layout.shape) == 4
        and tuple(last.layout.shape) == tuple(ref.shape)
        and ref == strided_ref(last.name, last.layout.shape, last.layout.strides, last.layout.dtype)
    ):
        return last
    return None


def relayout_result(ctx, name: str, ref: ViewRef) -> ViewRef:
    """`ref`, the result of the node defining value `name`, as the plan `ctx.layout` wants it: stored
    channels-last (a value of `plan.values`), or looping in NHWC order into its own layout (one of
    `plan.nhwc_loops`). Results that are not a fresh pointwise buffer (views, reductions, ...)
    stay as they are."""
    plan = ctx.layout
    if name not in plan.values and name not in plan.nhwc_loops:
        return ref
    buffer = _fresh_pointwise(ctx, ref)
    if buffer is None:
        return ref
    ctx.buffers.pop()
    ctx.names.discard(buffer.name)
    strides = None if name in plan.values else buffer.layout.strides
    return _nhwc_buffer(ctx, buffer.name, ref.shape, buffer.layout.dtype, buffer.body.value, strides)


def as_channels_last(ctx, ref: ViewRef, name: str) -> ViewRef:
    """`ref` as a channels-last tensor: itself when it already is one, else a copy (one small
    kernel per call: weights may change between calls, so nothing is cached)."""
    if _is_channels_last(ref):
        return ref
    return _nhwc_buffer(ctx, name, ref.shape, ref.dtype, ref.load(tuple(index_var(k) for k in range(4))))


def lower_convolution_channels_last(ctx, node: Node) -> ViewRef:
    """`prims.convolution` on channels-last input and weight, its result declared channels-last
    (torch returns it so: no copy)."""
    from torchsmith.inductor.lowering.fallback import extern_params

    params, kwargs, tensors = extern_params(ctx, node)
    base = node.outputs[0].name
    views = []
    for k, value in enumerate(tensors):
        ref = ctx.ref(value)
        if k < 2 and len(ref.shape) == 4:  # input and weight; a bias stays as it is
            ref = as_channels_last(ctx, ref, f"{base}_{'input' if k == 0 else 'weight'}_nhwc")
        views.append(ctx.realize(ref, f"{base}_arg{k}"))
    t = node.outputs[0].type
    strides = channels_last_strides(t.shape)
    name = ctx.fresh(base)
    ctx.buffers.append(
        ExternCall(name, Layout(t.shape, strides, t.dtype), node.op, tuple(views), ctx.origin, params, kwargs)
    )
    ctx.convolutions[node.outputs[0].name] = name
    return strided_ref(name, t.shape, strides, t.dtype)
