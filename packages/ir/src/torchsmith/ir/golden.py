"""Golden text: a test runs a stage's command line on a checked-in input and compares what it
prints with a checked-in file, `packages/<stage>/tests/golden/<case>.txt`.

One flag regenerates every golden file of the tests it runs, for an intended change (then read the
diff before committing):

    TORCHSMITH_UPDATE_GOLDEN=1 python -m pytest packages/inductor/tests/test_golden.py

    >>> check_golden(tmp_path / "case.txt", text)   # doctest: +SKIP
"""

import difflib
import os
import pathlib
import re

UPDATE_ENV_VAR = "TORCHSMITH_UPDATE_GOLDEN"
_DIFF_LINES = 80
# `# stamp <pass name> <seconds>`: the text form's record of a pass and the time it took
_STAMP_SECONDS = re.compile(r"^(\s*# stamp .*) \S+$", re.MULTILINE)


def without_timings(text: str) -> str:
    """`text` with the seconds of every `# stamp` line written `<seconds>`: the pass names stay
    (they say what ran), the times (different on every run) go.

    >>> without_timings("# stamp trace 0.0123")
    '# stamp trace <seconds>'
    """
    return _STAMP_SECONDS.sub(r"\1 <seconds>", text)


def update_requested() -> bool:
    """Whether this run rewrites golden files instead of comparing with them."""
    return os.environ.get(UPDATE_ENV_VAR, "") not in ("", "0")


def check_golden(path, text: str) -> None:
    """Compare `text` with the golden file at `path`; raise AssertionError with a unified diff when
    they differ or the file is missing. With `TORCHSMITH_UPDATE_GOLDEN=1`, write `text` there instead."""
    path = pathlib.Path(path)
    if update_requested():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        return
    if not path.is_file():
        raise AssertionError(f"{path} does not exist; create it with {UPDATE_ENV_VAR}=1 and read it")
    golden = path.read_text(encoding="utf-8")
    if text == golden:
        return
    diff = list(difflib.unified_diff(golden.splitlines(), text.splitlines(), f"{path.name} (golden)",
                                     f"{path.name} (now)", lineterm=""))
    shown = "\n".join(diff[:_DIFF_LINES]) + (f"\n... {len(diff) - _DIFF_LINES} more diff lines" if
                                             len(diff) > _DIFF_LINES else "")
    raise AssertionError(f"{path} differs from what the command printed; after an intended change rerun "
                         f"with {UPDATE_ENV_VAR}=1 and read the diff:\n{shown}")
