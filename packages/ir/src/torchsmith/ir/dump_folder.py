"""Numbered dump files: `NNN-<level>-<name>.<suffix>` in one folder, numbered in the order written.

Every writer of IR dumps (compile_api's `dump_ir`, the pass runner's per-step dumps) takes its file
names from here, so that writers sharing a folder never reuse a number and the folder reads in the
order things happened::

    >>> reserve_dump_path("/tmp/ir", "prims", "decompose", "txt")   # doctest: +SKIP
    PosixPath('/tmp/ir/004-prims-decompose.txt')
"""

import os
import pathlib
import re
import threading

DUMP_ENV_VAR = "TORCHSMITH_DUMP_IR"
STEPS_ENV_VAR = "TORCHSMITH_DUMP_IR_STEPS"

_NUMBERED = re.compile(r"(\d{3,})-")
_UNSAFE = re.compile(r"[^\w.-]+")
# Held while a number is chosen and its file created: two writers in this process get two numbers.
_LOCK = threading.Lock()


def dump_file_name(level: str, name: str) -> str:
    """`level-name` made safe as a file name: runs of characters other than letters, digits, `.`
    and `-` become `_` (a graph name comes from user code)."""
    return f"{_safe(level, 'ir')}-{_safe(name, 'graph')}"


def _safe(text, default: str) -> str:
    return _UNSAFE.sub("_", str(text)).strip("_") or default


def next_dump_number(directory) -> int:
    """One more than the highest `NNN-` number of a file in `directory` (1 in an empty folder)."""
    numbers = [int(m.group(1)) for p in pathlib.Path(directory).iterdir() if (m := _NUMBERED.match(p.name))]
    return max(numbers, default=0) + 1


def reserve_dump_path(directory, level: str, name: str, suffix: str) -> pathlib.Path:
    """A new, empty file `NNN-level-name.suffix` in `directory` (created if missing), numbered after
    every file already there. Siblings under the same number (a `.txt` beside a `.json`) are the
    caller's `path.with_suffix(...)`."""
    folder = pathlib.Path(directory)
    with _LOCK:
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"{next_dump_number(folder):03d}-{dump_file_name(level, name)}.{suffix}"
        path.touch()
    return path


def step_dump_directory() -> pathlib.Path | None:
    """Where the pass runner writes every step's IR: `TORCHSMITH_DUMP_IR` when
    `TORCHSMITH_DUMP_IR_STEPS=1` asks for steps too; None otherwise. (`TORCHSMITH_DUMP_IR` alone
    dumps only what enters each stage, through compile_api.)"""
    directory = os.environ.get(DUMP_ENV_VAR)
    steps = os.environ.get(STEPS_ENV_VAR, "").strip().lower() in ("1", "true", "yes", "on")
    return pathlib.Path(directory) if directory and steps else None
