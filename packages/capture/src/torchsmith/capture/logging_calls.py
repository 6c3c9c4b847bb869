"""`logger.warning(...)` and the other `logging.Logger` methods in captured code.

A call whose level the logger does not emit does nothing: capture drops it, guarded on the logger
still not emitting that level. A call it emits is a Python side effect (handlers, locks, I/O): a
graph break at the call, which then runs natively, once per call, as under torch.compile.
"""

import logging

from torchsmith.capture.errors import Unsupported
from torchsmith.capture.variables import ConstVar

_LEVELS = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warning": logging.WARNING,
    "warn": logging.WARNING,
    "error": logging.ERROR,
    "exception": logging.ERROR,
    "critical": logging.CRITICAL,
    "fatal": logging.CRITICAL,
    "log": None,  # the level is the first argument
}
_METHODS = {getattr(logging.Logger, name): name for name in _LEVELS}


def is_logger_call(fn) -> bool:
    """Whether `fn` is a logging method of `logging.Logger`, bound or plain (called with the logger
    as its first argument, as a method tracker calls it)."""
    try:
        return getattr(fn, "__func__", fn) in _METHODS
    except TypeError:  # unhashable callables are no logging method
        return False


def logger_call(tracer, fn, args: list, kwargs: dict):
    """Nothing for a level the logger does not emit (guarded), else a graph break at the call."""
    name = _METHODS[getattr(fn, "__func__", fn)]
    if getattr(fn, "__self__", None) is not None:
        logger = fn.__self__
    else:
        logger, args = tracer.as_python(args[0]), args[1:]
    if not isinstance(logger, logging.Logger):
        raise Unsupported(f"Logger.{name}() called on {type(logger).__name__}")
    level = _LEVELS[name]
    if level is None:
        level = tracer.as_python(args[0] if args else kwargs["level"])
    if not isinstance(level, int):
        raise Unsupported(f"Logger.log() with a level of type {type(level).__name__}")
    enabled = logger.isEnabledFor(level)
    tracer.guards.add(f"{tracer.ns.name_of(logger.isEnabledFor)}({int(level)}) is {enabled!r}")
    if enabled:
        raise Unsupported(f"logger {logger.name!r}.{name}() (a Python side effect; it runs eagerly)")
    return ConstVar(None)
