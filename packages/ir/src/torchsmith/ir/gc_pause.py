"""`paused_gc()`: build many small objects without the cyclic garbage collector running over them.

    >>> with paused_gc():          # doctest: +SKIP
    ...     graph = loads(text)
"""

import contextlib
import gc


@contextlib.contextmanager
def paused_gc():
    """Pause the cyclic garbage collector while building many small objects that form no cycles:
    its repeated passes over the growing heap would otherwise cost several times the work itself.
    Nests: only the outermost pause turns the collector back on."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
