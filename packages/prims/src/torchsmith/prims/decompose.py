"""`decompose(graph, keep=...)`: the pass that replaces `aten.*` nodes by `prims.*` nodes.

Each ATen op has an entry in `DECOMPOSITIONS`, a small function registered next to its peers in
`torchsmith.prims.decompositions.*`. It receives an `Emitter` and the node's arguments (Values in
place of tensors) and emits prims, or other ATen ops that are decomposed in turn::

    @register_decomposition("aten.relu.default")
    def relu(e, a):
        return e.pointwise(lambda x: e.maximum(x, 0), a, kind=NO_OPMATH)

A backend keeps the ops it handles itself whole with `keep={"aten.mm.default", "aten.addmm"}` (an
overload name, or a packet name for every overload). A decomposition may also decline a node
(return `KEEP`), for instance `native_layer_norm` in low precision, where no prims formula is as
close to float64 as eager; the reason is written next to such decompositions.

A node that reads or writes a complex tensor is always kept whole (`touches_complex`): the
decompositions and the prims' type rules are written for real numbers (a complex `abs` is a modulus,
a complex `mul` crosses the real and imaginary parts), so a backend runs such ops with ATen's kernels.
"""

from collections.abc import Callable

import torch

from torchsmith.ir import Graph, GraphBuilder, IRError, Node, Value, map_arg
from torchsmith.ir.graph import Slice, iter_values
from torchsmith.ir.passes import Step, run_pipeline
from torchsmith.ir.symbolic import format_dim
from torchsmith.ir.types import TensorType
from torchsmith.prims.core import PRIMS, same_dim, scalar_kind
from torchsmith.prims.errors import DecompositionError, PrimsError
from torchsmith.prims.promotion import PromotionKind, broadcast_shapes, elementwise_dtypes

DECOMPOSITIONS: dict[str, Callable] = {}
# When a decomposition declines some nodes (returns KEEP), which ones and why.
DECLINES: dict[str, str] = {}
# Ops kept whole by default, with the reason: library kernels, data-dependent shapes, and ops whose
# decomposition exists but cannot promise eager's numerics (pass them in `force=` to decompose).
KEPT_WHOLE: dict[str, str] = {}
KEEP = object()  # returned by a decomposition that leaves its node whole
# Ops that draw from the global RNG: kept whole unless `decompose(..., philox=True)`.
RANDOM_OPS = frozenset({"aten.rand.default", "aten.bernoulli.p", "aten.native_dropout.default"})


def register_decomposition(*names: str, declines: str | None = None):
    """Register the decorated function as the decomposition of the aten overloads `names`;
    `declines` says which nodes it keeps whole (returns KEEP for) and why."""

    def decorate(fn):
        for name in names:
            if name in DECOMPOSITIONS:
                raise DecompositionError(f"{name} is registered twice (decomposition {fn.__name__})")
            DECOMPOSITIONS[name] = fn
            if declines:
                DECLINES[name] = declines
        return fn

    return decorate


def keep_whole(reason: str, *names: str) -> None:
    """Keep aten overloads `names` whole by default (never an error when decomposing). One that
    also has a decomposition is decomposed only when a caller asks with `force=`."""
    for name in names:
        KEPT_WHOLE[name] = reason


def touches_complex(*parts) -> bool:
    """Whether any tensor Value inside `parts` (a node's outputs, its arguments: Values, tuples,
    lists, dicts of them) has a complex dtype: such nodes are kept whole, since no decomposition
    promises complex math."""
    for part in parts:
        if isinstance(part, Value):
            if isinstance(part.type, TensorType) and part.type.dtype.is_complex:
                return True
        elif isinstance(part, (tuple, list)):
            if touches_complex(*part):
                return True
        elif isinstance(part, dict):
            if touches_complex(*part.values()):
                return True
        elif isinstance(part, Slice):
            if touches_complex(*iter_values(part)):
                return True
    return False


def _packet(name: str) -> str:
    return name.rsplit(".", 1)[0] if name.count(".") == 2 else name


class Emitter:
    """What a decomposition writes with: `e.<prim>(...)` appends `prims.<prim>`, `e.aten(...)`
    appends an ATen op (decomposed in turn unless kept), and helpers handle promotion and
    broadcasting. Every emitted node carries the source line of the node being decomposed."""

    def __init__(
        self,
        builder: GraphBuilder,
        keep: frozenset[str],
        on_missing: str,
        force: frozenset[str] = frozenset(),
        philox: bool = False,
    ):
        self.builder, self.keep, self.on_missing, self.force = builder, keep, on_missing, force
        self.philox = philox
        self.random_nodes = 0
        self._rng_inputs: tuple[Value, Value] | None = None
        self.source: str | None = None
        self.current_op = ""  # the ATen op being decomposed, for decompositions shared by several
        self.current_outputs: tuple = ()  # its declared outputs (types the trace took from the device)

    # ---- emitting ------------------------------------------------------------------------------
    def prim(self, name: str, *args, **kwargs):
        if name not in PRIMS:
            raise DecompositionError(f"no prim named {name}")
        return self.builder.op(name, *args, source=self.source, **kwargs)

    def __getattr__(self, name: str):
        if name.startswith("_") or f"prims.{name}" not in PRIMS:
            raise AttributeError(f"Emitter has no attribute or prim {name!r}")
        return lambda *args, **kwargs: self.prim(f"prims.{name}", *args, **kwargs)

    def _forced(self, op: str) -> bool:
        return op in self.force or _packet(op) in self.force or (self.philox and op in RANDOM_OPS)

    def aten(self, name: str, *args, **kwargs):
        """Emit an ATen op, decomposed now unless it is kept."""
        return self.apply(Node(name, args, tuple(kwargs.items())), args, kwargs)

    def apply(self, node: Node, args: tuple, kwargs: dict):
        fn = DECOMPOSITIONS.get(node.op)
        if node.op in self.keep or _packet(node.op) in self.keep:
            fn = None
        elif touches_complex(node.outputs, args, kwargs):
            fn = None
        elif node.op in KEPT_WHOLE and not self._forced(node.op):
            fn = None
        elif fn is None and self.on_missing == "error" and node.op not in KEPT_WHOLE:
            raise DecompositionError(
                f"no decomposition for {node.op}; pass keep={{'{node.op}'}} to keep it whole, or "
                "on_missing='keep' to keep every op without one"
            )
        outer, self.current_op = self.current_op, node.op
        outer_outputs, self.current_outputs = self.current_outputs, node.outputs
        try:
            result = KEEP if fn is None else fn(self, *args, **kwargs)
        finally:
            self.current_op, self.current_outputs = outer, outer_outputs
        if result is KEEP:
            # Declared types when the node has them (symbolic shapes), else the op's meta function.
            out_type = None
            if node.outputs:
                out_type = [v.type for v in node.outputs] if len(node.outputs) > 1 else node.outputs[0].type
            result = self.builder.op(node.op, *args, out_type=out_type, source=self.source, **kwargs)
        return result

    def rng_state(self):
        """(seed, offset) for the next random node under `philox=True`: the graph inputs
        `%philox_seed` and `%philox_offset` (0-d int64, added on first use), with the offset
        advanced by one per random node so that every node draws its own Philox stream. The
        caller passes a seed and a base offset, and advances the base by `random_nodes` per call."""
        if self._rng_inputs is None:
            self._rng_inputs = tuple(
                self.builder.input(self.builder.fresh_name(name), TensorType.make((), torch.int64, "cpu"))
                for name in ("philox_seed", "philox_offset")
            )
        seed, offset = self._rng_inputs
        index, self.random_nodes = self.random_nodes, self.random_nodes + 1
        return seed, (offset if index == 0 else self.add(offset, index))

    # ---- types and promotion -----------------------------------------------------------------
    @staticmethod
    def type(x) -> TensorType:
        if isinstance(x, Value) and isinstance(x.type, TensorType):
            return x.type
        raise DecompositionError(f"expected a tensor value, got {x!r}")

    @staticmethod
    def is_tensor(x) -> bool:
        return isinstance(x, Value) and isinstance(x.type, TensorType)

    def to(self, x, dtype: torch.dtype):
        """`x` converted to dtype (no node when it already has it; scalars pass through)."""
        if not self.is_tensor(x):
            if scalar_kind(x) == "float" and dtype_is_int(dtype):
                raise DecompositionError(f"cannot use float scalar {x!r} in {dtype} arithmetic")
            return x
        return x if x.type.dtype == dtype else self.convert_element_type(x, dtype)

    def broadcast_to(self, x, shape):
        """`x` broadcast to `shape` (right-aligned), or `x` itself when it has that shape."""
        if not self.is_tensor(x):
            return x
        t = x.type
        if t.rank == len(shape) and all(same_dim(a, b) for a, b in zip(t.shape, shape)):
            return x
        offset = len(shape) - t.rank
        if offset < 0:
            raise DecompositionError(f"cannot broadcast {t} to {[format_dim(d) for d in shape]}")
        return self.broadcast_in_dim(x, list(shape), list(range(offset, len(shape))))

    def shape_of(self, *operands):
        return broadcast_shapes(*(self.type(x).shape for x in operands if self.is_tensor(x)))

    def pointwise(
        self,
        body: Callable,
        *operands,
        kind: PromotionKind = PromotionKind.DEFAULT,
        dtypes: tuple[torch.dtype, torch.dtype] | None = None,
        shape=None,
    ):
        """Promote and broadcast `operands` (tensors, 0-d tensors, scalars), convert the tensors to
        the computation dtype, emit `body(*operands)`, and convert its result to the result dtype:
        the whole body runs in opmath, so a formula rounds once, as eager's fused kernels do."""
        compute, result = dtypes or elementwise_dtypes(*operands, kind=kind)
        shape = self.shape_of(*operands) if shape is None else shape
        prepared = [self.broadcast_to(self.to(x, compute), shape) for x in operands]
        out = body(*prepared)
        return self.to(out, result) if kind is not PromotionKind.ALWAYS_BOOL else out


def dtype_is_int(dtype: torch.dtype) -> bool:
    return not (dtype.is_floating_point or dtype.is_complex)


def _check_result(node: Node, produced, source: str) -> None:
    results = produced if isinstance(produced, (tuple, list)) else (produced,)
    if len(results) != len(node.outputs):
        raise DecompositionError(
            f"{source}: decomposition gave {len(results)} values for {len(node.outputs)} outputs"
        )
    for declared, got in zip(node.outputs, results):
        if got is None:
            continue
        if isinstance(declared.type, TensorType):
            t = got.type if isinstance(got, Value) else None
            if (
                not isinstance(t, TensorType)
                or t.dtype != declared.type.dtype
                or t.rank != declared.type.rank
                or not all(
                    same_dim(a, b) or not isinstance(a - b, int) for a, b in zip(t.shape, declared.type.shape)
                )
            ):
                raise DecompositionError(
                    f"{source}: decomposition of %{declared.name}: {declared.type} gave {t}"
                )


def decompose(
    graph: Graph, keep=frozenset(), *, on_missing: str = "error", force=frozenset(), philox: bool = False
) -> Graph:
    """Replace every `aten.*` node of `graph` by prims, except ops in `keep` (overload or packet
    names), ops kept whole by default (`KEPT_WHOLE`, unless named in `force`) and nodes a
    decomposition declines. `on_missing="keep"` keeps ops that have no decomposition instead of
    raising. `philox=True` also decomposes the random ops into `prims.philox_rand`, which adds
    the graph inputs `%philox_seed` and `%philox_offset` (see `Emitter.rng_state`). Returns a new
    graph stamped `decompose`: the one step of `decompose_step`, run by the pass runner."""
    step = decompose_step(keep, on_missing=on_missing, force=force, philox=philox)
    return run_pipeline(graph, (step,), stage="prims")


def decompose_step(keep=frozenset(), *, on_missing: str = "error", force=frozenset(),
                   philox: bool = False) -> Step:
    """The pipeline step `decompose` with these options (see `decompose`)."""
    if on_missing not in ("error", "keep"):
        raise DecompositionError(f"on_missing must be 'error' or 'keep', got {on_missing!r}")
    options = dict(keep=frozenset(keep), on_missing=on_missing, force=frozenset(force), philox=philox)
    return Step("decompose", lambda graph: decompose_graph(graph, **options),
                "prims graph: aten ops as prims, kept ops whole")


def decompose_graph(graph: Graph, keep: frozenset, *, on_missing: str, force: frozenset,
                    philox: bool) -> Graph:
    """The decomposition itself (`decompose` without the runner): a new graph with `graph`'s stamps."""
    builder = GraphBuilder(graph.name)
    env: dict[str, Value] = {}
    for v in graph.inputs:
        env[v.name] = builder.input(v.name, v.type)
    emitter = Emitter(builder, keep, on_missing, force, philox)
    lookup = lambda v: env[v.name]
    for node in graph.nodes:
        args = tuple(map_arg(a, lookup) for a in node.args)
        kwargs = {k: map_arg(a, lookup) for k, a in node.kwargs}
        where = f"{node.op} defining {', '.join('%' + v.name for v in node.outputs)}" + (
            f" (from {node.source})" if node.source else ""
        )
        # Non-aten nodes, and aten nodes that compute sizes rather than tensors (aten.sym_size.int),
        # are copied whole: prims are about tensor data.
        if node.dialect != "aten" or not any(isinstance(v.type, TensorType) for v in node.outputs):
            produced = builder.op(
                node.op, *args, out_type=[v.type for v in node.outputs], source=node.source, **kwargs
            )
            produced = produced if len(node.outputs) != 1 else produced[0]
        else:
            emitter.source = node.source
            try:
                produced = emitter.apply(node, args, kwargs)
            except DecompositionError as e:
                raise DecompositionError(f"while decomposing {where}: {e}") from None
            except (PrimsError, IRError) as e:
                raise DecompositionError(f"while decomposing {where}: {type(e).__name__}: {e}") from e
            _check_result(node, produced, where)
        results = produced if isinstance(produced, (tuple, list)) else (produced,)
        for declared, got in zip(node.outputs, results):
            env[declared.name] = got
    outputs = tuple(env[v.name] for v in graph.outputs)
    return builder.build(*outputs).replace(stamps=graph.stamps)
