"""The exception hierarchy of torchsmith.autograd_aot: every error a user can see from this package."""

from torchsmith.ir.errors import TorchsmithError


class AotAutogradError(TorchsmithError):
    """Base class of every error raised by torchsmith.autograd_aot."""


class TraceError(AotAutogradError):
    """A torch-level graph could not be traced to ATen ops on meta tensors; the message names the node."""


class FunctionalizationError(AotAutogradError):
    """A mutation or view pattern that functionalization cannot express without changing results."""


class PartitionError(AotAutogradError):
    """The joint graph could not be split into a forward and a backward graph."""


class AliasingError(AotAutogradError):
    """At run time, inputs share storage in a way the compiled graph was not traced for."""
