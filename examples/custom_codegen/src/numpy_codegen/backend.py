"""The backend: captured graph -> ATen (torchsmith.autograd_aot) -> prims (torchsmith.prims) -> NumPy.

`numpy_backend(graph, example_inputs)` has the signature every torchsmith backend has. It asks
autograd_aot to lower the captured `torch.*` graph with `torchsmith.prims.decompose` as the
decomposition, so the graph its compiler receives is prims-level; `compile_prims_graph` writes that
graph as NumPy source (`codegen.generate_numpy`), `exec`s it once, and returns a callable that
converts tensors to arrays and back around it. The last source it generated is kept on the
callable (`.source`) and in `LAST_SOURCES`, so a user can read what ran.
"""

import numpy as np
import torch

from numpy_codegen.codegen import generate_numpy
from torchsmith.ir import Graph, SymIntType, TensorType, lookup_op

LAST_SOURCES: list[str] = []


def numpy_backend(graph: Graph, example_inputs):
    """torchsmith backend: compile `graph` (torch level) to NumPy code through the prims IR."""
    import torchsmith.prims
    from torchsmith.autograd_aot import aot_compile

    # The same compiler serves a backward graph when inputs require grad.
    return aot_compile(graph, example_inputs, compile_prims_graph, decompose=torchsmith.prims.decompose)


class NumpyFunction:
    """Generated NumPy code for one prims graph, callable with torch tensors."""

    def __init__(self, graph: Graph):
        from torchsmith.prims import NUMPY_IMPLS

        code = generate_numpy(graph)
        self.source, self.graph = code.source, graph
        namespace = {"np": np, "K": code.constants, "PRIM": NUMPY_IMPLS, "TORCH": _TorchOps()}
        exec(compile(code.source, f"<numpy_codegen {code.name}>", "exec"), namespace)
        self._fn = namespace[code.name]
        self._outputs = [v.type for v in graph.outputs if hasattr(v, "type")]

    def __call__(self, *inputs) -> list:
        arrays = [x.detach().numpy() if isinstance(x, torch.Tensor) else x for x in inputs]
        results = self._fn(*arrays)
        return [_to_torch(r, t) for r, t in zip(results, self._graph_output_types(results))]

    def _graph_output_types(self, results):
        types = [v.type if hasattr(v, "type") else None for v in self.graph.outputs]
        return types if len(types) == len(results) else [None] * len(results)


def compile_prims_graph(graph: Graph, example_inputs) -> NumpyFunction:
    """The forward/backward compiler handed to `aot_compile`: prims graph -> NumpyFunction."""
    function = NumpyFunction(graph)
    LAST_SOURCES.append(function.source)
    return function


class _TorchOps:
    """`TORCH["aten.x"](arrays...)`: an op left outside prims, run by eager PyTorch."""

    def __getitem__(self, name):
        eager = lookup_op(name).eager

        def run(*args, **kwargs):
            args = [torch.from_numpy(np.ascontiguousarray(a)) if isinstance(a, np.ndarray) else a
                    for a in args]
            result = eager(*args, **kwargs)
            if isinstance(result, tuple | list):
                return type(result)(r.numpy() if isinstance(r, torch.Tensor) else r for r in result)
            return result.numpy() if isinstance(result, torch.Tensor) else result

        return run


def _to_torch(result, t):
    if isinstance(t, SymIntType):
        return int(result)
    if isinstance(result, np.ndarray | np.generic):
        tensor = torch.from_numpy(np.array(result, copy=True))  # NumPy scalars become 0-d arrays
        if isinstance(t, TensorType) and tensor.dtype != t.dtype:
            tensor = tensor.to(t.dtype)  # e.g. a NumPy float64 scalar for a float32 0-d tensor
        return tensor
    return result
