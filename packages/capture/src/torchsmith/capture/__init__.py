"""Bytecode capture: runs a Python function symbolically over its CPython 3.11/3.12 bytecode and
records the tensor program as a `torchsmith.ir.Graph` in the `torch.*` dialect, with guards that
decide when the recorded graph may be reused and graph breaks where Python must run natively.
"""

from torchsmith.capture.__about__ import __version__
from torchsmith.capture.api import (
    CapturedFunction,
    CapturedModule,
    allow_in_graph,
    capture,
    mark_dynamic,
    mark_static,
    reset_all,
)
from torchsmith.capture.dispatch import RECOMPILE_LIMIT, CaptureRecord, CaptureSession
from torchsmith.capture.errors import (
    CaptureError,
    FullGraphError,
    RecompileLimitError,
    Unsupported,
    UnsupportedBytecodeError,
)
from torchsmith.capture.instructions import Instruction, normalize
from torchsmith.ir.errors import TorchsmithError

__all__ = [
    "RECOMPILE_LIMIT",
    "CaptureError",
    "CaptureRecord",
    "CaptureSession",
    "CapturedFunction",
    "CapturedModule",
    "FullGraphError",
    "Instruction",
    "RecompileLimitError",
    "TorchsmithError",
    "Unsupported",
    "UnsupportedBytecodeError",
    "__version__",
    "allow_in_graph",
    "capture",
    "mark_dynamic",
    "mark_static",
    "normalize",
    "reset_all",
]
