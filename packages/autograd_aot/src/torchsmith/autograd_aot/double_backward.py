"""Double backward (`torch.autograd.grad(..., create_graph=True)`) through a compiled program.

A compiled backward graph computes gradients from values saved without autograd history, so its
result cannot be differentiated again. When autograd asks for a differentiable backward (gradient
penalties, Hessian-vector products), the program's captured `torch.*` graph is run again on the
saved inputs with autograd recording, and `torch.autograd.grad` of that run gives the gradients with
their history. The compiled forward's results stand; only this backward runs as eager ops, with one
warning per program.

Refused with a clear error: programs with random ops (a second run would draw other numbers than the
compiled forward did) and programs that change an input's shape in place (the saved input no
longer has the shape the program read).
"""

import torch

from torchsmith.autograd_aot.errors import AotAutogradError
from torchsmith.autograd_aot.user_warning import warn_at_user


def random_op(graph) -> str | None:
    """The first op of an ATen graph that draws random numbers, if any."""
    from torchsmith.ir import lookup_op

    for node in graph.nodes:
        if node.op.startswith("aten.") and torch.Tag.nondeterministic_seeded in lookup_op(node.op).eager.tags:
            return node.op
    return None


def _refusal(program) -> str | None:
    op = random_op(program.traced.graph)
    if op is not None:
        return (f"it draws random numbers ({op}): a second run would not see the compiled forward's "
                "numbers. Compute the first gradient outside the compiled function, or fix the randomness")
    if program.traced.metadata_mutations:
        return "it changes an input's shape in place; change a copy's shape instead"
    return None


def _bases(program, user_outputs) -> dict[int, torch.Tensor]:
    """The eager tensors behind the compiled forward's outputs: an output that is a view of a base
    (`y[0]`) leads to that base through `._base`."""
    bases = {}
    for spec, out in zip(program.traced.output_specs, user_outputs):
        if spec.kind != "graph" or spec.index in bases or not isinstance(out, torch.Tensor):
            continue
        if not spec.chain:
            bases[spec.index] = out
        elif out._base is not None:
            bases[spec.index] = out._base
    return bases


def differentiable_backward(program, inputs: list, grad_outputs, needs_input_grad) -> list:
    """Gradients of `program`'s differentiable outputs (weighted by `grad_outputs`) with respect to
    the `inputs` that `needs_input_grad` marks, computed so that they can be differentiated again."""
    name = program.traced.graph.name
    reason = _refusal(program)
    if reason is not None:
        raise AotAutogradError(
            f"double backward (create_graph=True) through compiled graph {name} is not supported: {reason}"
        )
    if not program.warned_double_backward:
        program.warned_double_backward = True
        warn_at_user(
            f"torchsmith: stage autograd_aot runs the backward of graph {name} as eager ops (the captured "
            "graph recomputed with autograd recording) because autograd asked for a differentiable "
            "backward (create_graph=True); compiled backward graphs are not differentiable"
        )
    # Each input that requires grad enters as a view of itself: the gradient with respect to that
    # view counts only the program's own uses of the input, not paths through another input that
    # depends on it (which autograd adds through that input's history), and still has the input's
    # history for the next differentiation.
    with torch.enable_grad():
        inputs = [x.view_as(x) if isinstance(x, torch.Tensor) and x.requires_grad else x for x in inputs]
    with torch.set_grad_enabled(program.input_flags[0]):  # the grad mode the forward ran in
        user_outputs = program.eager_fn()(*inputs)
    bases = _bases(program, user_outputs)
    outputs, weights = [], []
    for i in program.traced.differentiable_outputs:
        base = bases.get(i)
        if base is None:
            raise AotAutogradError(
                f"double backward through compiled graph {name}: output {i} has no eager twin"
            )
        if base.requires_grad:
            outputs.append(base)
            weights.append(grad_outputs[i])
    wanted = [k for k, x in enumerate(inputs)
              if needs_input_grad[k] and isinstance(x, torch.Tensor) and x.requires_grad]
    result = [None] * len(inputs)
    if not outputs or not wanted:
        return result
    grads = torch.autograd.grad(outputs, [inputs[k] for k in wanted], weights, create_graph=True,
                                allow_unused=True)
    for k, grad in zip(wanted, grads):
        result[k] = grad
    return result
