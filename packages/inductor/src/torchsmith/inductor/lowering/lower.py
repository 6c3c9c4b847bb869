"""Lowering: a `prims.*` graph -> a `LoopProgram`.

Each value of the graph becomes a `ViewRef` (a buffer read through an index expression). View and
shape prims only rewrite that expression; every other prim writes a new buffer, one per node (the
scheduler fuses them later), or is an `ExternCall` run with torch (library ops, and the eager
fallback for ops with no lowering). Lowerings live in `LOWERINGS`, keyed by op name, in the
`lowerings_*.py` modules (pointwise, views, reductions, indexing, creation, library, fallback), and
are added with `register_lowering`.
"""

import logging
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import sympy
import torch

from torchsmith.inductor.errors import LoweringError
from torchsmith.inductor.loop_ir.program import (
    Buffer,
    ComputedBuffer,
    Constant,
    Expr,
    ExternCall,
    IndexValue,
    InputBuffer,
    Layout,
    LoopProgram,
    Pointwise,
    TensorView,
    index_vars,
    indirect_var,
    is_loop_var_name,
    loads,
)
from torchsmith.inductor.lowering.view_refs import ViewRef, as_tensor_view, strided_ref
from torchsmith.ir import Graph, Node, Value, draws_random, iter_values
from torchsmith.ir.symbolic import compare, normalize_dim
from torchsmith.ir.types import ScalarType, SymIntType, TensorType, contiguous_strides

# One line per op (per graph) that has no loop lowering and runs through its eager implementation.
fallback_log = logging.getLogger("torchsmith.inductor.fallback")

# The dtypes the loop code generators (C++ and Triton) compute. A node that reads or writes a tensor
# of any other dtype (complex, float8, the wide unsigned ints) runs torch's kernel as an extern
# call (fallback.foreign_dtype), whatever lowering its op has, so graphs holding such values still
# compile around them.
LOOP_DTYPES = frozenset({
    torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.bool,
    torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8,
})

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

    env: dict[str, ViewRef | sympy.Expr | None] = field(default_factory=dict)
    buffers: list[Buffer] = field(default_factory=list)
    names: set[str] = field(default_factory=set)
    origin: str = ""
    op: str = ""
    symbols: set[str] = field(default_factory=set)  # the size symbols the graph's inputs bind
    # value name -> (length, start, step) of each int64 prims.iota: index_put at iota positions (what
    # slice_scatter and select_scatter decompose to) lowers to a pointwise select instead of a scatter.
    iotas: dict[str, tuple] = field(default_factory=dict)
    indirect_sites: list[tuple[str, str, str]] = field(default_factory=list)
    # How many nodes (and graph outputs) read each value; value name -> buffer of each float prims.mm
    # result, so an add of a bias to it can become one addmm call (lowerings_library.fuse_bias_add).
    use_count: dict[str, int] = field(default_factory=dict)
    fuse_addmm: bool = False
    matmuls: dict[str, str] = field(default_factory=dict)
    # The values to store channels-last (channels_last.plan_channels_last), or None.
    layout: object = None
    # value name -> buffer of each channels-last convolution result, so a ReLU of it can become the
    # convolution's post-op (lowering/library.py: fuse_convolution_relu).
    convolutions: dict[str, str] = field(default_factory=dict)
    # Whether scatters and index_put at data-chosen positions become `Scatter` loops (the C++
    # code generator has them; others keep torch's kernels as extern calls).
    scatter_loops: bool = False

    def ref(self, value) -> ViewRef:
        """The view a tensor argument reads."""
        if not isinstance(value, Value) or not isinstance(value.type, TensorType):
            raise LoweringError(f"{self.origin}: expected a tensor argument, got {value!r}")
        ref = self.env.get(value.name)
        if not isinstance(ref, ViewRef):
            raise LoweringError(f"{self.origin}: %{value.name} has no tensor value here (it is {ref!r})")
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

    def add_buffer(self, name: str, shape, dtype: torch.dtype, body, strides=None) -> ViewRef:
        """Record a computed buffer (contiguous unless `strides` are given) and return the view
        reading it."""
        shape = tuple(normalize_dim(d) for d in shape)
        strides = contiguous_strides(shape) if strides is None else tuple(strides)
        name = self.fresh(name)
        self.buffers.append(ComputedBuffer(name, Layout(shape, strides, dtype), body, self.origin))
        return strided_ref(name, shape, strides, dtype)

    def pointwise(self, name: str, shape, dtype: torch.dtype, value_of, strides=None) -> ViewRef:
        """A buffer whose element `idx` is `value_of(idx)` (laid out with `strides`, default
        contiguous)."""
        variables = index_vars(len(shape))
        return self.add_buffer(name, shape, dtype, Pointwise(tuple(shape), value_of(variables)), strides)

    def realize(self, ref: ViewRef, name: str) -> TensorView:
        """`ref` as a strided view, copying it into a new buffer when its index is not strided (or
        has negative strides, as a flip's: torch's strided views cannot step backwards)."""
        view = as_tensor_view(ref)
        if view is not None and ref.dtype not in LOOP_DTYPES:
            # such values come only from graph inputs and extern calls, laid out by their types,
            # whose strides are never negative (a symbolic one merely cannot be proved so)
            return view
        if view is None or any(_maybe_negative(s) for s in view.strides):
            view = as_tensor_view(self.copy(ref, f"{name}_copy"))
        return view

    def copy(self, ref: ViewRef, name: str, strides=None) -> ViewRef:
        """A new buffer holding `ref`'s elements, laid out with `strides` (default contiguous): a
        pointwise loop, or for a dtype no code generator computes (complex) torch's copy."""
        if ref.dtype in LOOP_DTYPES:
            return self.pointwise(name, ref.shape, ref.dtype, ref.load, strides=strides)
        view = as_tensor_view(ref)
        if view is None:
            raise LoweringError(
                f"{self.origin}: a {ref.dtype} value is read through an index no strided view "
                f"expresses, and {ref.dtype} copies run only as torch's copy; keep the view's op whole"
            )
        shape = tuple(normalize_dim(d) for d in ref.shape)
        strides = contiguous_strides(shape) if strides is None else tuple(strides)
        name = self.fresh(name)
        layout = Layout(shape, strides, ref.dtype)
        reason = f"copies {ref.dtype} elements, which the code generators do not compute"
        call = ExternCall(name, layout, "aten.clone.default", (view,), self.origin, fallback=reason)
        self.buffers.append(call)
        return strided_ref(name, shape, strides, ref.dtype)

    def fresh_indirect_var(self) -> sympy.Symbol:
        """A new indirect index variable (`x0`, `x1`, ...), unique in the program, recorded with the
        node it reads for (a failed index check names it)."""
        var = indirect_var(len(self.indirect_sites))
        self.indirect_sites.append((var.name, self.op, self.origin))
        return var

    def extern(
        self,
        node: Node,
        kernel: str,
        *,
        params: tuple = (),
        kwargs: tuple = (),
        tensors=(),
        fallback: str = "",
    ) -> list[ViewRef | None]:
        """Buffers defined by an extern call of `kernel` (run with torch) for `node`'s outputs.

        `tensors` are the tensor arguments (Values) that `TensorArg(k)` in `params`/`kwargs` stand
        for; with no `params`, the call is `kernel(*tensors)`. A node with several outputs becomes
        one call for its first tensor output and an `extern.output` call per further one (no
        copies); outputs typed none (results an op was asked not to compute) get None."""
        from torchsmith.inductor.runtime.externs import OUTPUT_KERNEL

        base = node.outputs[0].name
        views = tuple(self.realize(self.ref(t), f"{base}_arg{k}") for k, t in enumerate(tensors))
        refs: list[ViewRef | None] = []
        first = None
        for k, value in enumerate(node.outputs):
            t = value.type
            if not isinstance(t, TensorType):
                refs.append(None)
                continue
            layout = Layout(t.shape, t.strides, t.dtype)
            name = self.fresh(value.name)
            if first is None:
                call = ExternCall(name, layout, kernel, views, self.origin, params, kwargs, fallback, k)
                first = call
            else:
                shape, strides, dtype = first.layout.shape, first.layout.strides, first.layout.dtype
                source = TensorView(first.name, shape, strides, 0, dtype)
                call = ExternCall(name, layout, OUTPUT_KERNEL, (source,), self.origin, (k,))
            self.buffers.append(call)
            refs.append(strided_ref(name, t.shape, t.strides, t.dtype))
        return refs


def _maybe_negative(stride) -> bool:
    return compare("<", stride, 0) is not False


def _describe(node: Node) -> str:
    names = ", ".join(f"%{v.name}" for v in node.outputs)
    where = f" (from {node.source})" if node.source else ""
    return f"{names} = {node.op}{where}"


def lower(graph: Graph, *, addmm: bool = False, layout=None, scatter_loops: bool = False) -> LoopProgram:
    """Lower a prims graph to a loop program (a `Graph -> LoopProgram` step).

    A `prims.*` or `aten.*` node without a lowering runs its eager implementation as an extern call
    (lowerings_fallback; listed in `program.fallbacks`); what cannot run that way (mutating ops,
    non-tensor or data-dependent results, torch-level ops) raises `LoweringError` with `.node` set.
    `addmm=True` folds a bias added to a float mm result into the call (`torch.addmm`): for code
    generators without their own matmul epilogues (the C++ one). `layout`, a
    `channels_last.ChannelsLastPlan`, names the values to store channels-last. `scatter_loops=True`
    lowers scatters at data-chosen positions to `Scatter` loops (for the C++ code generator).
    """
    # torchsmith.prims registers the prims ops: a graph read from the compile cache can arrive
    # before anything else imported it.
    import torchsmith.prims  # noqa: F401
    from torchsmith.inductor.lowering import (  # noqa: F401  (fill LOWERINGS)
        creation,
        indexing,
        library,
        pointwise,
        reductions,
        sizes,
        views,
    )
    from torchsmith.inductor.lowering.fallback import foreign_dtype, lower_fallback
    from torchsmith.inductor.lowering.library import dense_padded_outputs

    ctx = LoweringContext(fuse_addmm=addmm, layout=layout, scatter_loops=scatter_loops)
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
    ctx.symbols = symbols
    for node in graph.nodes:
        for v in iter_values((node.args, tuple(a for _, a in node.kwargs))):
            ctx.use_count[v.name] = ctx.use_count.get(v.name, 0) + 1
    for value in graph.outputs:
        if isinstance(value, Value):
            ctx.use_count[value.name] = ctx.use_count.get(value.name, 0) + 1
    clashes = sorted(s for s in symbols if is_loop_var_name(s))
    if clashes:
        raise LoweringError(
            f"size symbols {', '.join(clashes)} of graph {graph.name} are spelled like loop variables "
            "(i0, r0, ...); rename them (capture names sizes s0, s1, ...)"
        )
    for node in graph.nodes:
        ctx.origin, ctx.op = _describe(node), node.op
        fn = LOWERINGS.get(node.op)
        if foreign_dtype(node) is not None:
            fn = None  # a dtype no code generator computes (complex): torch's kernel, via lower_fallback
        if fn is None and not node.op.startswith(("prims.", "aten.")):
            raise LoweringError(
                f"{ctx.origin}: {node.op} is not a prim and has no decomposition to prims; the inductor "
                "takes aten graphs (trace torch-level graphs with torchsmith.autograd_aot first)"
            )
        try:
            results = (fn or lower_fallback)(ctx, node)
        except LoweringError as e:
            e.node = e.node or node
            raise
        except Exception as e:
            # A lowering's own bug or an argument it did not expect: say which node, keep the cause.
            error = LoweringError(f"{ctx.origin}: lowering {node.op} failed: {type(e).__name__}: {e}")
            error.node = node
            raise error from e
        results = results if isinstance(results, list) else [results]
        if layout is not None and len(results) == 1 and isinstance(results[0], ViewRef):
            from torchsmith.inductor.lowering.channels_last import relayout_result

            results = [relayout_result(ctx, node.outputs[0].name, results[0])]
        for value, ref in zip(node.outputs, results, strict=True):
            ctx.env[value.name] = ref
    for value in graph.outputs:
        if not isinstance(value, Value) or not isinstance(value.type, TensorType):
            raise LoweringError(
                f"graph output {value!r} is not a tensor; the inductor returns only tensors so far"
            )
    refs = [ctx.ref(value) for value in graph.outputs]
    dense_padded_outputs(ctx, refs)
    outputs = []
    for value, ref in zip(graph.outputs, refs):
        ctx.origin = f"output %{value.name}"
        outputs.append(_output_view(ctx, ref, value))
    buffers = live_buffers(ctx.buffers, outputs)
    return LoopProgram(
        graph.name,
        len(graph.inputs),
        tuple(inputs),
        tuple(sorted(symbols)),
        buffers,
        tuple(outputs),
        report_fallbacks(graph.name, buffers),
        tuple(ctx.indirect_sites),
    )


def _output_view(ctx: LoweringContext, ref: ViewRef, value: Value) -> TensorView:
    """The graph output `value` read through `ref`, as a strided view with the strides the graph's
    type gives it (eager's: users call `.view()` on outputs and expect torch's layout); copied when
    `ref` is not strided that way (once, straight into eager's layout)."""
    t = value.type
    view = as_tensor_view(ref)
    # (strides of values outside LOOP_DTYPES are their types' own, never negative: see realize)
    if view is not None and (t.dtype not in LOOP_DTYPES or not any(_maybe_negative(s) for s in view.strides)):
        differs = [
            k for k, d in enumerate(t.shape)
            if compare("==", d, 1) is not True
            and compare("==", sympy.expand(view.strides[k] - t.strides[k]), 0) is not True
        ]  # fmt: skip
        if any(compare("==", d, 0) is True for d in t.shape):
            return view
        if not differs:
            # no kernel steps along a dim of size 1, but users read its stride (`x.sum(1, keepdim=True)`
            # has eager's (20, 20, 5, 1), not a 0): report eager's there, same storage
            return replace(view, strides=tuple(
                w if compare("==", d, 1) is True else s for d, s, w in zip(t.shape, view.strides, t.strides)
            ))
    # A broadcast (stride-0) dim in eager's output would have each element written many times:
    # such outputs are copied contiguously instead (their values are the same).
    if any(
        compare("==", s, 0) is True and compare("==", d, 1) is not True for d, s in zip(t.shape, t.strides)
    ):
        return ctx.realize(ref, value.name)
    return as_tensor_view(ctx.copy(ref, f"{value.name}_strided", t.strides))


def report_fallbacks(graph_name: str, buffers) -> tuple[tuple[str, str], ...]:
    """(op, reason) of each op that runs eagerly in `buffers`, logged once per op name (logger
    `torchsmith.inductor.fallback`) and emitted as an `inductor/fallback` event."""
    from torchsmith.ir import events

    found: dict[str, str] = {}
    for buffer in buffers:
        if isinstance(buffer, ExternCall) and buffer.fallback and buffer.kernel not in found:
            found[buffer.kernel] = buffer.fallback
            fallback_log.info("graph %s: %s runs eagerly: %s", graph_name, buffer.kernel, buffer.fallback)
            events.emit("inductor", "fallback", name=graph_name, op=buffer.kernel, reason=buffer.fallback)
    return tuple(found.items())


def live_buffers(buffers: list[Buffer], outputs: list[TensorView]) -> tuple[Buffer, ...]:
    """`buffers` without those no output depends on (decompositions leave dead nodes behind). A
    random op's call stays even when nothing reads it: it moves the generator later draws read."""
    live = {v.buffer for v in outputs}
    kept = []
    for buffer in reversed(buffers):
        if buffer.name not in live and not (isinstance(buffer, ExternCall) and draws_random(buffer.kernel)):
            continue
        kept.append(buffer)
        if isinstance(buffer, ComputedBuffer):
            live |= {load.buffer for load in loads(buffer.body.value)}
        else:
            live |= {arg.buffer for arg in buffer.args}
    return tuple(reversed(kept))
