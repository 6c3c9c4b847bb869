"""Golden text of prims' command line: each `golden/<case>.json` (an ATen graph, written by
`python -m torchsmith.autograd_aot ... --out`) decomposed by `python -m torchsmith.prims decompose`
prints the prims graph exactly as in `golden/<case>.txt`, the seconds of each `# stamp` line aside
(golden/README.md).

Regenerate after an intended change:
`TORCHSMITH_UPDATE_GOLDEN=1 pytest packages/prims/tests/test_golden.py`.
"""

import pathlib

import pytest

from torchsmith.ir.golden import check_golden, without_timings
from torchsmith.prims.__main__ import main

GOLDEN = pathlib.Path(__file__).parent / "golden"
# the command line's flags per case: index_select has no decomposition and stays whole (inductor
# calls torch's kernel for it)
FLAGS = {"views_index": ["--keep-missing"]}
CASES = sorted(p.stem for p in GOLDEN.glob("*.json"))


def run_cli(capsys, case: str, *extra: str) -> tuple[int, str, str]:
    capsys.readouterr()
    status = main(["decompose", str(GOLDEN / f"{case}.json"), *FLAGS.get(case, []), *extra])
    out = capsys.readouterr()
    return status, without_timings(out.out), out.err


def test_every_case_has_its_golden_text():
    assert len(CASES) >= 7 and set(FLAGS) <= set(CASES)
    assert set(CASES) <= {p.stem for p in GOLDEN.glob("*.txt")}


@pytest.mark.parametrize("case", CASES)
def test_golden(case, capsys):
    status, out, err = run_cli(capsys, case)
    assert status == 0, err
    check_golden(GOLDEN / f"{case}.txt", out)


def test_views_index_without_keep_missing_names_the_op(capsys):
    capsys.readouterr()
    status = main(["decompose", str(GOLDEN / "views_index.json")])
    err = capsys.readouterr().err
    assert status == 2 and err.count("\n") == 1 and "aten.index_select.default" in err


def test_keep_leaves_an_op_whole(capsys):
    status, out, _ = run_cli(capsys, "matmul_epilogue", "--keep", "aten.gelu.default")
    assert status == 0 and "aten.gelu.default(%add)" in out and "prims.erf" not in out
