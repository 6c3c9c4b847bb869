"""The primitive op set: each `prims.*` op with its schema, shape/dtype rule and NumPy reference
implementation, and the decompositions that take `aten.*` graphs to `prims.*` graphs with
PyTorch's type promotion and broadcasting rules.
"""

from torchsmith.prims.__about__ import __version__

# Importing the op modules registers every prim in torchsmith.ir's registry.
from torchsmith.prims import conversion, creation, elementwise, indexing, library, reductions, rng, shapes  # noqa: I001
from torchsmith.prims.core import NUMPY_IMPLS, PRIMS, PrimInfo
from torchsmith.prims.errors import DecompositionError, PrimsError, PrimTypeError, PromotionError

__all__ = [
    "NUMPY_IMPLS",
    "PRIMS",
    "DecompositionError",
    "PrimInfo",
    "PrimTypeError",
    "PrimsError",
    "PromotionError",
    "__version__",
]
