"""Random inputs for a graph, of the declared types of its inputs (tensors with their strides,
symbolic ints, Python scalars): for tests, benchmarks and the `random_graph` generator.

    >>> inputs = example_inputs(graph, sizes={"s0": 4})  # doctest: +SKIP
    >>> outputs = interpret(graph, *inputs, check_types=True)  # doctest: +SKIP
"""

import os
import random

import torch

from torchsmith.ir.errors import ExecutionSetupError
from torchsmith.ir.graph import Graph, Value
from torchsmith.ir.symbolic import evaluate
from torchsmith.ir.types import ScalarType, SymIntType, TensorType
from torchsmith.ir.verify_types import check_devices_present

# Example inputs are for trying a graph out: a file asking for more than this (in bytes, over all
# inputs) is refused before anything is allocated. TORCHSMITH_MAX_EXAMPLE_BYTES raises the bound.
DEFAULT_MAX_EXAMPLE_BYTES = 2**31


def example_inputs(graph: Graph, sizes: dict[str, int] | None = None, seed: int = 0) -> list:
    """Random inputs of the declared types of `graph`'s inputs.

    Symbols take their value from `sizes`, else a seeded random size in 2..5. Tensors get the
    declared strides (via `empty_strided`), dtype, device and requires_grad.
    """
    rng = random.Random(seed)
    gen = torch.Generator().manual_seed(seed)
    bindings = dict(sizes or {})
    for v in graph.inputs:
        for name in sorted(v.type.free_symbols):
            if name not in bindings:
                bindings[name] = rng.randint(2, 5)
    check_devices_present((v.type for v in graph.inputs), f"graph {graph.name}")
    _check_size(graph, bindings)
    return [_example_value(v, bindings, rng, gen) for v in graph.inputs]


def _check_size(graph: Graph, bindings: dict[str, int]) -> None:
    limit = int(os.environ.get("TORCHSMITH_MAX_EXAMPLE_BYTES", DEFAULT_MAX_EXAMPLE_BYTES))
    total = 0
    for v in graph.inputs:
        t = v.type
        if not isinstance(t, TensorType):
            continue
        shape = [evaluate(d, bindings) for d in t.shape]
        strides = [evaluate(s, bindings) for s in t.strides]
        if any(d < 0 for d in shape) or any(s < 0 for s in strides):
            raise ExecutionSetupError(f"graph {graph.name}: input %{v.name} has a negative size or stride")
        span = 0 if 0 in shape else 1 + sum((d - 1) * s for d, s in zip(shape, strides, strict=True))
        total += span * t.dtype.itemsize
        if total > limit:
            raise ExecutionSetupError(
                f"graph {graph.name}: example inputs up to %{v.name} take {total} bytes, more than the "
                f"{limit} allowed; pass smaller --size values or set TORCHSMITH_MAX_EXAMPLE_BYTES"
            )


def _example_value(v: Value, bindings: dict[str, int], rng: random.Random, gen: torch.Generator):
    t = v.type
    if isinstance(t, SymIntType):
        return evaluate(t.expr, bindings)
    if isinstance(t, ScalarType):
        makers = {
            "bool": lambda: rng.random() < 0.5,
            "int": lambda: rng.randint(-4, 4),
            "float": lambda: rng.uniform(-2, 2),
            "complex": lambda: complex(rng.uniform(-2, 2), rng.uniform(-2, 2)),
            "none": lambda: None,
        }
        return makers[t.kind]()
    shape = [evaluate(d, bindings) for d in t.shape]
    strides = [evaluate(s, bindings) for s in t.strides]
    # Drawn in a common dtype and converted by copy_, which also covers float8 and unsigned ints.
    if t.dtype == torch.bool:
        dense = torch.rand(shape, generator=gen) < 0.5
    elif t.dtype.is_complex:
        dense = torch.randn(shape, generator=gen, dtype=torch.complex128)
    elif t.dtype.is_floating_point:
        dense = torch.randn(shape, generator=gen)
    else:
        dense = torch.randint(0 if t.dtype == torch.uint8 else -5, 6, shape, generator=gen)
    out = torch.empty_strided(shape, strides, dtype=t.dtype, device=t.device)
    out.copy_(dense)
    return out.requires_grad_() if t.requires_grad else out

