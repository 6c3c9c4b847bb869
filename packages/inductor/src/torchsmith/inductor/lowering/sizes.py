"""Lowerings of nodes that compute sizes, not tensors (`aten.sym_size.int`, which autograd_aot puts
in a forward graph to hand the backward a size symbol): the value is the expression its type holds
over the graph's size symbols, known wherever it is read, so no loop or extern call computes it.
A size graph output reaches the caller through `runtime.size_outputs`."""

import sympy

from torchsmith.inductor.lowering.lower import LoweringContext, register_lowering
from torchsmith.ir import Node


@register_lowering("aten.sym_size.int")
def _lower_sym_size(ctx: LoweringContext, node: Node) -> sympy.Expr:
    return sympy.sympify(node.outputs[0].type.expr)
