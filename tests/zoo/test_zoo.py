"""The transformers zoo against eager and torch.compile (see zoo_harness.py for what a row checks).

`nox -s tests` runs the fast subset (entries marked `fast`); `nox -s zoo` (TORCHSMITH_ZOO=full) runs
every architecture. Models known to fail are listed in EXPECTED_FAILURES with the reason, as strict
xfails, so a fix shows up as an unexpected pass.
"""

import os
import pathlib
import sys

import pytest

pytest.importorskip("transformers")
sys.path.insert(0, str(pathlib.Path(__file__).parent))

from zoo_harness import problems_of, run_model  # noqa: E402
from zoo_models import MODELS  # noqa: E402

FULL = os.environ.get("TORCHSMITH_ZOO") == "full"

# model name -> why it fails today. Strict: a fixed model fails the suite until removed here.
EXPECTED_FAILURES: dict[str, str] = {}


def _cases():
    for entry in MODELS:
        if not (FULL or entry.fast):
            continue
        reason = EXPECTED_FAILURES.get(entry.name)
        marks = [pytest.mark.xfail(reason=reason, strict=True)] if reason else []
        yield pytest.param(entry, id=entry.name, marks=marks)


@pytest.mark.parametrize("entry", list(_cases()))
def test_model_matches_eager_and_torch_compile(entry):
    problems = problems_of(run_model(entry))
    assert not problems, f"{entry.name}: " + "; ".join(problems)


def test_expected_failures_name_real_models():
    names = {m.name for m in MODELS}
    assert set(EXPECTED_FAILURES) <= names
