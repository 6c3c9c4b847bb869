"""The exception hierarchy of torchsmith.prims: every error a user can see from this package."""

from torchsmith.ir.errors import TorchsmithError


class PrimsError(TorchsmithError):
    """Base class of every error raised by torchsmith.prims."""


class PrimTypeError(PrimsError):
    """A prim was given arguments its schema or shape/dtype rule refuses (prims are strict:
    operands of binary ops share dtype and shape; promotion and broadcasting are explicit)."""


class PromotionError(PrimsError):
    """Operands that PyTorch's type promotion or broadcasting rules cannot combine."""


class DecompositionError(PrimsError):
    """A decomposition failed or is missing; the message names the node and its source line."""
