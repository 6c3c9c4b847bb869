"""`options={"check": True}`: every compiled graph is run through each stage's output on the call's
real inputs and compared with the previous stage's, before the call uses it.

On the first disagreement the check names the stage and the first node whose values differ (see
localize.py), writes a repro folder (repro_folder.py), warns with stage, node, max error and folder,
and returns the previous stage's (agreeing) result for this graph, so the call stays correct.
"""

import logging
import warnings

import torch

from torchsmith.accuracy.compare import first_difference, run_values
from torchsmith.accuracy.levels import Level, ladder
from torchsmith.accuracy.localize import Culprit, localize_autograd_aot, localize_inductor, localize_prims
from torchsmith.accuracy.repro_folder import write_repro
from torchsmith.errors import AccuracyWarning
from torchsmith.ir import Graph

log = logging.getLogger("torchsmith.accuracy")

# Ops that draw random numbers: two stages draw different ones, so such graphs are not compared.
_RANDOM_WORDS = ("rand", "dropout", "bernoulli", "normal", "multinomial", "philox", "poisson", "exponential")


def random_op(graph: Graph) -> str | None:
    """The first op of `graph` that draws random numbers, if any (dropout with p=0 or outside
    training draws none)."""
    for node in graph.nodes:
        name = node.op.lower()
        if any(word in name for word in _RANDOM_WORDS) and not _inactive_dropout(node):
            return node.op
    return None


def _inactive_dropout(node) -> bool:
    """`F.dropout(x, p, training)` / `aten.native_dropout(x, p, train)` with p == 0 or not training."""
    if "dropout" not in node.op:
        return False
    kwargs = node.kwargs_dict
    p = kwargs.get("p", node.args[1] if len(node.args) > 1 else 0.5)
    training = kwargs.get("training", kwargs.get("train", node.args[2] if len(node.args) > 2 else True))
    return (isinstance(p, (int, float)) and p == 0) or training is False


def is_training(example_inputs) -> bool:
    """Whether a call with these inputs builds a backward (grad mode on and an input requires grad)."""
    return torch.is_grad_enabled() and any(
        isinstance(x, torch.Tensor) and x.requires_grad for x in example_inputs
    )


def check_graph(
    graph: Graph,
    example_inputs,
    compiled,
    backend_name: str,
    backend,
    options: dict | None,
    function_name: str,
):
    """`compiled` when every stage agrees with the previous one on `example_inputs`; otherwise the
    previous stage's runner for `graph`, after one `AccuracyWarning` (see the module docstring)."""
    levels = ladder(backend_name, backend, options)
    if len(levels) < 2:
        return compiled
    random = random_op(graph)
    if random is not None:
        log.info(
            "accuracy check skipped for graph %s of %s: %s draws random numbers, which differ between stages",
            graph.name,
            function_name,
            random,
        )
        return compiled
    inputs = list(example_inputs)
    training = is_training(inputs)
    try:
        expected, names = run_values(levels[0].build(graph, inputs, True), inputs, training=training)
    except Exception as e:  # noqa: BLE001 - the reference cannot run: nothing to compare with
        log.warning(
            "accuracy check skipped for graph %s of %s: the reference interpreter failed: %s: %s",
            graph.name,
            function_name,
            type(e).__name__,
            e,
        )
        return compiled
    for previous, level in zip(levels, levels[1:]):
        last = level is levels[-1]
        try:
            runner = compiled if last else level.build(graph, inputs, True)
            actual, _ = run_values(runner, inputs, training=training)
        except Exception as e:  # noqa: BLE001 - the stage's own failure is reported by the normal path
            log.info(
                "accuracy check of stage %s stopped on graph %s: %s: %s",
                level.stage,
                graph.name,
                type(e).__name__,
                e,
            )
            return compiled
        difference = first_difference(expected, actual, names)
        if difference is not None:
            culprit = _localize(level, graph, inputs, training, runner, options, difference)
            _report(culprit, difference, previous, function_name, options, backend_name, graph)
            return previous.build(graph, inputs, False)
        expected = actual
    log.info(
        "accuracy check of graph %s of %s: %s agree on %s",
        graph.name,
        function_name,
        ", ".join(level.stage for level in levels),
        "outputs and gradients" if training else "outputs (inference)",
    )
    return compiled


def _localize(level: Level, graph: Graph, inputs, training: bool, runner, options, difference) -> Culprit:
    """The culprit of a failed stage: its first differing node when one is found, else its input graph
    (capture's graph for a stage without a localizer) with the graph-level difference."""
    found = None
    try:
        if level.stage == "autograd_aot":
            found = localize_autograd_aot(graph, inputs, training, difference)
        elif level.stage == "prims":
            found = localize_prims(graph, inputs, training, difference)
        elif level.stage == "inductor":
            found = localize_inductor(runner, graph, inputs, training, options, difference)
    except Exception as e:  # noqa: BLE001 - the stage is still known; only the node is not
        log.warning(
            "could not find the first differing node of stage %s: %s: %s", level.stage, type(e).__name__, e
        )
    return found or Culprit(level.stage, "torch", graph, list(inputs), difference, training=training)


def capture_nodes_of(culprit: Culprit, captured: Graph) -> list[str]:
    """The nodes of capture's graph that share the culprit's source line (how a node of a lower level
    maps back to what the user wrote)."""
    node = culprit.node
    if node is None or not node.source or culprit.graph is captured:
        return []
    return [
        ", ".join(f"%{v.name}" for v in n.outputs) + f" = {n.op}"
        for n in captured.nodes
        if n.source == node.source and n.outputs
    ]


def _report(
    culprit: Culprit,
    difference,
    previous: Level,
    function_name: str,
    options,
    backend_name: str,
    captured: Graph,
) -> None:
    try:
        folder = str(write_repro(culprit, function_name, options))
    except Exception as e:  # noqa: BLE001 - the warning still names stage and node
        folder = f"(not written: {type(e).__name__}: {e})"
    node_error = culprit.difference
    mapped = "".join(f"    captured there as: {text}\n" for text in capture_nodes_of(culprit, captured))
    message = (
        f"torchsmith accuracy check: stage {culprit.stage} disagrees with stage {previous.stage} on "
        f"{function_name} (graph {culprit.graph.name}, {culprit.role} graph).\n"
        f"  first differing node: {culprit.node_label()}\n{mapped}"
        f"  max error: {node_error.max_error:.3g} at {node_error.what} (rtol {node_error.rtol:g}, "
        f"atol {node_error.atol:g}); the graph's {difference.describe()}\n"
        f"  repro folder: {folder}\n"
        f"  this graph runs the result of stage {previous.stage} instead (backend {backend_name!r})."
    )
    from torchsmith.fallback import _user_stacklevel

    warnings.warn(message, AccuracyWarning, stacklevel=_user_stacklevel())
