"""The exception hierarchy of torchsmith.inductor: every error a user can see from this package."""

from torchsmith.ir.errors import TorchsmithError


class InductorError(TorchsmithError):
    """Base class of every error raised by torchsmith.inductor."""


class LoweringError(InductorError):
    """A prims node has no lowering to the loop IR (yet), or its arguments are outside what the
    lowering handles; the message names the prim and the node's source line, and `node` is the IR
    node (None for errors about the graph as a whole)."""

    node = None


class CodegenError(InductorError):
    """The loop IR holds something the C++ code generator cannot print (a dtype or index form)."""


class BuildError(InductorError):
    """The C++ compiler failed or is missing; the message holds its command and error output."""


class RuntimeCallError(InductorError):
    """A compiled graph was called with inputs that do not match the graph it was compiled for."""


class UnsupportedGraphError(InductorError):
    """`backend="inductor"` cannot compile this graph: a device without a code generator, or an op
    the lowering or the code generator refuses. `stage` is "inductor", `op` and
    `source` (the user's source line, when known) name the node, so compile_api can fall back to eager
    with one warning that says where; `__cause__` is the underlying error."""

    def __init__(self, message: str, *, op: str | None = None, source: str | None = None):
        super().__init__(message)
        self.stage = "inductor"
        self.op = op
        self.source = source

