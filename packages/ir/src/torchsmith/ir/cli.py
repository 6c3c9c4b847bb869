"""What every stage's command line shares: read and verify the input graph, and report a failure as
one line on stderr with exit status 2 instead of a traceback.

    >>> def main(argv=None):                                  # doctest: +SKIP
    ...     return run_guarded(lambda: _main(argv), what="torchsmith.prims")
"""

import os
import sys
from collections.abc import Callable

from torchsmith.ir.errors import IRError
from torchsmith.ir.graph import Graph
from torchsmith.ir.serialize import load
from torchsmith.ir.verifier import verify

EXIT_BAD_INPUT = 2
TRACEBACK_ENV_VAR = "TORCHSMITH_CLI_TRACEBACK"
_MAX_LINE_CHARS = 400


def load_verified(path) -> Graph:
    """The graph stored as JSON at `path`, verified (`VerifyError` names the first problems)."""
    return verify(load(path))


def error_line(error: BaseException) -> str:
    """One line saying what went wrong: the error's first line (a verifier error: its first problem
    and how many more), without the source excerpt some messages carry on the lines below."""
    problems = getattr(error, "problems", None)
    if problems:
        text = problems[0] + (f" (and {len(problems) - 1} more problems)" if len(problems) > 1 else "")
    else:
        text = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    text = text.encode("ascii", "backslashreplace").decode("ascii")
    if len(text) > _MAX_LINE_CHARS:
        text = text[:_MAX_LINE_CHARS] + "..."
    return text


def fail(where: str, error: BaseException) -> int:
    """Print `error` as one line naming `where` (the input file) and return the exit status 2."""
    print(f"error: {where}: {type(error).__name__}: {error_line(error)}", file=sys.stderr)
    return EXIT_BAD_INPUT


def run_guarded(body: Callable[[], int], where: str) -> int:
    """Run a command line's `body`; any exception becomes one line on stderr and exit status 2.
    `TORCHSMITH_CLI_TRACEBACK=1` lets exceptions other than torchsmith's own through, for debugging."""
    try:
        return body()
    except (IRError, OSError, ValueError, RecursionError, MemoryError) as e:
        return fail(where, e)
    except Exception as e:
        if os.environ.get(TRACEBACK_ENV_VAR, "") not in ("", "0"):
            raise
        return fail(where, e)
