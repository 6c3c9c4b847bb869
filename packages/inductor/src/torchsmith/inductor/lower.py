"""Lowering: a `prims.*` graph -> a `LoopProgram`.

Each value of the graph becomes a `ViewRef` (a buffer read through an index expression). View and
shape prims only rewrite that expression; every other prim writes a new buffer, one per node (the
scheduler fuses them later). Lowerings live in `LOWERINGS`, keyed by prim name, and are added with
`register_lowering`.
"""

from collections.abc import Callable
from dataclasses import dataclass, field

import sympy
import torch

from torchsmith.inductor.errors import LoweringError
from torchsmith.inductor.loop_ir import (
    Buffer,
    ComputedBuffer,
    Constant,
    Expr,
    IndexValue,
    InputBuffer,
    Layout,
    LoopProgram,
    Pointwise,
    TensorView,
    index_vars,
    is_loop_var_name,
    loads,
)
from torchsmith.inductor.views import ViewRef, as_tensor_view, strided_ref
from torchsmith.ir import Graph, Node, Value
from torchsmith.ir.symbolic import normalize_dim
from torchsmith.ir.types import ScalarType, SymIntType, TensorType, contiguous_strides

Lowering = Callable[["LoweringContext", Node], "ViewRef | list[ViewRef]"]
LOWERINGS: dict[str, Lowering] = {}


def register_lowering(*names: str):
    """Decorator: `fn(ctx, node) -> ViewRef | list[ViewRef]` lowers the prims `names`."""

    def register(fn: Lowering) -> Lowering:
        for name in names:
            LOWERINGS[name] = fn
        return fn

    return register


@dataclass
class LoweringContext:
    """The mutable state of one lowering run: the refs of values and the buffers written so far."""

    env: dict[str, ViewRef | sympy.Expr] = field(default_factory=dict)
    buffers: list[Buffer] = field(default_factory=list)
    names: set[str] = field(default_factory=set)
    origin: str = ""

    def ref(self, value) -> ViewRef:
        """The view a tensor argument reads."""
        if not isinstance(value, Value) or not isinstance(value.type, TensorType):
            raise LoweringError(f"{self.origin}: expected a tensor argument, got {value!r}")
        ref = self.env[value.name]
        assert isinstance(ref, ViewRef), value
        return ref

    def scalar(self, arg, dtype: torch.dtype) -> Expr:
        """A scalar operand (Python number or SymInt value) as an element expression of `dtype`."""
        if isinstance(arg, Value) and isinstance(arg.type, SymIntType):
            return IndexValue(sympy.sympify(arg.type.expr), dtype)
        if isinstance(arg, sympy.Expr):
            return IndexValue(arg, dtype)
        if isinstance(arg, (bool, int, float)):
            return Constant(arg, dtype)
        raise LoweringError(f"{self.origin}: unsupported scalar operand {arg!r}")

    def operand(self, arg, dtype: torch.dtype, indices) -> Expr:
        """Tensor args are loaded at `indices`; scalars become constants of `dtype`."""
        if isinstance(arg, Value) and isinstance(arg.type, TensorType):
            return self.ref(arg).load(indices)
        return self.scalar(arg, dtype)

    def fresh(self, name: str) -> str:
        base, k = name, 0
        while name in self.names:
            k += 1
            name = f"{base}_{k}"
        self.names.add(name)
        return name

    def add_buffer(self, name: str, shape, dtype: torch.dtype, body) -> ViewRef:
        """Record a contiguous computed buffer and return the view reading it."""
        shape = tuple(normalize_dim(d) for d in shape)
        strides = contiguous_strides(shape)
        name = self.fresh(name)
        self.buffers.append(ComputedBuffer(name, Layout(shape, strides, dtype), body, self.origin))
        return strided_ref(name, shape, strides, dtype)

    def pointwise(self, name: str, shape, dtype: torch.dtype, value_of) -> ViewRef:
        """A buffer whose element `idx` is `value_of(idx)`."""
        variables = index_vars(len(shape))
        return self.add_buffer(name, shape, dtype, Pointwise(tuple(shape), value_of(variables)))

    def realize(self, ref: ViewRef, name: str) -> TensorView:
        """`ref` as a strided view, copying it into a new buffer when its index is not strided."""
        view = as_tensor_view(ref)
        if view is None:
            ref = self.pointwise(f"{name}_copy", ref.shape, ref.dtype, ref.load)
            view = as_tensor_view(ref)
        return view


def _describe(node: Node) -> str:
    names = ", ".join(f"%{v.name}" for v in node.outputs)
    where = f" (from {node.source})" if node.source else ""
    return f"{names} = {node.op}{where}"


def lower(graph: Graph) -> LoopProgram:
    """Lower a prims graph to a loop program (a `Graph -> LoopProgram` step).

    Unsupported prims raise `LoweringError` naming the prim and the node.
    """
    from torchsmith.inductor import lowerings, lowerings_reductions  # noqa: F401  (fill LOWERINGS)

    ctx = LoweringContext()
    inputs, symbols = [], set()
    for position, value in enumerate(graph.inputs):
        t = value.type
        symbols |= set(t.free_symbols)
        if isinstance(t, TensorType):
            name = ctx.fresh(value.name)
            inputs.append(InputBuffer(name, position, Layout(t.shape, t.strides, t.dtype)))
            ctx.env[value.name] = strided_ref(name, t.shape, t.strides, t.dtype)
        elif not isinstance(t, (SymIntType, ScalarType)):
            raise LoweringError(f"graph input %{value.name} has unsupported type {t}")
    clashes = sorted(s for s in symbols if is_loop_var_name(s))
    if clashes:
        raise LoweringError(
            f"size symbols {', '.join(clashes)} of graph {graph.name} are spelled like loop variables "
            "(i0, r0, ...); rename them (capture names sizes s0, s1, ...)"
        )
    for node in graph.nodes:
        ctx.origin = _describe(node)
        fn = LOWERINGS.get(node.op)
        if fn is None and not node.op.startswith("prims."):
            raise LoweringError(
                f"{ctx.origin}: {node.op} is not a prim and has no decomposition to prims; the inductor "
                "takes aten graphs (trace torch-level graphs with torchsmith.autograd_aot first)"
            )
        if fn is None:
            raise LoweringError(
                f"no lowering for {node.op} in {ctx.origin}; the inductor lowers "
                f"{len(LOWERINGS)} prims so far (see torchsmith.inductor.lower.LOWERINGS)"
            )
        results = fn(ctx, node)
        results = results if isinstance(results, list) else [results]
        for value, ref in zip(node.outputs, results, strict=True):
            ctx.env[value.name] = ref
    outputs = []
    for value in graph.outputs:
        if not isinstance(value, Value) or not isinstance(value.type, TensorType):
            raise LoweringError(
                f"graph output {value!r} is not a tensor; the inductor returns only tensors so far"
            )
        ctx.origin = f"output %{value.name}"
        outputs.append(ctx.realize(ctx.ref(value), value.name))
    return LoopProgram(
        graph.name,
        len(graph.inputs),
        tuple(inputs),
        tuple(sorted(symbols)),
        live_buffers(ctx.buffers, outputs),
        tuple(outputs),
    )


def live_buffers(buffers: list[Buffer], outputs: list[TensorView]) -> tuple[Buffer, ...]:
    """`buffers` without those no output depends on (decompositions leave dead nodes behind)."""
    live = {v.buffer for v in outputs}
    kept = []
    for buffer in reversed(buffers):
        if buffer.name not in live:
            continue
        kept.append(buffer)
        if isinstance(buffer, ComputedBuffer):
            live |= {load.buffer for load in loads(buffer.body.value)}
        else:
            live |= {arg.buffer for arg in buffer.args}
    return tuple(reversed(kept))
