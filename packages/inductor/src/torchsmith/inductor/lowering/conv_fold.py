"""Per-channel affine epilogues of convolutions folded into the convolution (a `Graph -> Graph`
pass over the prims graph, for the CPU pipeline, and on the GPU before a ReLU).

BatchNorm in eval mode decomposes, after a convolution `y`, to

    ((y - broadcast(mean)) * broadcast(1 / sqrt(var + eps))) * broadcast(gamma) + broadcast(beta)

four elementwise ops over the whole image with one vector per output channel. Any chain of adds,
subtractions, products and quotients of `y` with such per-channel vectors (or Python scalars) is
`y * a + c` for two vectors `a`, `c`, and `conv(x, w, b) * a + c == conv(x, w * a, b * a + c)`
(the weight scaled along its output-channel dim). So the chain becomes one convolution whose
weight and bias are computed in the graph from the current parameters on every call (a few
thousand elements: weights and statistics may change between calls; nothing is folded from
values at compile time), and the image is read and written once less per op. The result differs
from eager's by rounding only (the products are reassociated).

Only convolutions of at least `MIN_ELEMENTS` results (`large_image`): on small images
aten.convolution runs kernels of its own, not oneDNN's, and there a bias costs more than the
pass it saves (and oneDNN's fixed cost per call, tens of microseconds, is more than the ReLU
post-op of lowering/library.py saves). Only float32 and float64 convolutions that are not
transposed: in half precision the decomposition computes the epilogue in float32 between
conversions, which a folded weight would round differently. A value of the chain that is a
graph output, or is read by any other node, ends the chain there (a training forward returns the
convolution's result for its backward: no fold).
"""

from dataclasses import dataclass

import torch

from torchsmith.ir import Graph, GraphBuilder, Node, Value
from torchsmith.ir.types import TensorType

CONVOLUTION = "prims.convolution"
MIN_ELEMENTS = 1 << 16
DTYPES = (torch.float32, torch.float64)
# The chain's ops and the operand orders that stay affine in the convolution's result.
AFFINE_OPS = {"prims.add": (0, 1), "prims.sub": (0, 1), "prims.mul": (0, 1), "prims.div": (0,)}


@dataclass(frozen=True, slots=True)
class AffineStep:
    """One op of a folded chain: `op` with the running value at argument `position` and the
    per-channel `operand` (a rank-1 Value or a Python number) at the other."""

    op: str
    position: int
    operand: object


@dataclass(frozen=True, slots=True)
class FoldedConvolution:
    """A convolution node and the chain of affine steps after it; `last` defines the value the
    folded convolution takes over."""

    convolution: Node
    steps: tuple[AffineStep, ...]
    last: Node


def _tensor_type(value) -> TensorType | None:
    return value.type if isinstance(value, Value) and isinstance(value.type, TensorType) else None


def _channel_vector(producers: dict[str, Node], arg, shape, channels, dtype):
    """The per-channel operand `arg` stands for: a Value of `channels` elements (a vector, or a
    `[1, C, 1, 1]` view of one) that `arg` broadcasts along dim 1 of `shape`, or a Python number;
    None for anything else."""
    if isinstance(arg, (int, float)) and not isinstance(arg, bool):
        return arg
    node = producers.get(arg.name) if isinstance(arg, Value) else None
    if node is None or node.op != "prims.broadcast_in_dim":
        return None
    source, out_shape, dims = node.args[:3]
    t = _tensor_type(source)
    if t is None or t.dtype != dtype or tuple(out_shape) != tuple(shape):
        return None
    # The source's dim that lands on the channel dim has the channels; any other has one element.
    if not any(d == 1 and size == channels for d, size in zip(dims, t.shape)):
        return None
    if any(d != 1 and size != 1 for d, size in zip(dims, t.shape)):
        return None
    return source


def large_image(shape) -> bool:
    """Whether a convolution result of `shape` (static sizes) has at least `MIN_ELEMENTS`."""
    count = 1
    for d in shape:
        if not isinstance(d, int):
            return False
        count *= d
    return count >= MIN_ELEMENTS


def _is_zero(operand) -> bool:
    """A Python number 0 (its reciprocal is not a number to fold)."""
    return not isinstance(operand, Value) and operand == 0


def _read_by_relu(users: dict[str, list[Node]], outputs: set[str], value: Value) -> bool:
    """Whether `value` is no graph output and its one reader is a ReLU of it, `prims.maximum(value, 0)`,
    whose own result is no graph output."""
    readers = users.get(value.name, [])
    if value.name in outputs or len(readers) != 1 or readers[0].op != "prims.maximum":
        return False
    relu = readers[0]
    zero = relu.args[1] if len(relu.args) == 2 else None
    plain_zero = not isinstance(zero, (Value, bool)) and zero == 0
    return relu.args[0] == value and plain_zero and relu.outputs[0].name not in outputs


def match_folds(graph: Graph, *, before_relu: bool = False) -> list[FoldedConvolution]:
    """Every convolution of `graph` followed by at least one foldable affine step; with `before_relu`,
    only chains whose result is read by a ReLU alone (which the GPU runs inside the convolution)."""
    producers, users = graph.producers(), graph.users()
    outputs = {v.name for v in graph.outputs if isinstance(v, Value)}
    found = []
    for node in graph.nodes:
        if node.op != CONVOLUTION or node.args[6]:
            continue
        t = _tensor_type(node.outputs[0])
        if t is None or t.dtype not in DTYPES or t.rank < 3 or not large_image(t.shape):
            continue
        if before_relu and t.dtype != torch.float32:
            continue  # the fused ReLU runs for float32 convolutions
        steps, last, current = [], node, node.outputs[0]
        while current.name not in outputs and len(users.get(current.name, [])) == 1:
            user = users[current.name][0]
            if user.op not in AFFINE_OPS or len(user.args) != 2 or user.kwargs:
                break
            if _tensor_type(user.outputs[0]) != t:
                break
            position = next((k for k, a in enumerate(user.args) if a == current), None)
            if position not in AFFINE_OPS[user.op] or user.args[1 - position] == current:
                break
            operand = _channel_vector(producers, user.args[1 - position], t.shape, t.shape[1], t.dtype)
            if operand is None or (user.op == "prims.div" and _is_zero(operand)):
                break
            steps.append(AffineStep(user.op, position, operand))
            last, current = user, user.outputs[0]
        if steps and (not before_relu or _read_by_relu(users, outputs, last.outputs[0])):
            found.append(FoldedConvolution(node, tuple(steps), last))
    return found


class _Emitter:
    """Appends the vector arithmetic of a fold to a builder; `None` stands for "no term"
    (a scale of 1, a shift of 0) and Python numbers stay numbers until they meet a vector."""

    def __init__(self, builder: GraphBuilder, taken: set[str], base: str, source, channels):
        self.builder, self.taken, self.base, self.source = builder, taken, base, source
        self.channels = channels

    def name(self, hint: str) -> str:
        name, k = f"{self.base}_{hint}", 0
        while name in self.taken:
            k += 1
            name = f"{self.base}_{hint}_{k}"
        self.taken.add(name)
        return name

    def op(self, op: str, a, b):
        if not isinstance(a, Value) and not isinstance(b, Value):
            return {"prims.add": a + b, "prims.sub": a - b, "prims.mul": a * b, "prims.div": a / b}[op]
        a, b = self.vector(a), self.vector(b)
        return self.builder.op(op, a, b, out_name=self.name("fold"), source=self.source)

    def vector(self, a):
        """`a` as a rank-1 vector where it is a `[1, C, 1, 1]` view of one (numbers stay numbers)."""
        if not isinstance(a, Value) or a.type.rank == 1:
            return a
        name = self.name("vector")
        return self.builder.op("prims.reshape", a, [self.channels], out_name=name, source=self.source)

    def neg(self, a):
        if a is None:
            return -1
        if not isinstance(a, Value):
            return -a
        return self.builder.op("prims.neg", self.vector(a), out_name=self.name("fold"), source=self.source)


def _fold_terms(emit: _Emitter, fold: FoldedConvolution, bias):
    """(scale, shift) with `chain(conv(x, w, b)) == conv(x, w, 0) * scale + shift`."""
    scale, shift = None, bias
    for step in fold.steps:
        v = step.operand
        if step.op == "prims.add":
            shift = v if shift is None else emit.op("prims.add", shift, v)
        elif step.op == "prims.sub" and step.position == 0:
            shift = emit.neg(v) if shift is None else emit.op("prims.sub", shift, v)
        elif step.op == "prims.sub":  # v - (y * scale + shift)
            scale = emit.neg(scale)
            shift = v if shift is None else emit.op("prims.sub", v, shift)
        elif step.op == "prims.mul":
            scale = v if scale is None else emit.op("prims.mul", scale, v)
            shift = None if shift is None else emit.op("prims.mul", shift, v)
        else:  # prims.div, the running value divided by v
            scale = emit.op("prims.div", 1.0, v) if scale is None else emit.op("prims.div", scale, v)
            shift = None if shift is None else emit.op("prims.div", shift, v)
    return scale, shift


def _emit_folded(builder: GraphBuilder, taken: set[str], fold: FoldedConvolution) -> None:
    conv = fold.convolution
    x, weight, bias, *rest = conv.args
    out = fold.last.outputs[0]
    t = out.type
    emit = _Emitter(builder, taken, conv.outputs[0].name, conv.source, t.shape[1])
    scale, shift = (emit.vector(v) for v in _fold_terms(emit, fold, bias))
    w_type = weight.type
    if isinstance(scale, Value):
        scale = builder.op(
            "prims.broadcast_in_dim",
            scale,
            list(w_type.shape),
            [0],
            out_name=emit.name("scale"),
            source=conv.source,
        )
    if scale is not None:
        weight = builder.op("prims.mul", weight, scale, out_name=emit.name("weight"), source=conv.source)
    if shift is not None and not isinstance(shift, Value):
        shift = builder.op(
            "prims.full",
            [t.shape[1]],
            shift,
            dtype=t.dtype,
            device=str(t.device),
            out_name=emit.name("bias"),
            source=conv.source,
        )
    builder.op(CONVOLUTION, x, weight, shift, *rest, out_name=out.name, out_type=t, source=conv.source)


def fold_conv_affine(graph: Graph, *, before_relu: bool = False) -> Graph:
    """`graph` with each convolution and the per-channel affine chain after it (BatchNorm in eval
    mode) as one convolution of a scaled weight and a shifted bias; the graph itself when there is
    none. The chain's vector operands are left for the lowering's dead-buffer removal where nothing
    else reads them. `before_relu`: only chains a ReLU reads (the GPU's cuDNN adds a bias in a pass
    of its own, but a bias and ReLU within the convolution's kernel)."""
    folds = match_folds(graph, before_relu=before_relu)
    if not folds:
        return graph
    by_last = {id(f.last): f for f in folds}
    users = graph.users()
    removed = {id(n) for f in folds for n in _chain_nodes(users, f)}
    taken = {v.name for v in graph.values()}
    builder = GraphBuilder(graph.name)
    for v in graph.inputs:
        builder.input(v.name, v.type)
    for node in graph.nodes:
        fold = by_last.get(id(node))
        if fold is not None:
            _emit_folded(builder, taken, fold)
        elif id(node) not in removed:
            builder.add_node(node)
    return builder.build(*graph.outputs).replace(stamps=graph.stamps)


def _chain_nodes(users: dict[str, list[Node]], fold: FoldedConvolution) -> list[Node]:
    """The convolution and the chain's nodes up to `fold.last` (`users`: the graph's readers)."""
    nodes, node = [fold.convolution], fold.convolution
    while node is not fold.last:
        node = users[node.outputs[0].name][0]
        nodes.append(node)
    return nodes
