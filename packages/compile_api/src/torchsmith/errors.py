"""The exceptions of the torchsmith user API (capture's errors are re-exported by `torchsmith`).

`TorchsmithError` is torchsmith.ir's root of every package's errors: `except torchsmith.TorchsmithError`
catches the user API's errors and any stage's."""

from torchsmith.ir.errors import TorchsmithError


class BackendError(TorchsmithError):
    """An unknown, unusable or not-yet-built backend."""


class InvalidOptionError(TorchsmithError, ValueError):
    """An unknown `mode`, an unknown `options` key or a value of the wrong kind; the message lists
    what is valid."""


class StageError(TorchsmithError):
    """A compiler stage (capture, autograd_aot, prims, inductor or a custom backend) failed on a graph.

    Attributes: `stage`, `op` (the IR op being processed, or None), `source` (the user's `file:line`,
    or None), `reason` (the stage's own message), `hint` (what the user can do). The stage's exception
    is the `__cause__`.
    """

    def __init__(self, stage: str, reason: str, *, op: str | None = None, source: str | None = None,
                 graph_name: str | None = None, when: str = "compiling", hint: str = ""):
        self.stage, self.reason, self.op, self.source = stage, reason, op, source
        self.graph_name, self.when, self.hint = graph_name, when, hint
        super().__init__(self.describe())

    def describe(self) -> str:
        """The full message: stage, op, source line, reason and hint on separate lines."""
        where = f" while {self.when} graph {self.graph_name}" if self.graph_name else ""
        lines = [f"stage {self.stage} failed{where}: {self.reason}"]
        if self.op:
            lines.append(f"  op: {self.op}")
        if self.source:
            lines.append(f"  at: {self.source}")
        if self.hint:
            lines.append(f"  {self.hint}")
        return "\n".join(lines)


class FallbackWarning(UserWarning):
    """A stage failed and the graph runs eagerly instead (`options={"fallback": "eager"}`)."""


class AccuracyWarning(UserWarning):
    """`options={"check": True}` found a stage whose values differ from the previous stage's; the
    message names the stage, the first differing node, the max error and the repro folder."""
