"""Logs: `TORCHSMITH_LOGS=graph,graph_breaks,...` or `torchsmith.set_logs(...)` turns artifacts on.

Artifacts and the loggers they enable (INFO level, to stderr, each line tagged `[torchsmith NAME]`):

- `graph`         torchsmith.capture.graph: each captured `torch.*` graph in text form
- `graph_breaks`  torchsmith.capture.graph_breaks: each graph break, its reason and source line
- `guards`        torchsmith.capture.guards: the guard code of each capture
- `recompiles`    torchsmith.capture.recompiles: each recompile and the guard that failed
- `fusion`        torchsmith.inductor.fusion: each fusion the inductor's scheduler took or refused
- `output_code`   torchsmith.capture.output_code (the Python that calls graphs) and
                  torchsmith.inductor.output_code (loop IR and generated kernels)
- `perf`          torchsmith.perf: compile time of every stage step (from the `*/time` compile events)
- `fallback`      torchsmith.fallback: every stage failure that ran a graph eagerly (the first one is
                  also a warning)

    >>> import torchsmith
    >>> torchsmith.set_logs("graph,perf")      # or set_logs(["graph", "perf"]) or set_logs(graph=True)
    >>> torchsmith.set_logs()                  # everything off again
"""

import logging
import os
import sys

from torchsmith.errors import InvalidOptionError
from torchsmith.ir import events

ARTIFACTS: dict[str, tuple[str, ...]] = {
    "graph": ("torchsmith.capture.graph",),
    "graph_breaks": ("torchsmith.capture.graph_breaks",),
    "guards": ("torchsmith.capture.guards",),
    "recompiles": ("torchsmith.capture.recompiles",),
    "fusion": ("torchsmith.inductor.fusion",),
    "output_code": ("torchsmith.capture.output_code", "torchsmith.inductor.output_code"),
    "perf": ("torchsmith.perf",),
    "fallback": ("torchsmith.fallback",),
}

perf_log = logging.getLogger("torchsmith.perf")


class _StderrHandler(logging.StreamHandler):
    """Writes to the current `sys.stderr` (which test runners and notebooks replace)."""

    @property
    def stream(self):
        return sys.stderr

    @stream.setter
    def stream(self, value):
        pass


_INSTALLED: dict[str, logging.Handler] = {}  # logger name -> the handler set_logs added
_PERF_SUBSCRIPTION: list = []


def _perf_event(event: events.Event) -> None:
    if event.kind == "time":
        perf_log.info("%s %s: %.4f s", event.stage, event.payload.get("step", "?"),
                      event.payload.get("seconds", 0.0))


def set_logs(names=None, **flags) -> None:
    """Turn on exactly the named artifacts (a list, or a comma-separated string, or keyword flags
    `graph=True`) and turn off the others this function turned on before. Unknown names raise,
    listing the known ones."""
    if isinstance(names, str):
        names = names.split(",")
    wanted = {n.strip() for n in (names or ()) if n.strip()}
    wanted |= {name for name, on in flags.items() if on}
    unknown = sorted(wanted - set(ARTIFACTS))
    if unknown:
        raise InvalidOptionError(
            f"unknown log artifact {', '.join(map(repr, unknown))}; known: {', '.join(sorted(ARTIFACTS))}"
        )
    for logger_name, handler in list(_INSTALLED.items()):
        logger = logging.getLogger(logger_name)
        logger.removeHandler(handler)
        logger.setLevel(logging.NOTSET)
        del _INSTALLED[logger_name]
    for name in sorted(wanted):
        for logger_name in ARTIFACTS[name]:
            logger = logging.getLogger(logger_name)
            logger.setLevel(logging.INFO)
            handler = _StderrHandler()
            handler.setFormatter(logging.Formatter(f"[torchsmith {name}] %(message)s"))
            logger.addHandler(handler)
            _INSTALLED[logger_name] = handler
    if "perf" in wanted and not _PERF_SUBSCRIPTION:
        _PERF_SUBSCRIPTION.append(events.subscribe(_perf_event))
    elif "perf" not in wanted and _PERF_SUBSCRIPTION:
        _PERF_SUBSCRIPTION.pop()()


def configure_from_environment() -> None:
    """Apply `TORCHSMITH_LOGS` (comma-separated artifact names), if set."""
    value = os.environ.get("TORCHSMITH_LOGS")
    if value:
        set_logs(value)
