"""Run the adversarial tests and print how each category of hostile input ended:
`python tests/adversarial/report.py` (extra arguments go to pytest, e.g. `-k readers`).

Columns: inputs tried, refused with a clear error of torchsmith's types, accepted (valid input, or
hostile text that was escaped), crashed (any other exception), wrong (user code ran, landed in
generated source, or results differ from eager)."""

import pathlib
import sys

import pytest

HERE = pathlib.Path(__file__).parent
# The files whose tests count their inputs in the tally (others in this folder test other areas).
TALLIED_FILES = (
    "test_injection.py",
    "test_ir_readers.py",
    "test_loop_ir_reader.py",
    "test_op_names.py",
    "test_verifier_and_clis.py",
    "test_torch_startup.py",
)


def main(argv: list[str]) -> int:
    sys.path.insert(0, str(HERE))
    from adversarial_corpus import TALLY, format_tally

    files = [str(HERE / name) for name in TALLIED_FILES]
    status = pytest.main(["-q", "-p", "no:cacheprovider", *files, *argv])
    print()
    print(format_tally())
    totals = {k: sum(c[k] for c in TALLY.values()) for k in ("tried", "clear", "accepted", "crash", "wrong")}
    print(f"{'all':<34} {totals['tried']:>6} {totals['clear']:>6} {totals['accepted']:>9} "
          f"{totals['crash']:>6} {totals['wrong']:>6}")
    return int(status)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
