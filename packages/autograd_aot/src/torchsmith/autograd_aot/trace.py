"""Trace a `torch.*` graph down to ATen ops by running it on meta tensors under a dispatch mode.

Every ATen call that reaches the Python dispatch key (below autograd, so `F.linear` arrives as
`aten.t` + `aten.addmm`) becomes a node of a new graph, typed from the meta result. For training, the
same trace goes on into `torch.autograd.grad`, so the recorded graph is the joint forward+backward.
The result still contains in-place ops and views exactly as PyTorch ran them;
`functionalize.functionalize` removes them.

Sizes are concrete: meta tensors need real sizes, so a trace is always at some concrete sizes;
`symbolic.lower_symbolic` lowers at three hint sizes and re-expresses the sizes symbolically.
"""

import dataclasses
from dataclasses import dataclass

import torch
from torch.utils._python_dispatch import TorchDispatchMode, _disable_current_modes

from torchsmith.autograd_aot.aliasing import (
    is_metadata_mutation,
    is_view_op,
    metadata_view_twin,
    track_aliases,
)
from torchsmith.autograd_aot.data_constants import MetaDataConstants
from torchsmith.autograd_aot.device_dropout import device_dropout
from torchsmith.autograd_aot.device_layouts import cpu_layouts, with_device_layout
from torchsmith.autograd_aot.device_shapes import with_device_shapes
from torchsmith.autograd_aot.errors import TraceError
from torchsmith.autograd_aot.fused_attention import fused_attention
from torchsmith.autograd_aot.missing_meta import run_on_meta
from torchsmith.ir import (
    Graph,
    Node,
    ScalarType,
    SymIntType,
    TensorType,
    Value,
    lookup_op,
    op_name_of,
    register_op,
    type_of,
)
from torchsmith.ir.builder import name_hint
from torchsmith.ir.errors import UnknownOpError
from torchsmith.ir.graph import ArgList, freeze_arg
from torchsmith.ir.interpreter import bind_symbols, node_results, run_node
from torchsmith.ir.names import NameGenerator
from torchsmith.ir.passes import graph_pass
from torchsmith.ir.text import format_node
from torchsmith.ir.torch_startup import defer_dynamo_import


@dataclass(frozen=True, slots=True)
class OutputSpec:
    """How the runtime rebuilds one user output.

    `kind` is "graph" (`index` into the graph's outputs), "input" (`index` into the inputs) or
    "constant" (`value`); `chain` holds the view nodes (with output index) replayed on that tensor,
    so an output that aliases an input or another output is a real view, as eager returns it.
    """

    kind: str
    index: int = 0
    chain: tuple[tuple[Node, int], ...] = ()
    value: object = None
    # the grad mode eager took the chain's last view in: a view taken under no_grad has no autograd
    # history, and the runtime replays the chain in whatever grad mode it is called in
    grad_enabled: bool | None = None


@dataclass(frozen=True, slots=True)
class MetadataMutation:
    """An input whose shape or strides the program changes in place (`x.t_()`, `x.unsqueeze_(0)`).

    The graph sees the change as views (`chain`, the out-of-place twins, rooted at input `index`);
    before the forward runs, the runtime replays `ops` (the in-place nodes, each with the grad mode
    it ran in) on the caller's tensor, so the caller sees the new shape, as in eager.
    """

    index: int
    chain: tuple[tuple[Node, int], ...]
    ops: tuple[tuple[Node, bool], ...]


@dataclass(frozen=True, slots=True)
class TracedProgram:
    """An ATen graph and what the runtime needs to call it.

    Graph inputs are the original inputs, then one tangent per differentiable output; graph
    outputs are the `num_outputs` distinct tensors the user outputs are built from, then one
    gradient per entry of `grad_inputs` (the input index it belongs to).
    """

    graph: Graph
    num_inputs: int
    num_outputs: int
    output_specs: tuple[OutputSpec, ...]
    differentiable_outputs: tuple[int, ...] = ()
    grad_inputs: tuple[int, ...] = ()
    metadata_mutations: tuple[MetadataMutation, ...] = ()

    @property
    def is_training(self) -> bool:
        return bool(self.differentiable_outputs)

    def stamped(self, pass_name: str, seconds: float) -> "TracedProgram":
        """This program with its graph stamped (the pass runner's timing record)."""
        return dataclasses.replace(self, graph=self.graph.stamped(pass_name, seconds))


class _Recorder(TorchDispatchMode):
    """Runs each ATen op on meta tensors and appends it, typed, to `nodes`."""

    def __init__(self, device: str):
        super().__init__()
        self.device = device
        self.names = NameGenerator()  # readable (`addmm`, `addmm_1`), never reused
        self.inputs: list[Value] = []
        self.nodes: list[Node] = []
        self.values: dict[int, Value] = {}
        self.tensors: dict[str, torch.Tensor] = {}
        self.by_name: dict[str, Value] = {}
        self.source: str | None = None  # the user's file:line, copied onto recorded nodes
        self.where: str | None = None   # the torch-level node being traced, for error messages
        self.meta_twins: dict[int, torch.Tensor] = {}  # id of a constant's data -> its meta tensor
        # name of a metadata mutation's view twin -> (the in-place node, grad mode when it ran)
        self.metadata_ops: dict[str, tuple[Node, bool]] = {}
        self.grad_modes: dict[str, bool] = {}  # output name of a view node -> grad mode it ran in

    def bind(self, tensor: torch.Tensor, value: Value) -> None:
        # The tensors dict keeps every traced tensor alive, so an id() is never reused.
        self.values[id(tensor)] = value
        self.tensors[value.name] = tensor
        self.by_name[value.name] = value

    def add_input(self, name: str, tensor_or_value, t=None) -> Value:
        value = Value(self.names.fresh(name), t if t is not None else self.type_of(tensor_or_value))
        self.inputs.append(value)
        if isinstance(tensor_or_value, torch.Tensor):
            self.bind(tensor_or_value, value)
        return value

    def type_of(self, result):
        if isinstance(result, torch.Tensor):
            t = TensorType.of(result)
            return t.replace(device=self.device, strides=t.strides)
        return type_of(result)

    def value_of(self, tensor: torch.Tensor, op: str) -> Value:
        value = self.values.get(id(tensor))
        if value is None and tensor.device.type != "meta" and tensor.numel() <= MAX_CONSTANT_ELEMENTS:
            value = self.constant(tensor)
        if value is None:
            raise TraceError(
                f"{op} received a tensor that no traced op produced (a tensor constant or global "
                f"captured by the program?){self._where()}; pass tensors as graph inputs"
            )
        return value

    def constant(self, tensor: torch.Tensor) -> Value:
        """Record a small tensor made from Python data inside a torch function (`torch.tensor([..])`,
        a list index) as a `torch.tensor(data)` node, so the graph rebuilds it on its own device."""
        value = Value(self.names.fresh("constant"), self.type_of(tensor.detach()))
        node = Node("torch.tensor", (freeze_arg(tensor.tolist()),),
                    (("dtype", tensor.dtype), ("device", torch.device(self.device))), (value,), self.source)
        self.nodes.append(node)
        self.bind(tensor, value)
        # Ops run on meta tensors: the meta twin stands in for the data in every later call.
        self.meta_twins[id(tensor)] = tensor.detach().to("meta")
        return value

    def _on_meta(self, arg):
        if isinstance(arg, torch.Tensor):
            return self.meta_twins.get(id(arg), arg)
        if isinstance(arg, (list, tuple)):
            items = [self._on_meta(a) for a in arg]
            return items if isinstance(arg, list) else tuple(items)
        return arg

    def _where(self) -> str:
        return f" while tracing {self.where}" if self.where else ""

    def _to_ir(self, arg, op: str):
        if isinstance(arg, torch.Tensor):
            return self.value_of(arg, op)
        if isinstance(arg, (list, tuple)):
            items = [self._to_ir(a, op) for a in arg]
            return items if isinstance(arg, list) else tuple(items)
        if isinstance(arg, torch.device):
            return torch.device(self.device) if arg.type == "meta" else arg
        if isinstance(arg, torch.Generator):
            raise TraceError(f"{op}: explicit torch.Generator arguments are not supported{self._where()}")
        return arg

    def record_whole(self, func, args, kwargs):
        """Record `func`, a composite ATen op the dispatcher would split into its parts before this
        mode saw them, as one node: it runs on meta with no dispatch mode active, then is recorded."""
        with _disable_current_modes():
            return self.__torch_dispatch__(func, (), args, kwargs)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = dict(kwargs or {})
        op = op_name_of(func)
        if not op.startswith("aten."):
            _register_custom_op(op, func)
        ir_args = [self._to_ir(a, op) for a in args]
        ir_kwargs = {k: self._to_ir(v, op) for k, v in kwargs.items()}
        if "device" in kwargs and kwargs["device"] is not None:
            # Factory ops run on meta, but the graph records the device the program asked for.
            ir_kwargs["device"] = torch.device(self.device if torch.device(kwargs["device"]).type == "meta"
                                               else kwargs["device"])
            kwargs["device"] = torch.device("meta")
        if self.meta_twins:
            args, kwargs = self._on_meta(args), {k: self._on_meta(v) for k, v in kwargs.items()}
        storage_before = args[0].untyped_storage().nbytes() if op.startswith("aten.resize_.") else None
        result = with_device_layout(op, args, run_on_meta(func, op, args, kwargs), self.device)
        result = with_device_shapes(op, args, result, self.device)
        if storage_before is not None and result.untyped_storage().nbytes() > storage_before:
            raise TraceError(
                f"{op} grows the tensor's storage{self._where()}: the new elements hold no defined values; "
                "allocate a new tensor (torch.empty / new_zeros) instead"
            )
        results = list(result) if isinstance(result, (list, tuple)) else [result]
        hint = name_hint(op)
        outputs = []
        for r in results:
            if type(r) is int:  # a size a fused kernel returns (flash attention's sequence lengths)
                outputs.append(Value(self.names.fresh(hint), SymIntType(r)))
                continue
            if r is not None and not isinstance(r, torch.Tensor):
                raise TraceError(
                    f"{op} returned a Python {type(r).__name__}{self._where()}: data-dependent values "
                    "cannot be traced on meta tensors"
                )
            t = ScalarType("none") if r is None else self.type_of(r)
            outputs.append(Value(self.names.fresh(hint), t))
        try:
            node = Node(op, tuple(freeze_arg(a) for a in ir_args),
                        tuple((k, freeze_arg(v)) for k, v in ir_kwargs.items()), tuple(outputs), self.source)
        except Exception as e:
            raise TraceError(f"{op}: cannot record its arguments{self._where()}: {e}") from e
        if is_metadata_mutation(op):
            twin = metadata_view_twin(node, result)
            self.metadata_ops[twin.outputs[0].name] = (node, torch.is_grad_enabled())
            node = twin
        if is_view_op(node.op):
            self.grad_modes[node.outputs[0].name] = torch.is_grad_enabled()
        self.nodes.append(node)
        for r, v in zip(results, outputs):
            if isinstance(r, torch.Tensor):
                self.bind(r, v)
        return result


# Tensors made from Python data up to this size become `torch.tensor(data)` nodes; larger ones must be
# graph inputs (DESIGN: tensor constants are not inline blobs).
MAX_CONSTANT_ELEMENTS = 4096
_INDEXING_OPS = frozenset({"torch.Tensor.__getitem__", "torch.Tensor.__setitem__"})


# its __torch_dispatch__ is wrapped by torch._disable_dynamo, whose first call imports dynamo
defer_dynamo_import(_Recorder.__torch_dispatch__)


def _is_index_list(arg) -> bool:
    if not isinstance(arg, list) or not arg:
        return False
    return all(_is_index_list(a) or (type(a) in (int, bool)) for a in arg)


def _lift_index_lists(node: Node, env: dict) -> Node:
    """`x[:, [0, 2]]` with the list as a real (CPU) int tensor: torch would turn it into a meta tensor,
    losing the numbers; as data it is recorded as a `torch.tensor` constant the graph rebuilds."""
    if node.op not in _INDEXING_OPS or len(node.args) < 2:
        return node
    index = node.args[1]
    parts = index if isinstance(index, tuple) and not isinstance(index, ArgList) else (index,)
    if not any(isinstance(p, ArgList) and _is_index_list(_plain(p)) for p in parts):
        return node
    lifted = []
    for k, part in enumerate(parts):
        if isinstance(part, ArgList) and _is_index_list(_plain(part)):
            name = f"__index_list_{id(node)}_{k}"
            env[name] = torch.tensor(_plain(part))
            part = Value(name, TensorType.of(env[name]))
        lifted.append(part)
    new_index = tuple(lifted) if parts is index else lifted[0]
    return Node(node.op, (node.args[0], new_index, *node.args[2:]), node.kwargs, node.outputs, node.source)


def _plain(arg):
    return [_plain(a) for a in arg] if isinstance(arg, ArgList) else arg


def _meta_like(x: torch.Tensor, requires_grad: bool) -> torch.Tensor:
    meta = torch.empty_strided(x.shape, x.stride(), dtype=x.dtype, device="meta")
    meta.requires_grad_(requires_grad)
    if requires_grad and not x.is_leaf:
        # autograd refuses in-place ops on leaves that require grad, as on the caller's tensor; a
        # non-leaf input may have its shape changed in place (`x.t_()`), so its stand-in is one too
        meta = meta.clone()
    return meta


def _device_of(example_inputs) -> str:
    devices = {str(x.device) for x in example_inputs if isinstance(x, torch.Tensor)}
    if len(devices) > 1:
        raise TraceError(f"inputs live on several devices ({', '.join(sorted(devices))}); use one device")
    return devices.pop() if devices else "cpu"


def _run_torch_graph(graph: Graph, env: dict, bindings: dict, recorder: _Recorder) -> list:
    for node in graph.nodes:
        recorder.source = node.source
        recorder.where = format_node(node)
        try:
            result = run_node(_lift_index_lists(node, env), env, bindings)
        except TraceError:
            raise
        except Exception as e:
            raise TraceError(f"while tracing {format_node(node)}: {type(e).__name__}: {e}") from e
        if node.outputs:  # nodes without outputs (e.g. torch._C._set_grad_enabled) return None
            try:
                values = node_results(result, len(node.outputs))
            except ValueError as e:
                raise TraceError(f"while tracing {format_node(node)}: {e}") from None
            for v, r in zip(node.outputs, values, strict=True):
                env[v.name] = r
    recorder.source = recorder.where = None
    return [env[v.name] for v in graph.outputs]


def _output_specs(recorder: _Recorder, aliases: dict, outputs: list, num_inputs: int):
    """Describe each user output as (base tensor, view chain) and list the distinct bases that
    are not inputs: those become the graph's outputs."""
    input_index = {v.name: i for i, v in enumerate(recorder.inputs[:num_inputs])}
    bases: list[str] = []
    specs = []
    for i, out in enumerate(outputs):
        if not isinstance(out, torch.Tensor):
            if _holds_tensor(out):
                # a traced (meta) tensor kept as a constant would reach the user as a meta tensor
                raise TraceError(
                    f"output {i} of the graph is a {type(out).__name__} holding tensors, not a tensor: "
                    "the compiled program cannot return it (the graph runs eagerly instead)"
                )
            specs.append(OutputSpec("constant", value=out))
            continue
        alias = aliases[recorder.value_of(out, "graph output").name]
        mode = recorder.grad_modes.get(alias.chain[-1][0].outputs[0].name) if alias.chain else None
        if alias.root in input_index:
            specs.append(OutputSpec("input", input_index[alias.root], alias.chain, grad_enabled=mode))
            continue
        if alias.root not in bases:
            bases.append(alias.root)
        specs.append(OutputSpec("graph", bases.index(alias.root), alias.chain, grad_enabled=mode))
    return specs, bases


def _holds_tensor(value) -> bool:
    if isinstance(value, torch.Tensor):
        return True
    if isinstance(value, (list, tuple)):
        return any(_holds_tensor(v) for v in value)
    if isinstance(value, dict):
        return any(_holds_tensor(v) for v in value.values())
    return False


def _metadata_mutations(
    recorder: _Recorder, aliases: dict, input_tensors: list
) -> tuple[MetadataMutation, ...]:
    """The inputs whose own shape or strides changed: the tensor object of such an input was last
    bound to a view twin of a metadata mutation (in-place data ops keep its alias chain empty)."""
    changes = []
    for index, tensor in enumerate(input_tensors):
        if not isinstance(tensor, torch.Tensor):
            continue
        alias = aliases[recorder.values[id(tensor)].name]
        if alias.chain:
            ops = tuple(recorder.metadata_ops[node.outputs[i].name] for node, i in alias.chain)
            changes.append(MetadataMutation(index, alias.chain, ops))
    return tuple(changes)


@graph_pass("trace", stage="autograd_aot", produces="ATen graph (joint forward+backward when training)")
def trace(graph: Graph, example_inputs, *, training: bool, device: str | None = None) -> TracedProgram:
    """Trace `graph` (any dialect the interpreter runs) to ATen ops at the example inputs' sizes.

    With `training`, inputs that require grad are differentiated: the graph gains one tangent
    input per differentiable output and one gradient output per such input. The trace starts in the
    caller's grad mode, so under `no_grad` only what the graph computes inside its own
    `enable_grad` regions is differentiable. Without `training` (or when no output is
    differentiable) the result is the inference graph alone. `device` overrides the
    device recorded in the graph (by default the inputs'; needed when the inputs are meta tensors).
    """
    if len(example_inputs) != len(graph.inputs):
        raise TraceError(f"graph {graph.name} takes {len(graph.inputs)} inputs, got {len(example_inputs)}")
    recorder = _Recorder(device or _device_of(example_inputs))
    env = {}
    for value, x in zip(graph.inputs, example_inputs):
        if isinstance(x, torch.Tensor):
            meta = _meta_like(x, training and x.requires_grad)
            recorder.add_input(value.name, meta)
            env[value.name] = meta
        else:
            recorder.add_input(value.name, x, SymIntType(x) if type(x) is int else type_of(x))
            env[value.name] = x
    bindings = bind_symbols(graph, example_inputs)
    num_inputs = len(graph.inputs)
    # Saved tensors come back from autograd as the very objects that were saved, so the backward
    # refers to the forward's values by identity.
    keep_identity = torch.autograd.graph.saved_tensors_hooks(lambda t: t, lambda t: t)
    attention = fused_attention(recorder, training)
    layouts = cpu_layouts(recorder.device)
    dropout = device_dropout(recorder.device)
    grad_mode = torch.set_grad_enabled(training and torch.is_grad_enabled())
    data_constants = MetaDataConstants(recorder, MAX_CONSTANT_ELEMENTS)
    with grad_mode, keep_identity, recorder, data_constants, attention, layouts, dropout:
        outputs = _run_torch_graph(graph, env, bindings, recorder)
        aliases = track_aliases(recorder.inputs, recorder.nodes)
        specs, bases = _output_specs(recorder, aliases, outputs, num_inputs)
        metadata = _metadata_mutations(recorder, aliases, [env[v.name] for v in graph.inputs])
        for value, x in zip(graph.inputs, example_inputs):
            if isinstance(x, torch.Tensor) and env[value.name].requires_grad and not x.requires_grad:
                raise TraceError(
                    f"input %{value.name} does not require grad but is mutated in place with a value that "
                    "does; compiled graphs only update inputs outside autograd. Detach the value or run "
                    "the update under torch.no_grad()"
                )
        base_tensors = [recorder.tensors[name] for name in bases]
        differentiable = tuple(i for i, t in enumerate(base_tensors) if t.requires_grad) if training else ()
        grad_inputs: tuple[int, ...] = ()
        grad_values: list[Value] = []
        if differentiable:
            tangents = []
            for i in differentiable:
                base = base_tensors[i]
                tangent = torch.empty_strided(base.shape, base.stride(), dtype=base.dtype, device="meta")
                recorder.add_input(f"tangent_{i}", tangent)
                tangents.append(tangent)
            wanted = [
                i for i, x in enumerate(example_inputs) if isinstance(x, torch.Tensor) and x.requires_grad
            ]
            grads = torch.autograd.grad(
                [base_tensors[i] for i in differentiable], [env[graph.inputs[i].name] for i in wanted],
                tangents, allow_unused=True,
            )
            pairs = [(i, g) for i, g in zip(wanted, grads) if g is not None]
            grad_inputs = tuple(i for i, _ in pairs)
            grad_values = [recorder.value_of(g, "torch.autograd.grad") for _, g in pairs]
    # A base is named by its root value: functionalization reads it after every mutation.
    base_values = [recorder.by_name[name] for name in bases]
    aten = Graph(graph.name, tuple(recorder.inputs), tuple(recorder.nodes), tuple(base_values + grad_values),
                 graph.stamps)
    return TracedProgram(aten, num_inputs, len(bases), tuple(specs), differentiable, grad_inputs, metadata)


def _register_custom_op(op: str, func) -> None:
    """Make a `torch.library` custom op the trace meets (the backward op a custom op's autograd
    formula calls) an op of the registry, with its overload as the eager implementation."""
    try:
        lookup_op(op)
    except UnknownOpError:
        if isinstance(func, torch._ops.OpOverload):
            register_op(op, func, doc=f"the torch.library custom op {func.name()}")
