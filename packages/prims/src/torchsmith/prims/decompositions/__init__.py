"""The decomposition table: importing this package registers every ATen -> prims decomposition
in `torchsmith.prims.decompose.DECOMPOSITIONS`, one module per concern."""

from torchsmith.prims.decompositions import (  # noqa: F401
    activations,
    elementwise,
    kept,
    nn,
    norms,
    pooling,
    random,
    reductions,
    scatters,
    shapes,
    transformer,
    weight_norm,
)
