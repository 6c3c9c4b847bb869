"""The primitive op set: each `prims.*` op with its schema, shape/dtype rule and NumPy reference
implementation, and the decompositions that take `aten.*` graphs to `prims.*` graphs with
PyTorch's type promotion and broadcasting rules.
"""

# Importing the op modules registers every prim in torchsmith.ir's registry.
from torchsmith.prims import (  # noqa: I001
    conversion,
    creation,
    decompositions,  # noqa: E402  (fills DECOMPOSITIONS)
    elementwise,
    indexing,
    library,
    reductions,
    rng,
    shapes,
)
from torchsmith.prims.__about__ import __version__
from torchsmith.prims.core import NUMPY_IMPLS, PRIMS, PrimInfo
from torchsmith.prims.decompose import DECOMPOSITIONS, KEEP, Emitter, decompose, register_decomposition
from torchsmith.prims.errors import DecompositionError, PrimsError, PrimTypeError, PromotionError
from torchsmith.ir.errors import TorchsmithError
from torchsmith.prims.pipeline import prims_pipeline

__all__ = [
    "DECOMPOSITIONS",
    "KEEP",
    "NUMPY_IMPLS",
    "PRIMS",
    "DecompositionError",
    "Emitter",
    "PrimInfo",
    "PrimTypeError",
    "PrimsError",
    "PromotionError",
    "TorchsmithError",
    "__version__",
    "decompose",
    "prims_pipeline",
    "register_decomposition",
]
