"""`TORCHSMITH_LOGS=graph,graph_breaks,guards,recompiles,output_code` turns on capture's logs."""

import logging
import os

ARTIFACTS = {
    "graph": "torchsmith.capture.graph",
    "graph_breaks": "torchsmith.capture.graph_breaks",
    "recompiles": "torchsmith.capture.recompiles",
    "output_code": "torchsmith.capture.output_code",
    "guards": "torchsmith.capture.guards",
}


def set_logs(names) -> None:
    """Enable the named log artifacts (INFO level, to stderr)."""
    for name in names:
        name = name.strip()
        if not name:
            continue
        if name not in ARTIFACTS:
            raise ValueError(f"unknown log artifact {name!r}; known: {', '.join(sorted(ARTIFACTS))}")
        logger = logging.getLogger(ARTIFACTS[name])
        logger.setLevel(logging.INFO)
        if not logger.handlers:
            handler = logging.StreamHandler()
            handler.setFormatter(logging.Formatter(f"[torchsmith {name}] %(message)s"))
            logger.addHandler(handler)


def configure_from_environment() -> None:
    value = os.environ.get("TORCHSMITH_LOGS")
    if value:
        set_logs(value.split(","))
