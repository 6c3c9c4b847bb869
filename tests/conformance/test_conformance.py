"""Every conformance program, compared with eager under each backend (see cf_harness.py).

Programs live in cf_*.py. Each runs under "eager", "aot_eager" and "inductor"; EXPECTED_FAILURES lists
the (program, backend) pairs known to fail, each with its reason, as strict xfails. The inductor's C++
builds share one cache directory per test session (tests/conftest.py), as one CI run would.
"""

import pathlib
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).parent))

import cf_breaks  # noqa: E402,F401 - importing registers the programs
import cf_breaks_more  # noqa: E402,F401
import cf_double_backward_rng  # noqa: E402,F401
import cf_dynamic  # noqa: E402,F401
import cf_dynamic_more  # noqa: E402,F401
import cf_guards  # noqa: E402,F401
import cf_interop  # noqa: E402,F401
import cf_layout_dynamic  # noqa: E402,F401
import cf_modules  # noqa: E402,F401
import cf_multi_output  # noqa: E402,F401
import cf_python  # noqa: E402,F401
import cf_python_more  # noqa: E402,F401
import cf_regressions  # noqa: E402,F401
import cf_semantics  # noqa: E402,F401
import cf_side_effects  # noqa: E402,F401
import cf_stale  # noqa: E402,F401
import cf_tensors  # noqa: E402,F401
import cf_training  # noqa: E402,F401
import cf_user_objects  # noqa: E402,F401
import cf_zoo_forms  # noqa: E402,F401
from cf_harness import ALL_BACKENDS, BACKENDS, PROGRAMS, check  # noqa: E402

# (theme-name, backend) -> why it fails. Strict: a fixed program fails the suite until removed here.
EXPECTED_FAILURES: dict[tuple[str, str], str] = {}


def _cases():
    for prog in PROGRAMS:
        for backend in BACKENDS:
            key = (f"{prog.theme}-{prog.name}", backend)
            reason = EXPECTED_FAILURES.get(key)
            marks = [pytest.mark.xfail(reason=reason, strict=True)] if reason else []
            yield pytest.param(prog, backend, id=f"{key[0]}-{backend}", marks=marks)


@pytest.mark.parametrize(("prog", "backend"), list(_cases()))
def test_program_matches_eager(prog, backend):
    check(prog, backend)


def test_expected_failures_name_real_programs():
    names = {f"{p.theme}-{p.name}" for p in PROGRAMS}
    for name, backend in EXPECTED_FAILURES:
        assert name in names and backend in ALL_BACKENDS, (name, backend)


def test_suite_covers_every_theme():
    themes = {p.theme for p in PROGRAMS}
    expected = {"python", "tensors", "modules", "breaks", "guards", "side_effects", "fullgraph", "dynamic",
                "training"}
    assert expected <= themes
