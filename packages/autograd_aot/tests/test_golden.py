"""Golden text of autograd_aot's command line: each `golden/<case>.json` (a captured `torch.*`
graph, written by `python -m torchsmith.capture ... -o`) lowered by `python -m torchsmith.autograd_aot`
prints the functional ATen graphs (inference, or joint, forward and backward) and the calling
convention exactly as in `golden/<case>.txt`, the seconds of each `# stamp` line aside
(golden/README.md).

Regenerate after an intended change:
`TORCHSMITH_UPDATE_GOLDEN=1 pytest packages/autograd_aot/tests/test_golden.py`.
"""

import pathlib

import pytest

from torchsmith.autograd_aot.__main__ import main
from torchsmith.ir.golden import check_golden, without_timings

GOLDEN = pathlib.Path(__file__).parent / "golden"
# the command line's flags per case (inference with the default random example inputs otherwise)
FLAGS = {
    "training_step": ["--training"],
    "dynamic": ["--size", "s0=6"],
}
CASES = sorted(p.stem for p in GOLDEN.glob("*.json"))


def run_cli(capsys, case: str) -> str:
    capsys.readouterr()
    status = main([str(GOLDEN / f"{case}.json"), *FLAGS.get(case, [])])
    out = capsys.readouterr()
    assert status == 0, out.err
    return without_timings(out.out)


def test_every_case_has_its_golden_text():
    assert len(CASES) >= 6 and set(FLAGS) <= set(CASES)
    assert {p.stem for p in GOLDEN.glob("*.txt")} == set(CASES)


@pytest.mark.parametrize("case", CASES)
def test_golden(case, capsys):
    check_golden(GOLDEN / f"{case}.txt", run_cli(capsys, case))


def test_training_prints_joint_then_its_partition(capsys):
    text = run_cli(capsys, "training_step")
    headers = [line for line in text.splitlines() if line in ("# joint", "# forward", "# backward")]
    assert headers == ["# joint", "# forward", "# backward"]


def test_printout_is_the_same_on_a_second_run(capsys):
    assert run_cli(capsys, "views_index") == run_cli(capsys, "views_index")
