"""Adversarial inputs: a tally of what each category of hostile input did, printed after the run
(`python tests/adversarial/report.py` runs the folder and prints only that)."""

import pathlib
import sys

# importlib import mode: the shared corpus is found through this folder on sys.path
sys.path.insert(0, str(pathlib.Path(__file__).parent))

from adversarial_corpus import TALLY, format_tally  # noqa: E402


def pytest_terminal_summary(terminalreporter):
    if TALLY:
        terminalreporter.write_sep("-", "adversarial inputs: tried / clear error / accepted / crash / wrong")
        terminalreporter.write_line(format_tally())
