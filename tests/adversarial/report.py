"""Run the adversarial tests and print how each category of hostile input ended:
`python tests/adversarial/report.py` (extra arguments go to pytest, e.g. `-k readers`).

Columns: inputs tried, refused with a clear error of torchsmith's types, accepted (valid input, or
hostile text that was escaped), crashed (any other exception), wrong (user code ran, landed in
generated source, or results differ from eager)."""

import pathlib
import sys

import pytest

HERE = pathlib.Path(__file__).parent


def main(argv: list[str]) -> int:
    sys.path.insert(0, str(HERE))
    from adversarial_corpus import TALLY, format_tally

    files = [str(p) for p in sorted(HERE.glob("test_*.py")) if p.name != "test_div_zero.py"]
    status = pytest.main(["-q", "-p", "no:cacheprovider", *files, *argv])
    print()
    print(format_tally())
    totals = {k: sum(c[k] for c in TALLY.values()) for k in ("tried", "clear", "accepted", "crash", "wrong")}
    print(f"{'all':<34} {totals['tried']:>6} {totals['clear']:>6} {totals['accepted']:>9} "
          f"{totals['crash']:>6} {totals['wrong']:>6}")
    return int(status)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
