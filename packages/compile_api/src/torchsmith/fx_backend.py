"""Backends written against torch.fx (fx backends) plugged into `torchsmith.compile`.

An fx backend is `fx_compiler(gm: torch.fx.GraphModule, example_inputs: list) -> callable`, the
signature PyTorch's own compiler takes backends in. `fx_backend(fx_compiler)` turns one into a
torchsmith backend: each captured graph is converted with `torchsmith.ir.to_fx` (placeholders named
after the graph inputs, parameters and buffers lifted to inputs, nodes calling the eager function
the `torch.*` op names) and handed to `fx_compiler`; the callable it returns runs the graph.

    >>> import torchsmith
    >>> def count_nodes(gm, example_inputs):
    ...     count_nodes.calls.append(len(gm.graph.nodes))
    ...     return gm.forward
    >>> count_nodes.calls = []
    >>> f = torchsmith.compile(lambda x: x.sin() + 1, backend=torchsmith.fx_backend(count_nodes))

Two levels, as `torch.compile` offers them:
- `aot=False` (default): the GraphModule is the captured `torch.*`-level graph, as torch.compile's
  fx backends see Dynamo's graph. Training works when the returned callable is differentiable
  (running the GraphModule's ops eagerly is).
- `aot=True`: torchsmith.autograd_aot traces the graph to ATen, functionalizes it and partitions
  forward and backward; `fx_compiler` receives the forward graph (the inference graph when no
  input needs a gradient) and, at the first backward, the backward graph, each an ATen-level
  GraphModule (`torch.ops.aten.*` calls), as `aot_autograd(fw_compiler=..., bw_compiler=...)`
  gives them.

`register_fx_backend(name, fx_compiler, aot=...)` registers the adapter under a name, so
`torchsmith.compile(m, backend=name)` finds it; third-party packages can do the same from the
`torchsmith.backends` entry point group by pointing it at a backend made with `fx_backend`.
"""

from collections.abc import Callable

from torchsmith.backend_registry import register_backend
from torchsmith.errors import BackendError


def fx_backend(fx_compiler: Callable, *, aot: bool = False) -> Callable:
    """A torchsmith backend running each captured graph through `fx_compiler(gm, example_inputs)`."""
    if not callable(fx_compiler):
        raise BackendError(f"fx_backend needs a callable fx compiler, got {type(fx_compiler).__name__}")
    label = getattr(fx_compiler, "__name__", type(fx_compiler).__name__)

    def backend(graph, example_inputs):
        if not aot:
            return compile_with_fx(fx_compiler, graph, example_inputs)
        from torchsmith.autograd_aot import aot_compile

        def compile_stage(stage_graph, stage_inputs):
            return compile_with_fx(fx_compiler, stage_graph, stage_inputs)

        return aot_compile(graph, example_inputs, compile_stage, compile_stage)

    backend.__name__ = f"fx_backend_{label}"
    backend.__qualname__ = backend.__name__
    backend.__doc__ = (
        f"{label} (an fx backend) through torchsmith.ir.to_fx{' after autograd_aot' if aot else ''}"
    )
    return backend


def register_fx_backend(name: str, fx_compiler: Callable, *, aot: bool = False) -> Callable:
    """Register `fx_backend(fx_compiler, aot=aot)` under `name`; returns the torchsmith backend."""
    return register_backend(fx_backend(fx_compiler, aot=aot), name=name)


def compile_with_fx(fx_compiler: Callable, graph, example_inputs) -> Callable:
    """Convert `graph` to a GraphModule, compile it with `fx_compiler`, and return a callable that
    gives the graph's outputs as a tuple (what the code around the graph indexes)."""
    from torchsmith.ir import to_fx

    gm = to_fx(graph)
    compiled = fx_compiler(gm, list(example_inputs))
    if not callable(compiled):
        label = getattr(fx_compiler, "__name__", type(fx_compiler).__name__)
        raise BackendError(
            f"fx backend {label} returned {type(compiled).__name__}, not a callable: it must return "
            "something to call with the graph's inputs (for example gm.forward)"
        )
    expected = len(graph.outputs)

    def run(*inputs):
        outputs = compiled(*inputs)
        if not isinstance(outputs, (tuple, list)):
            outputs = (outputs,)
        if len(outputs) != expected:
            raise BackendError(
                f"the fx backend's callable returned {len(outputs)} outputs for graph {graph.name}, "
                f"which has {expected}"
            )
        return outputs

    return run
