__path__ = __import__("pkgutil").extend_path(__path__, __name__)

# The line above must stay first: it lets the other torchsmith portions (torchsmith.ir,
# torchsmith.capture, ...) be found wherever they are installed, editable or not. So the
# docstring is assigned, not written as the first statement.
__doc__ = """torchsmith: a PyTorch compiler built as small packages.

`torchsmith` is a namespace shared by every torchsmith distribution. `torchsmith.ir`,
`torchsmith.capture`, `torchsmith.autograd_aot`, `torchsmith.prims` and `torchsmith.inductor`
are separate packages that work without this one; this one (the `torchsmith` distribution,
packages/compile_api) is the thin user API on top of them.
"""

from torchsmith.__about__ import __version__  # noqa: E402
from torchsmith.backend_registry import list_backends, lookup_backend, register_backend  # noqa: E402
from torchsmith.capture import (  # noqa: E402
    CaptureError,
    FullGraphError,
    Unsupported,
    allow_in_graph,
    mark_dynamic,
    mark_static,
)
from torchsmith.compiler import BreakReason, ExplainOutput, compile, disable, explain, reset  # noqa: E402
from torchsmith.dump import configure_from_environment as _configure_dump  # noqa: E402
from torchsmith.dump import dump_ir  # noqa: E402
from torchsmith.errors import (  # noqa: E402
    AccuracyWarning,
    BackendError,
    FallbackWarning,
    InvalidOptionError,
    StageError,
    TorchsmithError,
)
from torchsmith.fx_backend import fx_backend, register_fx_backend  # noqa: E402
from torchsmith.logs import configure_from_environment as _configure_logs  # noqa: E402
from torchsmith.logs import set_logs  # noqa: E402
from torchsmith.options import MODES, OPTIONS  # noqa: E402

_configure_logs()
_configure_dump()

__all__ = [
    "AccuracyWarning", "BackendError", "BreakReason", "CaptureError", "ExplainOutput", "FallbackWarning",
    "FullGraphError", "InvalidOptionError", "MODES", "OPTIONS", "StageError", "TorchsmithError",
    "Unsupported", "__version__",
    "allow_in_graph", "compile", "disable", "dump_ir", "explain", "fx_backend", "list_backends",
    "lookup_backend", "mark_dynamic", "mark_static", "register_backend", "register_fx_backend", "reset",
    "set_logs",
]
