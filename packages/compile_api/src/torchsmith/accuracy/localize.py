"""Find the first node whose values differ, once a stage's outputs disagree with the previous stage's.

Each stage is localized in its own input graph, walking its nodes in order:

- autograd_aot: every node of capture's torch-level graph is lowered alone (a one-node graph, on
  the values the interpreter gave its inputs) and compared with running that torch op eagerly;
- prims: every node of the functional ATen graph (the joint forward+backward graph when training)
  is decomposed alone and compared with the ATen op;
- inductor: the prims forward (then backward) graph is compiled once more with every intermediate
  value as an extra output, so each prims node's value is compared where the kernels computed it.

The node found is the first whose inputs agree and whose outputs do not; its `source` is the user's
line, which is how the node maps back to the program and to the other levels.
"""

import dataclasses
import re
from dataclasses import dataclass

import torch

from torchsmith.accuracy.compare import (
    Difference,
    clone_inputs,
    first_difference,
    run_values,
    value_difference,
)
from torchsmith.accuracy.levels import AUTOGRAD_AOT, CAPTURE, prims_decomposition
from torchsmith.ir import Graph, Node, interpret
from torchsmith.ir.interpreter import bind_symbols, run_node
from torchsmith.ir.symbolic import evaluate
from torchsmith.ir.types import TensorType


@dataclass(frozen=True, slots=True)
class Culprit:
    """What a failed stage check found: the stage's input graph (`role` says which one) and its
    inputs, the first differing node (None when no single node differs) with its one-node graph and
    inputs, and the difference. `training`: the replay also compares gradients."""

    stage: str
    role: str
    graph: Graph
    inputs: list
    difference: Difference
    node: Node | None = None
    node_graph: Graph | None = None
    node_inputs: list | None = None
    training: bool = False

    def node_label(self) -> str:
        """`%y = aten.gelu.default (from model.py:12)`, or what differed when no node was found."""
        if self.node is None:
            return f"no single node ({self.difference.what} of the {self.role} graph differs)"
        names = ", ".join(f"%{v.name}" for v in self.node.outputs)
        where = f" (from {self.node.source})" if self.node.source else ""
        return f"{names} = {self.node.op}{where}"


def interpret_env(graph: Graph, inputs) -> dict:
    """Every value of `graph` on these inputs, by name (the reference interpreter, node by node)."""
    bindings = bind_symbols(graph, inputs)
    env = {v.name: x for v, x in zip(graph.inputs, inputs)}
    for node in graph.nodes:
        result = run_node(node, env, bindings)
        if len(node.outputs) == 1:
            env[node.outputs[0].name] = result
        else:
            for v, r in zip(node.outputs, result):
                env[v.name] = r
    return env


def _tensor_outputs(node: Node) -> tuple:
    return tuple(v for v in node.outputs if isinstance(v.type, TensorType))


def one_node_graph(node: Node, env: dict) -> tuple[Graph, list]:
    """`node` alone as a graph (its inputs become graph inputs) and the values of those inputs."""
    inputs = tuple(dict.fromkeys(node.inputs))
    graph = Graph(node.op.replace(".", "_"), inputs, (node,), _tensor_outputs(node))
    return graph, [env[v.name] for v in inputs]


def _named(found: Difference, sub: Graph) -> Difference:
    """`output 0` of a one-node graph called by its value's name (`%gelu`)."""
    match = re.fullmatch(r"output (\d+)", found.what)
    if match is None or int(match.group(1)) >= len(sub.outputs):
        return found
    return dataclasses.replace(found, what=f"%{sub.outputs[int(match.group(1))].name}")


def _requires_grad(values) -> bool:
    return any(isinstance(x, torch.Tensor) and x.requires_grad for x in values)


def localize_autograd_aot(graph: Graph, inputs, training: bool, difference: Difference) -> Culprit:
    """The first torch-level node whose ATen lowering differs from running it eagerly (or, when no
    single node does, the whole torch-level graph with the graph's `difference`)."""
    with torch.enable_grad() if training else torch.no_grad():
        env = interpret_env(graph, clone_inputs(inputs, keep_grad=training))
    for node in graph.nodes:
        if not _tensor_outputs(node):
            continue
        sub, sub_inputs = one_node_graph(node, env)
        sub_training = training and _requires_grad(sub_inputs)
        try:
            expected, names = run_values(
                CAPTURE.build(sub, sub_inputs, True), sub_inputs, training=sub_training
            )
            actual, _ = run_values(
                AUTOGRAD_AOT.build(sub, sub_inputs, True), sub_inputs, training=sub_training
            )
        except Exception:  # noqa: BLE001 - a node that cannot be lowered alone is not the one to name
            continue
        found = first_difference(expected, actual, names)
        found = found and _named(found, sub)
        if found is not None:
            return Culprit(
                "autograd_aot",
                "torch",
                graph,
                list(inputs),
                found,
                node,
                sub,
                clone_inputs(sub_inputs),
                sub_training,
            )
    return Culprit(
        "autograd_aot",
        "torch",
        graph,
        clone_inputs(inputs, keep_grad=training),
        difference,
        training=training,
    )


def example_for(t: TensorType, bindings: dict, seed: int) -> torch.Tensor:
    """A seeded random tensor of type `t` (tangent inputs of joint and backward graphs)."""
    shape = [evaluate(d, bindings) for d in t.shape]
    strides = [evaluate(d, bindings) for d in t.strides]
    generator = torch.Generator().manual_seed(seed)
    values = torch.randn(shape, generator=generator, dtype=torch.float64)
    out = torch.empty_strided(shape, strides, dtype=t.dtype, device=t.device)
    return out.copy_(values if (t.dtype.is_floating_point or t.dtype.is_complex) else values.round())


def aten_graph_and_inputs(graph: Graph, inputs, training: bool) -> tuple[Graph, list]:
    """The functional ATen graph autograd_aot makes of `graph` for these inputs (joint when
    training) and its inputs: `inputs`, then seeded tangents."""
    from torchsmith.autograd_aot import lower

    lowered = lower(graph, clone_inputs(inputs, keep_grad=training), training=training, emit_events=False)
    aten = lowered.functional
    bindings = bind_symbols(graph, inputs)
    extra = [example_for(v.type, bindings, 2000 + i) for i, v in enumerate(aten.inputs[len(inputs) :])]
    return aten, clone_inputs(inputs, keep_grad=False) + extra


def localize_prims(
    graph: Graph, inputs, training: bool, difference: Difference, decompose=prims_decomposition
) -> Culprit:
    """The first ATen node whose decomposition to prims differs from the ATen op (or, when no
    single node does, the whole functional ATen graph with the graph's `difference`)."""
    aten, aten_inputs = aten_graph_and_inputs(graph, inputs, training)
    role = "joint" if training else "inference"
    with torch.no_grad():
        env = interpret_env(aten, clone_inputs(aten_inputs))
        for node in aten.nodes:
            if node.dialect != "aten" or not _tensor_outputs(node):
                continue
            sub, sub_inputs = one_node_graph(node, env)
            try:
                lowered = decompose(sub)
                expected, names = run_values(lambda *a, g=sub: interpret(g, *a), sub_inputs, training=False)
                actual, _ = run_values(lambda *a, g=lowered: interpret(g, *a), sub_inputs, training=False)
            except Exception:  # noqa: BLE001 - a node that cannot be decomposed alone is not the one to name
                continue
            found = first_difference(expected, actual, names)
            found = found and _named(found, sub)
            if found is not None:
                return Culprit("prims", role, aten, aten_inputs, found, node, sub, clone_inputs(sub_inputs))
    return Culprit("prims", role, aten, aten_inputs, difference)


def localize_inductor(
    compiled, graph: Graph, inputs, training: bool, options: dict | None, difference: Difference
) -> Culprit | None:
    """The first prims node of the inductor's forward (then backward) graph whose compiled value
    differs from the interpreter's (or, when none does, the forward graph with the graph's
    `difference`); None when `compiled` is not the inductor's AOT function."""
    program = getattr(compiled, "last_program", None)
    if program is None:
        return None
    forward_inputs = clone_inputs(inputs, keep_grad=False)
    role = "forward" if program.backward_graph is not None else "inference"
    whole = Culprit("inductor", role, program.forward_graph, clone_inputs(forward_inputs), difference)
    found = scan_compiled("inductor", role, program.forward_graph, forward_inputs, options)
    if found is not None:
        return found
    if program.backward_graph is None:
        return whole
    with torch.no_grad():
        results = interpret(program.forward_graph, *clone_inputs(forward_inputs))
    saved = results[program.traced.num_outputs + len(program.mutated_inputs) :]
    backward = program.backward_graph
    bindings = bind_symbols(program.forward_graph, forward_inputs)
    tangents = [example_for(v.type, bindings, 3000 + i) for i, v in enumerate(backward.inputs[len(saved) :])]
    return scan_compiled("inductor", "backward", backward, list(saved) + tangents, options) or whole


def scan_compiled(stage: str, role: str, graph: Graph, inputs: list, options: dict | None) -> Culprit | None:
    """Compile `graph` with every intermediate tensor as an extra output; the first node whose
    compiled value differs from the interpreter's (or None when all agree)."""
    from torchsmith.inductor.device_compilers import compile_for_device, with_input_strides

    outputs = {v.name for v in graph.outputs}
    extra = tuple(v for node in graph.nodes for v in _tensor_outputs(node) if v.name not in outputs)
    probe = graph.replace(outputs=graph.outputs + extra)
    with torch.no_grad():
        expected = interpret(probe, *clone_inputs(inputs))
        try:
            compiled = compile_for_device(with_input_strides(probe, inputs), clone_inputs(inputs), options)
            actual = list(compiled(*clone_inputs(inputs)))
        except Exception:  # noqa: BLE001 - no probe: compare the graph's own outputs below
            compiled = compile_for_device(with_input_strides(graph, inputs), clone_inputs(inputs), options)
            probe, actual = graph, list(compiled(*clone_inputs(inputs)))
            expected = expected[: len(graph.outputs)]
    by_name = {}
    for v, e, a in zip(probe.outputs, expected, actual):
        by_name.setdefault(v.name, (e, a))
    with torch.no_grad():
        env = interpret_env(graph, clone_inputs(inputs))
    for node in graph.nodes:
        for v in _tensor_outputs(node):
            if v.name not in by_name:
                continue
            found = value_difference(*by_name[v.name], f"%{v.name}")
            if found is not None:
                sub, sub_inputs = one_node_graph(node, env)
                return Culprit(
                    stage, role, graph, clone_inputs(inputs), found, node, sub, clone_inputs(sub_inputs)
                )
    for i, (v, e, a) in enumerate(zip(graph.outputs, expected, actual)):
        found = value_difference(e, a, f"output {i} (%{v.name})")
        if found is not None:
            return Culprit(stage, role, graph, clone_inputs(inputs), found)
    return None
