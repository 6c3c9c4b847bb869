"""The exception hierarchy of torchsmith.ir: every error a user can see from this package, and
`TorchsmithError`, the root that every torchsmith package's errors derive from (catch it to catch
any stage's error)."""


class TorchsmithError(Exception):
    """Base class of every error raised by any torchsmith package (ir, capture, autograd_aot, prims,
    inductor and the user API); each package has its own base below it (`IRError`, `CaptureError`,
    `AotAutogradError`, `PrimsError`, `InductorError`)."""


class IRError(TorchsmithError):
    """Base class of every error raised by torchsmith.ir."""


class SymbolicError(IRError):
    """A symbolic shape expression could not be parsed or evaluated."""


class TypeParseError(IRError):
    """A type written in text form (`f32[s0, 4] cpu`) could not be read."""


class UnknownOpError(IRError):
    """An op name is not in the registry and cannot be resolved from torch."""


class GraphBuildError(IRError):
    """The builder was asked for something that does not make a valid graph."""


class VerifyError(IRError):
    """A graph breaks an IR invariant; the message names the node."""


class ParseError(IRError):
    """The text form of a graph could not be read; the message gives line and column."""


class SerializationError(IRError):
    """A JSON document is not a graph this version of torchsmith.ir can read."""


class SchemaVersionError(SerializationError):
    """A JSON graph was written by an incompatible major schema version."""


class InterpretError(IRError):
    """An op failed while the reference interpreter ran a graph; the message names the node."""


class FxConversionError(IRError):
    """A graph cannot be expressed in torch.fx, or an fx graph cannot be expressed in our IR."""


class ExecutionSetupError(IRError):
    """A graph cannot run here: a device it names is missing, or its inputs would be too large."""
