"""The exception hierarchy of torchsmith.inductor: every error a user can see from this package."""


class InductorError(Exception):
    """Base class of every error raised by torchsmith.inductor."""


class LoweringError(InductorError):
    """A prims node has no lowering to the loop IR (yet), or its arguments are outside what the
    lowering handles; the message names the prim and the node's source line."""


class CodegenError(InductorError):
    """The loop IR holds something the C++ code generator cannot print (a dtype or index form)."""


class BuildError(InductorError):
    """The C++ compiler failed or is missing; the message holds its command and error output."""


class RuntimeCallError(InductorError):
    """A compiled graph was called with inputs that do not match the graph it was compiled for."""
