"""The HTML of a compile report: one self-contained page (inline CSS, no script, no network).

Everything that comes from the user's program or from the compiler (source lines, graph text,
guards, kernels, error messages) goes through `html.escape`; only this module's own markup is raw.
"""

import html
import re
import time

from torchsmith.ir import format_graph

_CSS = """
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; margin: 0; color: #1d2330;
    background: #f5f6f8; }
header { background: #1d2330; color: #fff; padding: 18px 28px; }
header h1 { margin: 0 0 4px; font-size: 22px; }
header .where { color: #aab3c5; font-size: 13px; }
main { padding: 8px 28px 40px; max-width: 1200px; }
section { background: #fff; border: 1px solid #dde1e8; border-radius: 6px; margin: 16px 0;
    padding: 12px 18px; }
h2 { font-size: 17px; margin: 4px 0 10px; }
h3 { font-size: 15px; margin: 14px 0 6px; }
.chips span { display: inline-block; background: #2f3a52; border-radius: 12px; padding: 2px 10px;
    margin: 6px 6px 0 0; font-size: 13px; }
.chips span.bad { background: #a8323e; }
pre, code { font: 12.5px/1.4 ui-monospace, "SFMono-Regular", Menlo, Consolas, monospace; }
pre { background: #f7f8fa; border: 1px solid #e4e7ec; border-radius: 4px; padding: 8px 10px;
    overflow-x: auto; margin: 4px 0 8px; }
table { border-collapse: collapse; }
td, th { padding: 2px 10px 2px 0; text-align: left; vertical-align: top; }
table.source { width: 100%; }
table.source td.code { width: 70%; }
table.source td { font: 12.5px/1.4 ui-monospace, Menlo, Consolas, monospace; white-space: pre;
    padding: 0 8px; }
table.source td.n { color: #8a93a5; text-align: right; width: 3em; user-select: none; }
tr.traced td.code { background: #eaf5ea; }
tr.break td.code { background: #fbe3e5; }
tr.break td.n { color: #a8323e; font-weight: bold; }
table.source td.note { color: #a8323e; font-family: system-ui, sans-serif; white-space: normal; }
.bar { display: inline-block; height: 10px; background: #4a78c2; border-radius: 2px;
    vertical-align: middle; }
.legend span { display: inline-block; padding: 0 8px; margin-right: 8px; border-radius: 3px;
    font-size: 12px; }
details > summary { cursor: pointer; font-weight: 600; margin: 6px 0; }
.muted { color: #6b7486; }
.error { color: #a8323e; }
"""

# The order a graph's stages appear in, by (stage, kind).
_STAGE_ORDER = {("autograd_aot", "graph"): 1, ("prims", "graph"): 2, ("inductor", "loops"): 3,
                ("inductor", "fusion"): 4, ("inductor", "code"): 5}


def esc(value) -> str:
    """`value` as HTML text."""
    return html.escape(str(value), quote=True)


def render_report(report) -> str:
    """The whole page for one `FunctionReport`."""
    records = report.records
    graphs = [r for r in records if r.graph is not None]
    breaks = report.breaks
    times = report.stage_times()
    kernels = [e for e in report.all_events() if (e.stage, e.kind) == ("inductor", "code")]
    chips = [f"{len(graphs)} graph{'s' if len(graphs) != 1 else ''}",
             f"{len(breaks)} graph break{'s' if len(breaks) != 1 else ''}",
             f"{sum(len(r.guards) for r in records)} guards", f"{len(kernels)} generated sources",
             f"backend {report.backend or '?'}", f"{report.calls} calls",
             f"compile {report.compile_seconds():.3f} s"]
    bad = lambda chip: "break" in chip and not chip.startswith("0 ")
    chip_html = "".join(f'<span class="{"bad" if bad(c) else ""}">{esc(c)}</span>' for c in chips)
    where = f"{report.filename}:{report.first_line}" if report.filename else "source not available"
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>torchsmith report: {esc(report.name)}</title><style>{_CSS}</style></head><body>",
        f"<header><h1>torchsmith compile report: {esc(report.name)}</h1>",
        f'<div class="where">{esc(where)} · written {esc(time.strftime("%Y-%m-%d %H:%M:%S"))}</div>',
        f'<div class="chips">{chip_html}</div></header><main>',
        _source_section(report, graphs, breaks),
        _breaks_section(breaks),
        _times_section(times),
    ]
    for number, record in enumerate(records):
        parts.append(_capture_section(report, number, record))
    other = [e for e in report.other_events if e.stage != "capture"]
    if other:
        parts.append('<section><h2>Compiled later</h2><p class="muted">Compiled after the call that '
                     "captured it (for example the backward graph, on the first backward pass).</p>")
        parts.append(_events_html(other) + "</section>")
    parts.append("</main></body></html>\n")
    return "\n".join(parts)


def render_index(reports) -> str:
    """A page linking the reports written to one directory."""
    rows = "".join(
        f'<tr><td><a href="{esc(r.path.name)}">{esc(r.name)}</a></td><td>{len(r.records)} captures</td>'
        f"<td>{len(r.breaks)} breaks</td><td>{esc(r.filename or '')}</td></tr>" for r in reports
    )
    return (f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>torchsmith reports</title>'
            f"<style>{_CSS}</style></head><body><header><h1>torchsmith compile reports</h1></header>"
            f"<main><section><table>{rows}</table></section></main></body></html>\n")


def _source_section(report, graphs, breaks) -> str:
    if not report.source_lines:
        return '<section><h2>Source</h2><p class="muted">The source is not available.</p></section>'
    traced = set()
    for record in graphs:
        for node in record.graph.nodes:
            line = _line_in(node.source, report.filename)
            if line is not None:
                traced.add(line)
    notes: dict[int, list[str]] = {}
    for brk in breaks:
        if brk.filename == report.filename and brk.line is not None:
            notes.setdefault(brk.line, []).append(brk.reason)
    rows = []
    for offset, text in enumerate(report.source_lines):
        line = report.first_line + offset
        cls = "break" if line in notes else "traced" if line in traced else ""
        note = "; ".join(notes.get(line, []))
        rows.append(f'<tr class="{cls}"><td class="n">{line}</td><td class="code">{esc(text)}</td>'
                    f'<td class="note">{("graph break: " + esc(note)) if note else ""}</td></tr>')
    legend = ('<div class="legend"><span style="background:#eaf5ea">in a graph</span>'
              '<span style="background:#fbe3e5">graph break</span></div>')
    return (f"<section><h2>Source</h2>{legend}<table class=\"source\">{''.join(rows)}</table>"
            + _outside_breaks(report, breaks) + "</section>")


def _outside_breaks(report, breaks) -> str:
    """Breaks in callees (other files or lines outside the function) are listed under the source."""
    outside = [b for b in breaks if not (b.filename == report.filename and b.line is not None
                                         and report.first_line <= b.line < report.first_line
                                         + len(report.source_lines))]
    if not outside:
        return ""
    items = "".join(f"<li><code>{esc(b.filename)}:{esc(b.line)}</code>: {esc(b.reason)}</li>"
                    for b in outside)
    return f"<p>Breaks in code called from here:</p><ul>{items}</ul>"


def _line_in(source, filename) -> int | None:
    match = re.match(r"(.*):(\d+)$", source or "")
    if match is None or match.group(1) != filename:
        return None
    return int(match.group(2))


def _breaks_section(breaks) -> str:
    if not breaks:
        return "<section><h2>Graph breaks</h2><p>None: each call runs as whole graphs.</p></section>"
    rows = "".join(f"<tr><td><code>{esc(b.filename)}:{esc(b.line)}</code></td><td>{esc(b.reason)}</td></tr>"
                   for b in breaks)
    return f"<section><h2>Graph breaks ({len(breaks)})</h2><table>{rows}</table></section>"


def _times_section(times: dict[str, float]) -> str:
    longest = max(times.values(), default=0.0) or 1.0
    rows = "".join(
        f"<tr><td>{_indented(step)}</td><td>{seconds * 1000:.1f} ms</td>"
        f'<td><span class="bar" style="width:{max(1, int(240 * seconds / longest))}px"></span></td></tr>'
        for step, seconds in times.items()
    )
    return f"<section><h2>Time per stage</h2><table>{rows}</table></section>"


def _indented(step: str) -> str:
    """Steps inside the backend call are written with leading spaces: show them nested."""
    if step.startswith("  "):
        return f'<span class="muted">&nbsp;&nbsp;&nbsp;&nbsp;{esc(step.strip())}</span>'
    return esc(step)


def _capture_section(report, number: int, record) -> str:
    title = f"Capture {number + 1}: {record.code_name}"
    body = [f"<section><h2>{esc(title)}</h2>",
            f'<p class="muted">{esc(record.filename)} · captured in {record.seconds * 1000:.1f} ms</p>']
    if record.break_reason is not None:
        brk = record.break_reason
        body.append(f'<p class="error">graph break at <code>{esc(brk.filename)}:{esc(brk.line)}</code>: '
                    f"{esc(brk.reason)}</p>")
    if record.graph is not None:
        body.append(f"<h3>Captured graph (torch level)</h3><pre>{esc(format_graph(record.graph))}</pre>")
    else:
        body.append('<p class="muted">No graph: this code runs eagerly.</p>')
    if record.guards:
        guards = "\n".join(record.guards)
        body.append(f"<details><summary>Guards ({len(record.guards)})</summary>"
                    f"<pre>{esc(guards)}</pre></details>")
    if record.source:
        body.append(f"<details><summary>Generated Python (calls the graph, resumes after breaks)</summary>"
                    f"<pre>{esc(record.source)}</pre></details>")
    entry = next((g for g in report.graphs if g.graph is record.graph), None)
    if entry is not None:
        if entry.backend_error:
            body.append(f'<p class="error">backend failed: {esc(entry.backend_error)}</p>')
        for message in entry.warnings:
            body.append(f'<pre class="error">{esc(message)}</pre>')
        body.append(_events_html(entry.events) if entry.events else
                    f'<p class="muted">The backend ({esc(report.backend)}) reported no later stages '
                    f"for this graph ({entry.backend_seconds * 1000:.1f} ms).</p>")
    body.append("</section>")
    return "\n".join(body)


def _events_html(found) -> str:
    """The stage outputs in `found`, in pipeline order (stable within a stage)."""
    shown = sorted((e for e in found if e.kind != "time" and e.stage != "capture"),
                   key=lambda e: 0 if e.kind == "fallback" else _STAGE_ORDER.get((e.stage, e.kind), 9))
    return "\n".join(_event_html(e) for e in shown)


def _event_html(event) -> str:
    payload = event.payload
    name = payload.get("name", "")
    if event.kind == "graph" and "graph" in payload:
        label = {"autograd_aot": "ATen", "prims": "prims"}.get(event.stage, event.stage)
        return f"<h3>{esc(label)} graph: {esc(name)}</h3><pre>{esc(format_graph(payload['graph']))}</pre>"
    if event.kind == "loops":
        return f"<h3>Loop IR: {esc(name)}</h3><pre>{esc(payload.get('program'))}</pre>"
    if event.kind == "fusion":
        decisions = payload.get("decisions") or []
        lines = "\n".join(str(d) for d in decisions) or "(no fusion candidates)"
        return f"<h3>Fusion decisions: {esc(name)}</h3><pre>{esc(lines)}</pre>"
    if event.kind == "code":
        language = payload.get("language", "")
        return (f"<details open><summary>Generated {esc(language)} code: {esc(name)}</summary>"
                f"<pre>{esc(payload.get('source'))}</pre></details>")
    shown = ", ".join(f"{k}={_short(v)}" for k, v in payload.items() if k != "graph")
    if event.kind == "fallback":  # a stage gave up on an op or a graph: worth seeing first
        return f'<p class="error">{esc(event.stage)} fallback: {esc(shown)}</p>'
    return f'<p class="muted">{esc(event.stage)}/{esc(event.kind)}: {esc(shown)}</p>'


def _short(value, limit: int = 200) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."
