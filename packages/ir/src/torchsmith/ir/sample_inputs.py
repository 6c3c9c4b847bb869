"""Random inputs for a graph, of the declared types of its inputs (tensors with their strides,
symbolic ints, Python scalars): for tests, benchmarks and the `random_graph` generator.

    >>> inputs = example_inputs(graph, sizes={"s0": 4})  # doctest: +SKIP
    >>> outputs = interpret(graph, *inputs, check_types=True)  # doctest: +SKIP
"""

import random

import torch

from torchsmith.ir.graph import Graph, Value
from torchsmith.ir.symbolic import evaluate
from torchsmith.ir.types import ScalarType, SymIntType


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
    return [_example_value(v, bindings, rng, gen) for v in graph.inputs]


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

