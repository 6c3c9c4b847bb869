"""Which ATen ops are decomposed to prims, kept whole, or missing, read from the tables themselves.

python -m torchsmith.prims coverage [--op TEXT] [--json PATH]

Every op that has a decomposition (`DECOMPOSITIONS`) or is kept whole (`KEPT_WHOLE`) is a row, grouped
by the decompositions module that handles it; the model zoo's ops (`zoo.ZOO_OPS`) are marked, and a
zoo op in neither table is a `missing` row. Nothing here is a list of its own, so a decomposition
added anywhere shows up.
"""

import json
from dataclasses import asdict, dataclass

from torchsmith.prims.decompose import DECLINES, DECOMPOSITIONS, KEPT_WHOLE
from torchsmith.prims.zoo import zoo_ops

STATUSES = ("decomposed", "kept whole", "missing")
KEPT_GROUP = "kept whole (library kernels)"
MISSING_GROUP = "missing"


@dataclass(frozen=True, slots=True)
class CoverageRow:
    """One ATen op: its group (the decompositions module that handles it), status, a note (what it
    keeps whole, or why it is kept) and whether the model zoo uses it."""

    op: str
    group: str
    status: str
    note: str = ""
    zoo: bool = False


def _group_of(op: str) -> str:
    if op in DECOMPOSITIONS:
        return DECOMPOSITIONS[op].__module__.rsplit(".", 1)[-1]
    return KEPT_GROUP if op in KEPT_WHOLE else MISSING_GROUP


def _row(op: str, zoo: set[str]) -> CoverageRow:
    if op in KEPT_WHOLE:
        note = ("decomposed on request; " if op in DECOMPOSITIONS else "") + KEPT_WHOLE[op]
        return CoverageRow(op, _group_of(op), "kept whole", note, op in zoo)
    if op in DECOMPOSITIONS:
        note = f"kept whole for {DECLINES[op]}" if op in DECLINES else ""
        return CoverageRow(op, _group_of(op), "decomposed", note, op in zoo)
    return CoverageRow(op, MISSING_GROUP, "missing", "used by the zoo, no decomposition", op in zoo)


def coverage() -> list[CoverageRow]:
    """A row per ATen op in the decomposition and keep-whole tables, plus the zoo's missing ops;
    sorted by group, then op."""
    zoo = set(zoo_ops())
    ops = set(DECOMPOSITIONS) | set(KEPT_WHOLE) | zoo
    rows = [_row(op, zoo) for op in ops]
    order = {MISSING_GROUP: 2, KEPT_GROUP: 1}
    return sorted(rows, key=lambda r: (order.get(r.group, 0), r.group, r.op))


def select(rows: list[CoverageRow], text: str) -> list[CoverageRow]:
    """The rows whose op name contains `text` (`aten.hypot` or `hypot` finds every overload)."""
    return [r for r in rows if text in r.op]


def totals(rows: list[CoverageRow]) -> dict[str, int]:
    """Rows per status over the zoo's ops, as the README quotes them."""
    return _counts([r for r in rows if r.zoo])


def all_totals(rows: list[CoverageRow]) -> dict[str, int]:
    """Rows per status over every op listed."""
    return _counts(rows)


def _counts(rows: list[CoverageRow]) -> dict[str, int]:
    counts = {status: sum(r.status == status for r in rows) for status in STATUSES}
    counts["total"] = len(rows)
    return counts


def format_table(rows: list[CoverageRow]) -> str:
    """The table as aligned text, grouped, with the totals over every op and over the zoo's."""
    if not rows:
        return "no ATen op matches: it has no decomposition and is not kept whole (missing)"
    width = max(len(r.op) for r in rows)
    lines = [f"{'op':<{width}}  {'status':<10}  zoo  note", f"{'-' * width}  {'-' * 10}  ---  ----"]
    group = None
    for r in rows:
        if r.group != group:
            group = r.group
            lines.append(f"# {group}")
        lines.append(f"{r.op:<{width}}  {r.status:<10}  {'yes' if r.zoo else '   '}  {r.note}".rstrip())
    lines.append("")
    every, zoo = all_totals(rows), totals(rows)
    lines.append(", ".join(f"{every[s]} {s}" for s in STATUSES) + f" of {every['total']} ATen ops listed")
    if zoo["total"]:
        lines.append(", ".join(f"{zoo[s]} {s}" for s in STATUSES) + f" of {zoo['total']} zoo ops")
    return "\n".join(lines)


def to_json(rows: list[CoverageRow]) -> str:
    """`totals` over the zoo's ops, `all` over every op, and every row."""
    return json.dumps({"totals": totals(rows), "all": all_totals(rows), "ops": [asdict(r) for r in rows]},
                      indent=2)
