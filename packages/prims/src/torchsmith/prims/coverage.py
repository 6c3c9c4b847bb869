"""Which model-zoo ATen ops are decomposed, kept whole, or missing.

python -m torchsmith.prims coverage [--json PATH]
"""

import json
from dataclasses import asdict, dataclass

from torchsmith.prims.decompose import DECLINES, DECOMPOSITIONS, KEPT_WHOLE
from torchsmith.prims.zoo import ZOO_OPS

STATUSES = ("decomposed", "kept whole", "missing")


@dataclass(frozen=True, slots=True)
class CoverageRow:
    """One zoo op: its group, status and a note (what it keeps whole, or why it is kept)."""

    op: str
    group: str
    status: str
    note: str = ""


def coverage() -> list[CoverageRow]:
    """A row per zoo op, in table order."""
    rows = []
    for group, ops in ZOO_OPS.items():
        for op in ops:
            if op in KEPT_WHOLE:
                note = ("decomposed on request; " if op in DECOMPOSITIONS else "") + KEPT_WHOLE[op]
                rows.append(CoverageRow(op, group, "kept whole", note))
            elif op in DECOMPOSITIONS:
                note = f"kept whole for {DECLINES[op]}" if op in DECLINES else ""
                rows.append(CoverageRow(op, group, "decomposed", note))
            else:
                rows.append(CoverageRow(op, group, "missing"))
    return rows


def totals(rows: list[CoverageRow]) -> dict[str, int]:
    counts = {status: sum(r.status == status for r in rows) for status in STATUSES}
    counts["total"] = len(rows)
    return counts


def format_table(rows: list[CoverageRow]) -> str:
    """The table as aligned text, with totals at the end."""
    width = max(len(r.op) for r in rows)
    lines = [f"{'op':<{width}}  {'status':<10}  note", f"{'-' * width}  {'-' * 10}  ----"]
    group = None
    for r in rows:
        if r.group != group:
            group = r.group
            lines.append(f"# {group}")
        lines.append(f"{r.op:<{width}}  {r.status:<10}  {r.note}".rstrip())
    counts = totals(rows)
    lines.append("")
    lines.append(", ".join(f"{counts[s]} {s}" for s in STATUSES) + f" of {counts['total']} zoo ops")
    return "\n".join(lines)


def to_json(rows: list[CoverageRow]) -> str:
    return json.dumps({"totals": totals(rows), "ops": [asdict(r) for r in rows]}, indent=2)
