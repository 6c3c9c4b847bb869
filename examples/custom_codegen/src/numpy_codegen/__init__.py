"""An example torchsmith backend that generates its own code: NumPy source from the prims-level IR.

    pip install -e examples/custom_codegen
    compiled = torchsmith.compile(model, backend="numpy_codegen")   # found through the entry point

See README.md; `numpy_backend` is the backend, `generate_numpy` the code generator.
"""

from numpy_codegen.backend import LAST_SOURCES, NumpyFunction, compile_prims_graph, numpy_backend
from numpy_codegen.codegen import GeneratedCode, NumpyCodegenError, generate_numpy

__all__ = [
    "LAST_SOURCES", "GeneratedCode", "NumpyCodegenError", "NumpyFunction", "compile_prims_graph",
    "generate_numpy", "numpy_backend",
]
