"""`python -m torchsmith.prims coverage`: the table, its JSON form, and the README's totals."""

import json
import pathlib
import re

from torchsmith.prims.__main__ import main
from torchsmith.prims.coverage import STATUSES, coverage, totals
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
    assert data["totals"] == totals(coverage())
    assert {row["status"] for row in data["ops"]} <= set(STATUSES)
    assert len(data["ops"]) == len(zoo_ops())


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
