"""The runtime: compiled forward and backward graphs behind a `torch.autograd.Function`.

`aot_compile(graph, example_inputs, fw_compiler, bw_compiler)` returns a callable with the graph's
calling convention (inputs in, list of outputs out). Per input signature (shapes, strides, dtypes,
requires_grad, grad mode) it traces, functionalizes and partitions once, then on every call:

1. runs the captured graph eagerly instead (one warning) when a mutated input shares storage with
   another input: the trace assumed separate tensors;
2. runs the compiled forward, inside an `autograd.Function` when the program is differentiable
   (some input requires grad, and grad mode is on at the call or inside the graph); the backward
   graph is compiled on the first `.backward()`; a backward autograd must differentiate again
   (`create_graph=True`) runs through `double_backward`;
3. copies the new values of mutated inputs back into them;
4. rebuilds outputs that alias inputs or each other as real views, as eager returns them;
5. applies in-place shape changes (`x.t_()`) to the inputs they were made on.
"""

import logging
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch.autograd.graph import increment_version

from torchsmith.autograd_aot.aliasing import first_tensor_arg
from torchsmith.autograd_aot.double_backward import differentiable_backward, replay_refusal
from torchsmith.autograd_aot.errors import AliasingError, AotAutogradError
from torchsmith.autograd_aot.output_views import planned_views, view_of
from torchsmith.autograd_aot.partition import MemoryReport
from torchsmith.autograd_aot.pipeline import lower
from torchsmith.autograd_aot.rng_replay import random_devices, save_rng_state
from torchsmith.autograd_aot.symbolic import input_symbols, lower_symbolic
from torchsmith.autograd_aot.trace import TracedProgram
from torchsmith.autograd_aot.user_warning import warn_at_user
from torchsmith.ir import (
    Graph,
    IRError,
    SymIntType,
    TensorType,
    compile_to_python,
    evaluate,
    interpret,
)
from torchsmith.ir.interpreter import bind_symbols, run_node

Compiler = Callable[[Graph, list], Callable]
log = logging.getLogger("torchsmith.autograd_aot")


@dataclass(frozen=True, slots=True)
class KeptInputs:
    """Positions of a program's arguments: `saved` (tensors, saved for backward), `unsaved` (the
    rest: mutated tensors, copied, and `others`, non-tensors kept as they are)."""

    saved: tuple[int, ...]
    unsaved: tuple[int, ...]
    others: frozenset


@dataclass
class CompiledProgram:
    """One specialization: the graphs, their compiled callables and the calling metadata."""

    traced: TracedProgram
    mutated_inputs: tuple[int, ...]
    forward_graph: Graph
    forward_fn: Callable
    backward_graph: Graph | None = None
    bw_compiler: Compiler | None = None
    num_saved: int = 0
    report: MemoryReport | None = None
    input_flags: tuple = ()
    size_conditions: tuple = ()  # (expr, d): a symbolic program runs only sizes with expr % d == 0
    source_graph: Graph | None = None  # the torch-level graph, for the eager paths
    rng_devices: tuple = ()  # devices whose generators the forward draws from (training programs)
    warned_double_backward: bool = False
    _backward_fn: Callable | None = field(default=None, repr=False)
    _eager_fn: Callable | None = field(default=None, repr=False)
    _kept_inputs: "KeptInputs | None" = field(default=None, repr=False)
    _tangent_layouts: tuple | None = field(default=None, repr=False)
    _non_differentiable: tuple | None = field(default=None, repr=False)
    _output_views: tuple | None = field(default=None, repr=False)
    # set by AotFunction.assume_forward_inputs: the compiled backward may skip its input checks
    backward_inputs_checked: bool = field(default=False, repr=False)
    _save_plan: "SavePlan | None" = field(default=None, repr=False)
    # the graph output each user output is, when every one is a graph output returned as it is
    direct_outputs: tuple[int, ...] | None = field(default=None, init=False, repr=False)

    def __post_init__(self):
        specs = self.traced.output_specs
        if all(spec.kind == "graph" and not spec.chain for spec in specs):
            self.direct_outputs = tuple(spec.index for spec in specs)

    @property
    def is_training(self) -> bool:
        return self.backward_graph is not None

    def non_differentiable_outputs(self) -> tuple[int, ...]:
        """Positions of the forward's outputs (mutated inputs' new values included) that no tangent
        comes back for: the autograd.Function marks them non-differentiable."""
        if self._non_differentiable is None:
            differentiable = set(self.traced.differentiable_outputs)
            count = self.traced.num_outputs + len(self.mutated_inputs)
            self._non_differentiable = tuple(i for i in range(count) if i not in differentiable)
        return self._non_differentiable

    def output_views(self) -> tuple:
        """Per output spec, its view chain as planned steps (`output_views.planned_views`), or None where a
        step needs the call's size bindings or another tensor (`output_views.replay_views` runs it)."""
        if self._output_views is None:
            self._output_views = tuple(planned_views(spec.chain) for spec in self.traced.output_specs)
        return self._output_views

    def tangent_layouts(self) -> tuple:
        """(output index, layout) of each tangent the backward takes, in its order (`_in_layout`)."""
        if self._tangent_layouts is None:
            values = self.backward_graph.inputs[self.num_saved:]
            self._tangent_layouts = tuple(
                (i, _tangent_layout(v.type)) for i, v in zip(self.traced.differentiable_outputs, values)
            )
        return self._tangent_layouts

    def backward_fn(self, example_inputs) -> Callable:
        """The compiled backward, compiled on first use (many programs never call backward)."""
        if self._backward_fn is None:
            self._backward_fn = self.bw_compiler(self.backward_graph, list(example_inputs))
            promise = getattr(self._backward_fn, "assume_example_inputs", None)
            if self.backward_inputs_checked and promise is not None:
                promise()
        return self._backward_fn

    def kept_inputs(self, args) -> "KeptInputs":
        """Which arguments a training call keeps for a differentiable backward, and how (the same
        for every call of this program: its signature fixes which arguments are tensors)."""
        if self._kept_inputs is None:
            saved = tuple(i for i, x in enumerate(args)
                          if isinstance(x, torch.Tensor) and i not in self.mutated_inputs)
            others = frozenset(i for i, x in enumerate(args) if not isinstance(x, torch.Tensor))
            unsaved = tuple(i for i in range(len(args)) if i not in saved)
            self._kept_inputs = KeptInputs(saved, unsaved, others)
        return self._kept_inputs

    def save_plan(self, args) -> "SavePlan":
        """How a training call of this program saves for backward (`SavePlan`; fixed per program)."""
        if self._save_plan is None:
            self._save_plan = _plan_saving(self, self.kept_inputs(args))
        return self._save_plan

    def eager_fn(self) -> Callable:
        """The torch-level graph as eager ops (built on first use)."""
        if self._eager_fn is None:
            self._eager_fn = compile_to_python(self.source_graph)
        return self._eager_fn


def _as_sequence(results):
    """A compiled forward's results as a list or tuple (the built-in compilers return one; a custom
    one may return any iterable)."""
    return results if type(results) is list or type(results) is tuple else list(results)


def _distinct(results):
    """An autograd.Function may not return one tensor twice; a later duplicate becomes an alias."""
    seen, out = set(), []
    for r in results:
        if isinstance(r, torch.Tensor):
            if id(r) in seen:
                r = r.view_as(r)
            seen.add(id(r))
        out.append(r)
    return out


@dataclass(frozen=True, slots=True)
class SavePlan:
    """How a training call saves for backward, decided once per program.

    `num_outputs`: the forward's results before its saved values (mutated inputs' new values
    included). `saved_kinds`: None when every saved value is a tensor, else whether each one is.
    `kept`: the arguments kept for a differentiable backward. `shared`: (argument, saved value) of
    each kept tensor argument the forward also returns among its saved values; a call whose saved
    value is that argument itself saves it once, only the `unshared` arguments after the saved
    values, and finds the kept arguments at `shared_positions` among the saved tensors; otherwise
    every kept argument is saved after them, at `own_positions`."""

    num_outputs: int
    saved_kinds: tuple[bool, ...] | None
    kept: KeptInputs
    shared: tuple[tuple[int, int], ...]
    unshared: tuple[int, ...]
    shared_positions: tuple[int, ...]
    own_positions: tuple[int, ...]
    non_differentiable: tuple[int, ...]


def _plan_saving(program: CompiledProgram, kept: KeptInputs) -> SavePlan:
    outputs = program.forward_graph.outputs
    num_outputs = program.traced.num_outputs + len(program.mutated_inputs)
    saved_values = outputs[num_outputs:]
    kinds = tuple(isinstance(v.type, TensorType) for v in saved_values)
    num_saved = sum(kinds)
    own_positions = tuple(range(num_saved, num_saved + len(kept.saved)))
    shared, unshared, shared_positions = (), kept.saved, own_positions
    if all(kinds):
        argument_of = {v.name: i for i, v in enumerate(program.forward_graph.inputs)}
        saved_at: dict[int, int] = {}
        for k, v in enumerate(saved_values):
            if v.name in argument_of:
                saved_at.setdefault(argument_of[v.name], k)
        shared = tuple((i, saved_at[i]) for i in kept.saved if i in saved_at)
        unshared = tuple(i for i in kept.saved if i not in saved_at)
        after = iter(range(num_saved, num_saved + len(unshared)))
        shared_positions = tuple(saved_at[i] if i in saved_at else next(after) for i in kept.saved)
    return SavePlan(num_outputs, None if all(kinds) else kinds, kept, shared, unshared, shared_positions,
                    own_positions, program.non_differentiable_outputs())


class _CompiledFunction(torch.autograd.Function):
    """Calls the compiled forward; its backward calls the (lazily) compiled backward graph."""

    @staticmethod
    def forward(ctx, program: CompiledProgram, *args):
        plan = program._save_plan or program.save_plan(args)
        # a differentiable backward re-runs the graph and must draw the numbers this call draws
        rng_before = save_rng_state(program.rng_devices) if program.rng_devices else None
        results = _as_sequence(program.forward_fn(*args))
        ctx.rng = None if rng_before is None else (rng_before, save_rng_state(program.rng_devices))
        num_outputs = plan.num_outputs
        outputs, saved = results[:num_outputs], results[num_outputs:]
        if len(set(map(id, outputs))) != len(outputs):
            outputs = _distinct(outputs)
        ctx.program = program
        ctx.num_inputs = len(args)
        kinds = plan.saved_kinds
        if kinds is None:  # the usual case: the backward reads no saved ints
            saved_tensors = saved
            ctx.saved_others = ()
        else:
            saved_tensors = [s for s, is_tensor in zip(saved, kinds) if is_tensor]
            ctx.saved_kinds = kinds
            ctx.saved_others = [s for s, is_tensor in zip(saved, kinds) if not is_tensor]
        ctx.num_saved_tensors = len(saved_tensors)
        # The inputs, for a backward that autograd must differentiate again (double_backward): the
        # tensors are saved (once, where the forward saves that very tensor too); a mutated input is
        # kept as a copy of its value now, since the call writes to it afterwards; other arguments as
        # they are.
        kept = plan.kept
        if kept.unsaved:
            ctx.other_inputs = {
                i: args[i] if i in kept.others else args[i].detach().clone() for i in kept.unsaved
            }
        else:
            ctx.other_inputs = {}
        if plan.shared and all(saved[k] is args[i] for i, k in plan.shared):
            ctx.input_positions = plan.shared_positions
            ctx.save_for_backward(*saved_tensors, *[args[i] for i in plan.unshared])
        else:
            ctx.input_positions = plan.own_positions
            ctx.save_for_backward(*saved_tensors, *[args[i] for i in kept.saved])
        if plan.non_differentiable:
            frozen = [outputs[i] for i in plan.non_differentiable if isinstance(outputs[i], torch.Tensor)]
            if frozen:
                ctx.mark_non_differentiable(*frozen)
        return tuple(outputs)

    @staticmethod
    def backward(ctx, *grad_outputs):
        program: CompiledProgram = ctx.program
        if torch.is_grad_enabled():  # create_graph=True: the gradients must be differentiable
            inputs = [None] * ctx.num_inputs
            saved_tensors = ctx.saved_tensors
            for i, position in zip(program.kept_inputs(inputs).saved, ctx.input_positions):
                inputs[i] = saved_tensors[position]
            for i, x in ctx.other_inputs.items():
                inputs[i] = x
            grads = differentiable_backward(program, inputs, grad_outputs, ctx.needs_input_grad[1:], ctx.rng)
            return (None, *grads)
        if ctx.saved_others:
            tensors, others = iter(ctx.saved_tensors[:ctx.num_saved_tensors]), iter(ctx.saved_others)
            saved = [next(tensors) if is_tensor else next(others) for is_tensor in ctx.saved_kinds]
        else:
            saved = ctx.saved_tensors[:ctx.num_saved_tensors]
        tangents = [_in_layout(grad_outputs[i], layout) for i, layout in program.tangent_layouts()]
        backward = program._backward_fn or program.backward_fn([*saved, *tangents])
        grads = backward(*saved, *tangents)
        result = [None] * ctx.num_inputs
        for index, grad in zip(program.traced.grad_inputs, grads):
            result[index] = grad
        return (None, *result)


def _tangent_layout(t: TensorType):
    """What `_in_layout` lays a tangent of type `t` out as: "contiguous", the strides, or for symbolic
    strides None ("no stride 0": an expanded gradient is made dense) or "expanded" (passed as it is);
    the compiled backward checks the rest."""
    if t.is_contiguous:
        return "contiguous"
    if t.free_symbols:
        return "expanded" if any(s == 0 for s in t.strides) else None
    return tuple(t.strides)


def _in_layout(grad: torch.Tensor, layout) -> torch.Tensor:
    """`grad` laid out as the backward was traced for (the output's layout, from `_tangent_layout`):
    autograd hands over whatever the consumer made (an expanded scalar from `.sum()`, a transposed
    product, ...), and compiled backwards are specialized to their inputs' strides."""
    if layout == "contiguous":
        return grad if grad.is_contiguous() else grad.contiguous()
    if layout == "expanded":
        return grad
    if layout is None:
        # symbolic strides, none of them 0: an expanded gradient (`.sum().backward()`) cannot match
        expanded = any(n > 1 and s == 0 for n, s in zip(grad.shape, grad.stride()))
        return grad.contiguous() if expanded else grad
    if all(n == 1 or a == b for n, a, b in zip(grad.shape, grad.stride(), layout)):
        return grad
    return torch.empty_strided(grad.shape, layout, dtype=grad.dtype, device=grad.device).copy_(grad)


def aliasing_problem(program: CompiledProgram, args) -> str | None:
    """Why these inputs cannot run the compiled program: a mutated input shares storage with another
    input (the same tensor passed twice, overlapping views of one tensor), while the trace treated
    them as separate memory. None when they can."""
    if not program.mutated_inputs:
        return None
    # One pass over the inputs: a decode step mutates a cache per layer among hundreds of weights.
    mutated = {}
    for i in program.mutated_inputs:
        if args[i].numel() != 0:  # nothing to write, and empty tensors may all report address 0
            mutated.setdefault(args[i].untyped_storage().data_ptr(), i)
    if not mutated:
        return None
    for j, other in enumerate(args):
        if not isinstance(other, torch.Tensor):
            continue
        i = mutated.get(other.untyped_storage().data_ptr())
        if i is None or i == j:
            continue
        name_i = program.traced.graph.inputs[i].name
        name_j = program.traced.graph.inputs[j].name
        return (f"input %{name_i} is mutated by the compiled graph and shares storage with input "
                f"%{name_j}; the graph was traced for separate tensors")
    return None


def _apply_metadata_mutations(program: CompiledProgram, args) -> list:
    """Change the inputs' shapes in place as the program does (`x.t_()`), before it runs, as eager
    does (a tensor saved for backward must see the version the change gives it). Returns the
    arguments for the graph: each changed input as a view in the layout the graph was traced for."""
    graph_args = list(args)
    for change in program.traced.metadata_mutations:
        tensor = args[change.index]
        traced = (tensor.shape, tensor.stride(), tensor.storage_offset())
        for node, grad_enabled in change.ops:
            with torch.set_grad_enabled(grad_enabled):
                run_node(node, {first_tensor_arg(node).name: tensor}, {})
        graph_args[change.index] = tensor.as_strided(*traced)
    return graph_args


def _changed_inputs_as_outputs(program: CompiledProgram, args, user_outputs: list) -> None:
    """An output that is an input after its in-place shape change is the caller's tensor itself."""
    for change in program.traced.metadata_mutations:
        for k, spec in enumerate(program.traced.output_specs):
            if spec.kind == "input" and spec.index == change.index and spec.chain == change.chain:
                user_outputs[k] = args[change.index]


def run_program(program: CompiledProgram, args) -> list:
    """Call one compiled specialization with the full runtime epilogue. Raises `AliasingError` for
    inputs it cannot run (`aliasing_problem`); `AotFunction` runs those eagerly instead."""
    problem = aliasing_problem(program, args)
    if problem is not None:
        raise AliasingError(f"{problem}. Pass a clone of one of them")
    return _run_checked(program, args)


def _run_checked(program: CompiledProgram, args) -> list:
    """`run_program` for inputs `aliasing_problem` has accepted."""
    caller_args = args
    if program.traced.metadata_mutations:
        args = _apply_metadata_mutations(program, args)
    if program.is_training:
        if torch.is_grad_enabled():
            results = _CompiledFunction.apply(program, *args)
        else:  # called under no_grad, differentiable inside the graph's own enable_grad regions
            with torch.enable_grad():
                results = _CompiledFunction.apply(program, *args)
    elif torch.is_grad_enabled():
        with torch.no_grad():
            results = _as_sequence(program.forward_fn(*args))
    else:  # entering no_grad costs more than small compiled graphs take to run
        results = _as_sequence(program.forward_fn(*args))
    direct = program.direct_outputs
    if direct is not None:  # every output is a graph output as it is: nothing to rebuild
        user_outputs = [results[i] for i in direct]
        for k, out in enumerate(user_outputs):
            if out.is_meta:
                _refuse_meta_output(program, k, args)
        return _write_back(program, caller_args, args, results, user_outputs)
    outputs = results[:program.traced.num_outputs]
    # Views are rebuilt before mutated inputs are written back, so a failure here leaves the inputs
    # untouched and the call can still be re-run eagerly; views of an input see the write-back.
    bindings = None
    user_outputs = []
    for spec, planned in zip(program.traced.output_specs, program.output_views()):
        if spec.kind == "constant":
            user_outputs.append(spec.value)
            continue
        base = outputs[spec.index] if spec.kind == "graph" else args[spec.index]
        if not spec.chain:
            out = base
        elif base.requires_grad and spec.grad_enabled not in (None, torch.is_grad_enabled()):
            # eager took this view in another grad mode than the caller's (in `no_grad`/`enable_grad`)
            with torch.set_grad_enabled(spec.grad_enabled):
                out, bindings = view_of(program, spec, planned, base, args, bindings)
        else:
            out, bindings = view_of(program, spec, planned, base, args, bindings)
        if out.is_meta:
            _refuse_meta_output(program, len(user_outputs), args)
        user_outputs.append(out)
    return _write_back(program, caller_args, args, results, user_outputs)


def _write_back(program: CompiledProgram, caller_args, args, results, user_outputs: list) -> list:
    """Copy the mutated inputs' new values into them, and return the outputs with the inputs whose
    shape the program changed in place (`_changed_inputs_as_outputs`)."""
    if program.mutated_inputs:
        start = program.traced.num_outputs
        with torch.no_grad():
            for i, new in zip(program.mutated_inputs, results[start:start + len(program.mutated_inputs)]):
                if new is not args[i]:
                    args[i].copy_(new)
                else:
                    # The backend wrote the input itself (CUDA graphs, in-place kernels): it changed
                    # as an in-place op changes it, version counter included.
                    increment_version(args[i])
    if program.traced.metadata_mutations:
        _changed_inputs_as_outputs(program, caller_args, user_outputs)
    return user_outputs


def _refuse_meta_output(program: CompiledProgram, index: int, args) -> None:
    """A meta tensor is a tracing placeholder: returned to a caller whose inputs are real tensors it
    would be a wrong result. Raised before mutated inputs are written back, so the call re-runs eagerly."""
    if any(isinstance(a, torch.Tensor) and a.is_meta for a in args):
        return  # the caller computes on meta tensors: meta outputs are what eager returns too
    raise AotAutogradError(
        f"output {index} of the compiled graph {program.forward_graph.name} is a meta tensor while its "
        "inputs are real: a tracing placeholder reached the result (the graph runs eagerly instead)"
    )


def compile_program(graph: Graph, example_inputs, fw_compiler: Compiler, bw_compiler: Compiler, *,
                    training: bool, decompose: Callable[[Graph], Graph] | None = None,
                    check_backward: Callable[[Graph], None] | None = None) -> CompiledProgram:
    """Lower `graph` for these inputs (symbolically when its input types have size symbols) and
    compile the forward; the backward is compiled on first use, after `check_backward(backward)`
    ran now (a compiler's chance to refuse it while the caller can still run something else)."""
    lowered = None
    if input_symbols(graph):
        lowered = lower_symbolic(graph, list(example_inputs), training=training, decompose=decompose)
    if lowered is None:
        lowered = lower(graph, list(example_inputs), training=training, decompose=decompose)
    rng_devices = ()
    if lowered.backward is not None:
        refusal = replay_refusal(graph.name, [lowered.traced.graph, lowered.forward])
        if refusal is not None:
            raise refusal
        rng_devices = random_devices(lowered.traced.graph)
    if check_backward is not None and lowered.backward is not None:
        check_backward(lowered.backward)
    forward_fn = fw_compiler(lowered.forward, list(example_inputs))
    return CompiledProgram(
        lowered.traced, lowered.mutated_inputs, lowered.forward, forward_fn, lowered.backward, bw_compiler,
        lowered.num_saved, lowered.report, _input_flags(example_inputs), lowered.size_conditions,
        source_graph=graph, rng_devices=rng_devices,
    )


def _input_flags(args) -> tuple:
    """What a program is specialized on besides sizes."""
    flags = [torch.is_grad_enabled()]
    for x in args:
        if isinstance(x, torch.Tensor):
            flags.append((x.dtype, x.device, x.requires_grad))
        else:  # ints are checked against their SymInt type; other scalars were baked into the graph
            flags.append((type(x), None if type(x) is int else x))
    return tuple(flags)


def _accepts(program: CompiledProgram, args) -> bool:
    """Whether a program lowered with symbolic sizes can run these inputs."""
    graph = program.forward_graph
    if program.input_flags != _input_flags(args):
        return False
    try:
        bindings = bind_symbols(graph, args)
    except IRError:
        return False
    if any(value < 2 for value in bindings.values()):
        return False  # 0 and 1 are always specialized
    try:
        if any(evaluate(expr, bindings) % d for expr, d in program.size_conditions):
            return False  # a floor division in the program was fitted for multiples only
    except IRError:
        return False
    for value, x in zip(graph.inputs, args):
        t = value.type
        try:
            if isinstance(t, TensorType):
                if [evaluate(d, bindings) for d in t.shape] != list(x.shape):
                    return False
                if [evaluate(d, bindings) for d in t.strides] != list(x.stride()):
                    return False
            elif isinstance(t, SymIntType):
                if evaluate(t.expr, bindings) != x:
                    return False
        except IRError:
            return False
    return True


def _signature(args) -> tuple:
    key = [torch.is_grad_enabled()]
    for x in args:
        if isinstance(x, torch.Tensor):
            key.append((x.shape, x.stride(), x.dtype, x.device, x.requires_grad))  # torch.Size hashes
        else:
            key.append((type(x), x))
    return tuple(key)


class AotFunction:
    """The callable `aot_compile` returns: one compiled program per input signature."""

    def __init__(self, graph: Graph, fw_compiler: Compiler, bw_compiler: Compiler, decompose=None,
                 check_backward=None):
        self.graph = graph
        self.fw_compiler, self.bw_compiler, self.decompose = fw_compiler, bw_compiler, decompose
        self.check_backward = check_backward
        self.programs: dict[tuple, CompiledProgram] = {}
        self.symbolic: list[CompiledProgram] = []  # programs valid for many sizes
        self.last_program: CompiledProgram | None = None
        # grad mode switched on inside the graph makes it differentiable even when called under no_grad
        self.enables_grad = any(
            node.op == "torch._C._set_grad_enabled" and node.args[:1] == (True,) for node in graph.nodes
        )
        self.warned_eager = False
        self._eager_fn: Callable | None = None
        self._checked: CompiledProgram | None = None  # set by assume_example_signature
        self.last_run_compiled = False  # set by run_assumed

    def assume_example_signature(self) -> None:
        """The caller promises that every later call passes inputs of the signature of the example
        inputs (grad mode, each tensor's sizes, strides, dtype, device and requires_grad): capture's
        guards check exactly that before each call of a graph without size symbols (a graph with
        them is left alone). Calls then run
        the one compiled program without computing and looking up their signature (a dict key of
        every input's layout, a measurable share of a small model's call). Without one compiled
        program of static sizes this does nothing. An inference program's compiled forward with an
        `assume_example_inputs()` method is told the same; a training program's forward and
        backward as `assume_forward_inputs` says."""
        program = self.static_program()
        if program is not None:
            self._checked = program
            if program.is_training:
                self.assume_forward_inputs(program)
                return
            # an inference program's forward gets the checked inputs themselves (in the traced
            # layout), so a compiled forward that checks its inputs may rely on the same promise
            promise = getattr(program.forward_fn, "assume_example_inputs", None)
            if promise is not None:
                promise()

    def static_program(self) -> CompiledProgram | None:
        """The one compiled program when this function has exactly one, of static sizes (the only
        program any input of the example inputs' signature can get), else None."""
        # a graph with size symbols is guarded on its symbols' constraints only, and its programs
        # may still be specialized per size: each call looks its program up
        if len(self.programs) != 1 or self.symbolic or any(v.type.free_symbols for v in self.graph.inputs):
            return None
        return next(iter(self.programs.values()))

    def assume_forward_inputs(self, program: CompiledProgram) -> None:
        """Tell `program`'s compiled forward, where it has an `assume_example_inputs()` method, that
        its inputs are checked: a program of static sizes (`static_program`) is reached only with
        inputs of its exact signature (the lookup's key, or `run_assumed`'s promise), and its
        forward gets those inputs themselves unless the graph changes an input's metadata. Its
        compiled backward is told the same (once compiled): it gets what that forward saved, and the
        tangents laid out as traced (`_in_layout`), whose sizes and dtypes autograd checks."""
        if program.traced.metadata_mutations:
            return
        promise = getattr(program.forward_fn, "assume_example_inputs", None)
        if promise is not None:
            promise()
        if program.is_training and program._backward_fn is None:
            program.backward_inputs_checked = True

    def run_assumed(self, program: CompiledProgram, args) -> list:
        """`self(*args)` with `program` (from `static_program`) for inputs the caller knows to have
        its signature, without computing and looking it up. `last_run_compiled` tells afterwards
        whether the program ran (outputs in its traced layouts) or the graph ran eagerly."""
        problem = aliasing_problem(program, args)
        if problem is not None:
            self.last_run_compiled = False
            return self.run_eagerly(args, problem)
        self.last_run_compiled = True
        return _run_checked(program, args)

    def program_for(self, args) -> CompiledProgram:
        """The compiled program for these inputs, compiling it on first sight of their signature."""
        key = _signature(args)
        program = self.programs.get(key)
        if program is None:
            program = next((p for p in self.symbolic if _accepts(p, args)), None)
        if program is None:
            training = (torch.is_grad_enabled() or self.enables_grad) and any(
                isinstance(x, torch.Tensor) and x.requires_grad for x in args
            )
            program = compile_program(self.graph, args, self.fw_compiler, self.bw_compiler,
                                      training=training, decompose=self.decompose,
                                      check_backward=self.check_backward)
            self.programs[key] = program
            if any(v.type.free_symbols for v in program.forward_graph.inputs):
                self.symbolic.append(program)
        self.last_program = program
        return program

    def __call__(self, *args) -> list:
        program = self._checked or self.program_for(args)
        problem = aliasing_problem(program, args)
        if problem is not None:
            return self.run_eagerly(args, problem)
        return _run_checked(program, args)

    def run_eagerly(self, args, reason: str) -> list:
        """Run the torch-level graph as eager ops for this call, after one warning (later ones are
        logged to `torchsmith.autograd_aot`)."""
        message = (
            f"torchsmith: stage autograd_aot runs graph {self.graph.name} eagerly for this call: {reason}"
        )
        if self.warned_eager:
            log.info("%s", message)
        else:
            self.warned_eager = True
            warn_at_user(message)
        if self._eager_fn is None:
            self._eager_fn = compile_to_python(self.graph)
        return list(self._eager_fn(*args))


def aot_compile(graph: Graph, example_inputs, fw_compiler: Compiler, bw_compiler: Compiler | None = None, *,
                decompose: Callable[[Graph], Graph] | None = None,
                check_backward: Callable[[Graph], None] | None = None) -> AotFunction:
    """Compile a torch-level graph ahead of time for forward and backward.

    `fw_compiler(graph, example_inputs) -> callable` compiles the forward (or inference) ATen
    graph, `bw_compiler` the backward graph (default: `fw_compiler`); `decompose`, if given, maps the
    functional ATen graph to a lower one (e.g. `torchsmith.prims.decompose`) before partitioning.

        >>> fn = aot_compile(graph, [x, w], interpreter_compiler, interpreter_compiler)  # doctest: +SKIP
        >>> (y,) = fn(x, w); y.sum().backward()  # doctest: +SKIP
    """
    function = AotFunction(graph, fw_compiler, bw_compiler or fw_compiler, decompose, check_backward)
    function.program_for(list(example_inputs))
    return function


def interpreter_compiler(graph: Graph, example_inputs) -> Callable:
    """A compiler that does not compile: it runs the graph with the reference interpreter."""

    def run(*args):
        return interpret(graph, *args)

    return run


def python_compiler(graph: Graph, example_inputs) -> Callable:
    """A compiler to straight-line Python calling eager ops (torchsmith.ir.compile_to_python): the
    same results as the interpreter without its per-node overhead, and an op's own exception type."""
    return compile_to_python(graph)


def aot_eager(graph: Graph, example_inputs, *, decompose=None) -> AotFunction:
    """`aot_compile` with eager ops (through generated Python) for forward and backward."""
    return aot_compile(graph, example_inputs, python_compiler, python_compiler, decompose=decompose)


def aot_eager_backend(graph: Graph, example_inputs) -> Callable:
    """The `"aot_eager"` backend, with the custom-backend signature `backend(graph, example_inputs)`."""
    return aot_eager(graph, example_inputs)

