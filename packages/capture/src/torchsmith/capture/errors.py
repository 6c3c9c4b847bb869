"""The capture package's exception hierarchy.

`Unsupported` is a graph break: the construct cannot be captured, so the graph ends before it and the
construct runs natively. It carries the reason and, once known, the file and line of the construct.
`FullGraphError` is what the user sees when `fullgraph=True` forbids a break.
"""

from types import CodeType

from torchsmith.ir.errors import TorchsmithError


class CaptureError(TorchsmithError):
    """Base class of every error raised by torchsmith.capture."""


class Unsupported(CaptureError):
    """A construct that cannot be captured into the graph (a graph break)."""

    def __init__(self, reason: str, *, filename: str | None = None, line: int | None = None):
        super().__init__(reason)
        self.reason = reason
        self.filename = filename
        self.line = line

    def located(self, filename: str, line: int | None) -> "Unsupported":
        """Attach the location of the innermost user code (first one wins)."""
        if self.filename is None:
            self.filename, self.line = filename, line
        return self

    @property
    def where(self) -> str:
        return f"{self.filename}:{self.line}" if self.filename else "<unknown location>"

    def __str__(self) -> str:
        return f"{self.reason} (at {self.where})" if self.filename else self.reason


class UnsupportedBytecodeError(Unsupported):
    """An instruction the normalizer or the executor does not handle."""

    def __init__(self, opname: str, code: CodeType | None = None, line: int | None = None):
        super().__init__(f"unsupported bytecode {opname}")
        if code is not None:
            self.located(code.co_filename, line)


class FullGraphError(CaptureError):
    """Raised under `fullgraph=True` where a graph break would have happened."""

    def __init__(self, brk: Unsupported):
        super().__init__(
            f"graph break under fullgraph=True: {brk.reason} at {brk.where}. Rewrite that construct "
            "(or move it out of the compiled function), or compile with fullgraph=False "
            "to let it run eagerly."
        )
        self.reason = brk.reason
        self.filename = brk.filename
        self.line = brk.line


class GeneratedCodeError(CaptureError):
    """Internal: generated guard or run code that does not compile (a capture bug). The dispatcher
    runs the function eagerly with a logged warning instead (or raises it under fullgraph=True)."""


class RecompileLimitError(CaptureError):
    """Raised instead of running eagerly when the caller asked to fail on the recompile limit."""
