"""Warnings that point at the user's line: the first frame outside torchsmith and torch."""

import sys
import warnings


def warn_at_user(message: str, category: type[Warning] = UserWarning) -> None:
    """`warnings.warn(message)` attributed to the innermost caller outside torchsmith and torch (the
    user's call of a compiled function, or their `torch.autograd.grad`), not to our runtime."""
    frame, level = sys._getframe(1), 1
    while frame is not None:
        module = frame.f_globals.get("__name__", "") or ""
        generated = frame.f_code.co_filename.startswith("<torchsmith")  # capture's dispatch code
        if not (generated or module.startswith("torchsmith.") or module.split(".")[0] == "torch"):
            break
        frame, level = frame.f_back, level + 1
    warnings.warn(message, category, stacklevel=level + 1 if frame is not None else 2)
