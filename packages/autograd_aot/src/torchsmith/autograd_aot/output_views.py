"""Outputs that are views: each rebuilt on the call's real tensors by replaying the view ops the
trace recorded (`spec.chain`: view nodes and the result index of each), so a caller gets views of
its inputs or of the graph's outputs as eager returns them.

`planned_views` resolves a chain's arguments once, ahead of the calls; chains whose sizes hold
symbols or that read another tensor replay node by node with the call's size bindings
(`replay_views`)."""

import sympy

from torchsmith.autograd_aot.aliasing import first_tensor_arg
from torchsmith.autograd_aot.errors import AotAutogradError
from torchsmith.ir import Slice
from torchsmith.ir.interpreter import bind_symbols, run_node, thaw
from torchsmith.ir.registry import lookup_op


def node_symbols(node) -> bool:
    """Whether a view node's arguments hold symbolic sizes (they need the call's bindings)."""
    return _has_symbols(node.args) or _has_symbols(tuple(v for _, v in node.kwargs))


def _has_symbols(arg) -> bool:
    if isinstance(arg, sympy.Basic):
        return bool(arg.free_symbols)
    if isinstance(arg, Slice):
        return _has_symbols((arg.start, arg.stop, arg.step))
    if isinstance(arg, tuple):
        return any(_has_symbols(a) for a in arg)
    return False


def replay_views(chain, tensor, bindings=None):
    """`tensor` viewed by each node of `chain` in turn, run with the size `bindings`."""
    for node, index in chain:
        env = {first_tensor_arg(node).name: tensor}
        try:
            result = run_node(node, env, bindings or {})
        except KeyError as e:
            raise AotAutogradError(f"cannot rebuild output view {node.op}: it reads tensor {e}") from None
        tensor = result[index] if isinstance(result, (list, tuple)) else result
    return tensor


def planned_views(chain) -> tuple | None:
    """`chain` as (function, arguments, keywords, tensor position, result index) steps, each
    argument but the viewed tensor resolved once, or None when a step cannot be resolved ahead of
    the call: sizes with symbols, or a tensor other than the one viewed."""
    steps = []
    for node, index in chain:
        source = first_tensor_arg(node)
        if node_symbols(node) or any(v.name != source.name for v in node.inputs):
            return None
        position = next((i for i, a in enumerate(node.args) if a == source), None)
        if position is None:  # the tensor is passed by keyword
            return None
        args = [None if i == position else thaw(a) for i, a in enumerate(node.args)]
        steps.append((lookup_op(node.op).eager, args, {k: thaw(v) for k, v in node.kwargs}, position, index))
    return tuple(steps)


def run_views(steps, tensor):
    """`tensor` viewed by each of `planned_views`' steps in turn."""
    for fn, args, kwargs, position, index in steps:
        args = list(args)
        args[position] = tensor
        result = fn(*args, **kwargs)
        tensor = result[index] if isinstance(result, (list, tuple)) else result
    return tensor


def view_of(program, spec, planned, base, args, bindings):
    """The output `spec` as a view of `base` and the size bindings, bound on first need."""
    if planned is not None:
        return run_views(planned, base), bindings
    if bindings is None and any(node_symbols(node) for node, _ in spec.chain):
        bindings = bind_symbols(program.forward_graph, args)
    return replay_views(spec.chain, base, bindings), bindings
