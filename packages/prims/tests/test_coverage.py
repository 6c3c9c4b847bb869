"""`python -m torchsmith.prims coverage`: the table, its JSON form, and the README's totals."""

import json
import pathlib
import re

from torchsmith.prims.__main__ import main
from torchsmith.prims.coverage import STATUSES, all_totals, coverage, totals
from torchsmith.prims.decompose import DECOMPOSITIONS, KEPT_WHOLE
from torchsmith.prims.zoo import zoo_ops

README = pathlib.Path(__file__).resolve().parents[1] / "README.md"


def test_every_zoo_op_is_a_real_aten_overload():
    import torch

    for op in zoo_ops():
        _, packet, overload = op.split(".")
        assert hasattr(getattr(torch.ops.aten, packet), overload), op
    assert len(set(zoo_ops())) == len(zoo_ops())


def test_cli_prints_the_table_and_writes_json(tmp_path, capsys):
    path = tmp_path / "coverage.json"
    assert main(["coverage", "--json", str(path)]) == 0
    printed = capsys.readouterr().out
    assert "aten.addmm.default" in printed and "decomposed" in printed
    data = json.loads(path.read_text())
    assert data["totals"] == totals(coverage()) and data["all"] == all_totals(coverage())
    assert {row["status"] for row in data["ops"]} <= set(STATUSES)
    assert sum(row["zoo"] for row in data["ops"]) == len(zoo_ops())


def test_every_op_of_the_tables_is_listed_with_its_status(capsys):
    assert main(["coverage"]) == 0
    printed = {line.split()[0]: line.split()[1:] for line in capsys.readouterr().out.splitlines()
               if line.startswith("aten.")}
    for op in DECOMPOSITIONS:
        assert op in printed, f"{op} has a decomposition but the coverage table leaves it out"
        assert printed[op][0] == ("kept" if op in KEPT_WHOLE else "decomposed"), op
    for op in KEPT_WHOLE:
        assert printed[op][:2] == ["kept", "whole"], op
    # the ops the hand-kept list of the first version left out (issue 25)
    for op in ("aten.remainder.Tensor", "aten.reciprocal.default", "aten.logical_or.default",
               "aten.bitwise_or.Tensor"):
        assert printed[op][0] == "decomposed"


def test_op_filter_finds_every_overload_and_says_when_an_op_is_missing(capsys):
    assert main(["coverage", "--op", "aten.remainder"]) == 0
    printed = capsys.readouterr().out
    assert "aten.remainder.Tensor" in printed and "aten.remainder.Scalar" in printed
    assert "aten.add.Tensor" not in printed
    assert main(["coverage", "--op", "aten.no_such_op"]) == 0
    assert "missing" in capsys.readouterr().out


def test_readme_shows_the_current_totals():
    counts = totals(coverage())
    text = README.read_text()
    expected = (
        f"{counts['decomposed']} decomposed, {counts['kept whole']} kept whole, "
        f"{counts['missing']} missing of {counts['total']}"
    )
    assert expected in re.sub(r"\s+", " ", text), f"update the README's coverage line to: {expected}"
    from torchsmith.prims import DECOMPOSITIONS

    assert f"In all {len(DECOMPOSITIONS)} ATen overloads" in re.sub(r"\s+", " ", text)
