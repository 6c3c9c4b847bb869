"""Double backward (`torch.autograd.grad(..., create_graph=True)`) through a compiled program.

A compiled backward graph computes gradients from values saved without autograd history, so its
result cannot be differentiated again. When autograd asks for a differentiable backward (gradient
penalties, Hessian-vector products), the program's captured `torch.*` graph is run again on the
saved inputs with autograd recording, and `torch.autograd.grad` of that run gives the gradients with
their history. The compiled forward's results stand; only this backward runs as eager ops, with one
warning per program.

Random ops (dropout, `rand_like`, `bernoulli`, `randn`) draw the compiled forward's numbers again:
the forward keeps the generators' states from before and after it ran (`rng_replay.py`), the re-run
starts from the first and must end at the second, and the caller's generators are left as they were.
Programs whose numbers cannot be drawn again are refused when compiled (`replay_refusal`), so the
graph runs eagerly from the start rather than failing at the backward.

Refused with a clear error: programs that change an input's shape in place (the saved input no
longer has the shape the program read).
"""

import torch

from torchsmith.autograd_aot.errors import AotAutogradError
from torchsmith.autograd_aot.rng_replay import RngState, replay, unreplayable_random_op
from torchsmith.autograd_aot.user_warning import warn_at_user


def replay_refusal(graph_name: str, graphs: list) -> AotAutogradError | None:
    """The error that refuses a training program at compile time because a differentiable backward
    could not draw its forward's random numbers again (`graphs`: the traced and lowered graphs)."""
    problem = unreplayable_random_op(graphs)
    if problem is None:
        return None
    return AotAutogradError(
        f"graph {graph_name} trains through random op {problem}; a double backward "
        "(create_graph=True) could not replay its numbers, so the graph runs eagerly"
    )


def _refusal(program) -> str | None:
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


def _rerun(program, inputs: list, rng: tuple[RngState, RngState] | None) -> list:
    """The captured graph run again with autograd recording, drawing the forward's random numbers."""

    def run():
        with torch.set_grad_enabled(program.input_flags[0]):  # the grad mode the forward ran in
            return program.eager_fn()(*inputs)

    if rng is None:
        return run()
    before, after = rng
    user_outputs, left = replay(before, run)
    if not left.same_as(after):
        # the re-run drew more or fewer numbers than the compiled forward: its masks are not the
        # forward's, and a gradient from them would be wrong
        raise AotAutogradError(
            f"double backward through compiled graph {program.traced.graph.name}: the eager re-run drew "
            "other random numbers than the compiled forward did. Report this as a torchsmith bug; "
            "torchsmith.compile(..., backend='eager') runs this function correctly meanwhile"
        )
    return user_outputs


def differentiable_backward(program, inputs: list, grad_outputs, needs_input_grad,
                            rng: tuple[RngState, RngState] | None = None) -> list:
    """Gradients of `program`'s differentiable outputs (weighted by `grad_outputs`) with respect to
    the `inputs` that `needs_input_grad` marks, computed so that they can be differentiated again.
    `rng`: the generators' states before and after the compiled forward, when it drew random numbers."""
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
    user_outputs = _rerun(program, inputs, rng)
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
