"""Every conformance program, compared with eager (see cf_harness.py); programs live in cf_*.py."""

import pathlib
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).parent))

import cf_breaks  # noqa: E402,F401 - importing registers the programs
import cf_dynamic  # noqa: E402,F401
import cf_guards  # noqa: E402,F401
import cf_modules  # noqa: E402,F401
import cf_python  # noqa: E402,F401
import cf_side_effects  # noqa: E402,F401
import cf_tensors  # noqa: E402,F401
from cf_harness import PROGRAMS, check  # noqa: E402


@pytest.mark.parametrize("prog", PROGRAMS, ids=[f"{p.theme}-{p.name}" for p in PROGRAMS])
def test_program_matches_eager(prog):
    check(prog)


def test_suite_covers_every_theme():
    themes = {p.theme for p in PROGRAMS}
    expected = {"python", "tensors", "modules", "breaks", "guards", "side_effects", "fullgraph", "dynamic"}
    assert expected <= themes
