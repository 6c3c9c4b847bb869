"""The exceptions of the torchsmith user API (capture's errors are re-exported by `torchsmith`)."""


class TorchsmithError(Exception):
    """Base class of errors raised by the torchsmith user API."""


class BackendError(TorchsmithError):
    """An unknown, unusable or not-yet-built backend."""
