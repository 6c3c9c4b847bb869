"""`compile(mode=..., options=...)`: the documented option keys, mode presets, and validation.

Every key, its default and what reads it:

=====================  =========  =====================================================================
key                    default    meaning
=====================  =========  =====================================================================
``fallback``           "eager"    what a stage failure does: ``"eager"`` runs that graph eagerly with one
                                  warning per compiled function; ``"raise"`` raises `torchsmith.StageError`
``max_autotune``       False      the inductor tunes matmul templates and kernel launch configurations
``triton.cudagraphs``  False      the inductor replays CUDA graphs for GPU graphs (reduce-overhead)
``cpp.threads``        None       OpenMP threads of generated C++ kernels (None: OpenMP's default)
``check``              False      run every stage's output graph on the call's real inputs and compare
                                  it with the previous stage's (`torchsmith.accuracy`); on a mismatch,
                                  warn naming stage and node, write a repro folder and use the previous
                                  stage's result. ``TORCHSMITH_CHECK=1`` turns it on for every compile
``check.repro_dir``    None       where repro folders go (None: ``$TORCHSMITH_CHECK_DIR``, else a new
                                  temporary directory)
``ddp.split_at_buckets`` True   under DistributedDataParallel, cut each graph at the gradient buckets
                                  (torchsmith.distributed) so each bucket's all-reduce overlaps the rest of
                                  the backward (over two or more ranks); False compiles each graph whole
``cache.size_limit_mb`` None      bound on the compile caches on disk, least recently used evicted first;
                                  process-wide (None: ``$TORCHSMITH_CACHE_SIZE_MB``, else 1024)
=====================  =========  =====================================================================

Modes are presets of these keys: ``"default"`` (none), ``"reduce-overhead"`` (triton.cudagraphs),
``"max-autotune"`` (max_autotune and triton.cudagraphs), ``"max-autotune-no-cudagraphs"`` (max_autotune).

Backends that declare a keyword parameter ``options`` receive the resolved dict (every key above, plus
``"mode"``): ``backend(graph, example_inputs, options=...)``. That is how the inductor reads them; the
stage packages never import this module.

    >>> resolve_options("max-autotune", None)["max_autotune"]
    True
"""

import os
from dataclasses import dataclass

from torchsmith.errors import InvalidOptionError


@dataclass(frozen=True, slots=True)
class OptionSpec:
    """One documented option: its default, the values it accepts and a one-line description."""

    default: object
    kinds: tuple
    doc: str
    choices: tuple = ()


OPTIONS: dict[str, OptionSpec] = {
    "fallback": OptionSpec("eager", (str,), "on a stage failure: run eagerly with one warning, or raise",
                           ("eager", "raise")),
    "max_autotune": OptionSpec(False, (bool,), "tune matmul templates and kernel launch configurations"),
    "triton.cudagraphs": OptionSpec(False, (bool,), "replay CUDA graphs for GPU graphs"),
    "cpp.threads": OptionSpec(None, (int, type(None)),
                              "OpenMP threads of generated C++ kernels (None: OpenMP's default)"),
    "check": OptionSpec(False, (bool,), "compare every stage's output with the previous stage's on the "
                        "call's real inputs (TORCHSMITH_CHECK=1 for every compile)"),
    "check.repro_dir": OptionSpec(None, (str, type(None)), "where the accuracy check writes repro folders"),
    "ddp.split_at_buckets": OptionSpec(True, (bool,), "under DistributedDataParallel, cut each graph at the "
                                       "gradient buckets so all-reduces overlap the backward"),
    "cache.size_limit_mb": OptionSpec(None, (int, float, type(None)), "bound on the compile caches on disk "
                                      "in MB, process-wide (None: $TORCHSMITH_CACHE_SIZE_MB, else 1024)"),
}

MODES: dict[str, dict] = {
    "default": {},
    "reduce-overhead": {"triton.cudagraphs": True},
    "max-autotune": {"max_autotune": True, "triton.cudagraphs": True},
    "max-autotune-no-cudagraphs": {"max_autotune": True},
}

# Keys a backend without an `options` parameter may still be given: compile_api handles them itself.
API_KEYS = frozenset({"fallback", "check", "check.repro_dir", "ddp.split_at_buckets"})


def resolve_options(mode: str | None, options: dict | None) -> dict:
    """The full options dict for `compile(mode=mode, options=options)`; raises InvalidOptionError
    for an unknown mode, an unknown key or a value of the wrong kind, listing what is valid."""
    if mode is not None and (not isinstance(mode, str) or mode not in MODES):
        raise InvalidOptionError(f"unknown mode {mode!r}; valid modes: {', '.join(MODES)}")
    if options is not None and not isinstance(options, dict):
        raise InvalidOptionError(f"options must be a dict, got {type(options).__name__}")
    resolved = {key: spec.default for key, spec in OPTIONS.items()}
    resolved.update(MODES[mode or "default"])
    for key, value in (options or {}).items():
        spec = OPTIONS.get(key)
        if spec is None:
            raise InvalidOptionError(
                f"unknown option {key!r}; valid options: "
                + "; ".join(f"{k} ({s.doc})" for k, s in OPTIONS.items())
            )
        # bool is an int: refuse True for an int option, and ints for a bool option
        if not isinstance(value, spec.kinds) or (bool not in spec.kinds and isinstance(value, bool)):
            kinds = " or ".join("None" if k is type(None) else k.__name__ for k in spec.kinds)
            raise InvalidOptionError(f"option {key!r} takes {kinds}, got {value!r}")
        if spec.choices and value not in spec.choices:
            raise InvalidOptionError(
                f"option {key!r} is one of {', '.join(map(repr, spec.choices))}; got {value!r}"
            )
        if key == "cpp.threads" and value is not None and value < 1:
            raise InvalidOptionError(f"option 'cpp.threads' must be at least 1, got {value}")
        if key == "cache.size_limit_mb" and value is not None and not value >= 0:
            raise InvalidOptionError(f"option 'cache.size_limit_mb' must be at least 0, got {value}")
        resolved[key] = value
    if "check" not in (options or {}) and os.environ.get("TORCHSMITH_CHECK", "0") not in ("", "0"):
        resolved["check"] = True
    resolved["mode"] = mode or "default"
    return resolved


def non_default_backend_keys(resolved: dict) -> list[str]:
    """Keys set away from their default that only a backend can honour (not compile_api itself)."""
    return [k for k, spec in OPTIONS.items() if k not in API_KEYS and resolved[k] != spec.default]
