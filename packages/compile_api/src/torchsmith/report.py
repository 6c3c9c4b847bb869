"""Compile reports: what happened to one compiled function, gathered while it runs.

`attach(compiled, directory)` watches a function or module returned by `torchsmith.compile`: every
capture its session makes (graphs, graph breaks, guards, capture time; capture's `explain` data)
and every compile event the later stages emit while a graph is compiled (`torchsmith.ir.events`:
ATen forward/backward graphs, prims graphs, loop IR, fusion decisions, kernels, time per step).
With a directory it rewrites one self-contained HTML page per compiled function after each call
that compiled something; `TORCHSMITH_REPORT=DIR` asks for this for every compiled function.

    >>> compiled = attach(torchsmith.compile(model), "reports/")   # doctest: +SKIP
    >>> compiled(x)                                                 # writes reports/<name>.html

Nothing here changes what runs: the hooks only observe, and a report that cannot be written warns
instead of failing the user's program.
"""

import atexit
import inspect
import os
import pathlib
import re
import threading
import time
import warnings
from dataclasses import dataclass, field

from torchsmith.ir import events

ENV_VAR = "TORCHSMITH_REPORT"


@dataclass
class GraphReport:
    """One captured graph and the events its backend emitted while compiling it."""

    index: int
    graph: object
    example_inputs_count: int
    events: list = field(default_factory=list)
    backend_seconds: float = 0.0
    backend_error: str | None = None
    warnings: list[str] = field(default_factory=list)


@dataclass
class FunctionReport:
    """Everything seen for one compiled function: its source, captures, graphs and stray events."""

    name: str
    filename: str | None
    first_line: int
    source_lines: list[str]
    backend: str
    session: object
    graphs: list[GraphReport] = field(default_factory=list)
    # events emitted outside a backend call (a lazily compiled backward graph, capture's own events)
    other_events: list = field(default_factory=list)
    calls: int = 0
    path: pathlib.Path | None = None
    dirty: bool = False

    @property
    def records(self) -> list:
        """capture's `CaptureRecord`s: one per capture (a graph, a break, or both)."""
        return list(self.session.records)

    @property
    def breaks(self) -> list:
        """The graph breaks (capture's `Unsupported` exceptions: reason, filename, line)."""
        return [r.break_reason for r in self.records if r.break_reason is not None]

    def all_events(self) -> list:
        """Every compile event attributed to this function: graph by graph (in the order each
        backend call emitted them), then those that came outside a backend call."""
        return [e for g in self.graphs for e in g.events] + list(self.other_events)

    def compile_seconds(self) -> float:
        """Capture plus backend time, plus steps that ran later (a lazily compiled backward)."""
        later = sum(e.payload.get("seconds", 0.0) for e in self.other_events
                    if e.kind == "time" and e.stage != "capture")
        return sum(r.seconds for r in self.records) + later

    def stage_times(self) -> dict[str, float]:
        """Seconds per stage/step: capture time from capture's records, the backend calls as a
        whole, and within them the steps that `*/time` events or the graphs' stamps report."""
        times: dict[str, float] = {}

        def add(key: str, seconds: float) -> None:
            times[key] = times.get(key, 0.0) + float(seconds)

        backend_total = sum(g.backend_seconds for g in self.graphs)
        # capture's record time includes the backend call it made: report the two apart
        add("capture", max(0.0, sum(r.seconds for r in self.records) - backend_total))
        add("backend (total)", backend_total)
        # capture's own events repeat what its records say (and are counted in "capture" above)
        later = [e for e in self.all_events() if e.stage != "capture"]
        for event in later:
            if event.kind == "time":
                add(f"  {event.stage}/{event.payload.get('step', '?')}", event.payload.get("seconds", 0.0))
        if not any(e.kind == "time" for e in later):
            for event in later:
                graph = event.payload.get("graph")
                for stamp in getattr(graph, "stamps", ()):
                    add(f"  {event.stage}/{stamp.pass_name}", stamp.seconds)
        return times


_LOCK = threading.RLock()
_STATE = {"active": None, "subscribed": False, "in_backend": 0}
_REPORTS: list[FunctionReport] = []


def attach(compiled, directory=None, *, fn=None, backend="") -> object:
    """Watch `compiled` (what `torchsmith.compile` returned) and, when `directory` is given, keep
    `directory/<function>.html` up to date. Returns `compiled` itself (unchanged type), so a
    compiled module stays a module. `fn` is the original function or module (for its source)."""
    session = _session_of(compiled)
    if session is None:
        raise TypeError(
            f"report.attach needs what torchsmith.compile returned, got {type(compiled).__name__}"
        )
    existing = getattr(session, "_torchsmith_report", None)
    if existing is not None:  # attached twice (TORCHSMITH_REPORT and the CLI): one report
        if directory is not None and existing.path is None:
            existing.path = _page_path(pathlib.Path(directory), existing.name)
        return compiled
    report = _new_report(fn if fn is not None else compiled, session, backend)
    if directory is not None:
        report.path = _page_path(pathlib.Path(directory), report.name)
    _hook_session(report)
    session._torchsmith_report = report
    with _LOCK:
        _REPORTS.append(report)
        if not _STATE["subscribed"]:
            events.subscribe(_on_event)
            _STATE["subscribed"] = True
    return compiled


def report_of(compiled) -> FunctionReport | None:
    """The report attached to `compiled` (what `torchsmith.compile` returned), or None."""
    session = _session_of(compiled)
    return getattr(session, "_torchsmith_report", None) if session is not None else None


def reports() -> list[FunctionReport]:
    """Every report attached in this process, oldest first."""
    return list(_REPORTS)


def forget_all() -> None:
    """Drop the reports attached so far (new `attach` calls start a fresh list)."""
    with _LOCK:
        _REPORTS.clear()
        _STATE["active"] = None


def attach_from_environment(compiled, fn=None, backend="") -> object:
    """`attach(compiled, $TORCHSMITH_REPORT)` when that variable is set; else `compiled` as is."""
    directory = os.environ.get(ENV_VAR)
    if not directory:
        return compiled
    return attach(compiled, directory, fn=fn, backend=backend)


def write_report(report: FunctionReport) -> pathlib.Path | None:
    """Write `report` to its page (and refresh the directory's index.html); returns the page path."""
    if report.path is None:
        return None
    from torchsmith.report_html import render_index, render_report

    try:
        report.path.parent.mkdir(parents=True, exist_ok=True)
        report.path.write_text(render_report(report), encoding="utf-8")
        siblings = [r for r in _REPORTS if r.path is not None and r.path.parent == report.path.parent]
        (report.path.parent / "index.html").write_text(render_index(siblings), encoding="utf-8")
    except Exception as e:  # a report must never break the program it describes
        warnings.warn(f"torchsmith: could not write the compile report {report.path}: {e}", stacklevel=2)
        return None
    return report.path


def explain_text(report: FunctionReport) -> str:
    """The plain-text form of `report` that `python -m torchsmith explain` prints."""
    from torchsmith.ir import format_graph

    where = f"{report.filename}:{report.first_line}" if report.filename else "<source not available>"
    records = report.records
    graphs = [r for r in records if r.graph is not None]
    lines = [f"== {report.name} ({where}), backend {report.backend or '?'}, {report.calls} calls",
             f"Graph count: {len(graphs)}", f"Graph break count: {len(report.breaks)}"]
    lines += [f"  break: {b.filename}:{b.line}: {b.reason}" for b in report.breaks]
    lines.append(f"Compile time: {report.compile_seconds():.3f} s")
    lines += [f"  {step}: {seconds:.3f} s" for step, seconds in report.stage_times().items()]
    for number, record in enumerate(records, 1):
        lines.append(f"-- capture {number}: {record.code_name} ({record.seconds:.3f} s)")
        if record.graph is not None:
            lines.append(format_graph(record.graph).rstrip())
        else:
            lines.append("   (no graph: runs eagerly)")
        entry = next((g for g in report.graphs if g.graph is record.graph and g.graph is not None), None)
        for event in entry.events if entry is not None else ():
            lines += _event_summary(event)
        lines.append(f"   guards ({len(record.guards)}):")
        lines += [f"     {guard}" for guard in record.guards]
    return "\n".join(lines)


def _event_summary(event) -> list[str]:
    """One line about a later stage's output, for the text form."""
    payload, name = event.payload, event.payload.get("name", "")
    if event.stage == "capture" or event.kind == "time":
        return []
    if event.kind == "graph" and "graph" in payload:
        return [f"   {event.stage} graph {name}: {len(payload['graph'].nodes)} nodes"]
    if event.kind == "code":
        source = str(payload.get("source", ""))
        return [f"   {payload.get('language', '?')} source for {name}: {len(source.splitlines())} lines"]
    if event.kind == "fusion":
        return [f"   fusion decisions for {name}: {len(payload.get('decisions') or [])}"]
    if event.kind == "loops":
        return [f"   loop IR for {name}: {len(str(payload.get('program', '')).splitlines())} lines"]
    details = ", ".join(f"{k}={v}" for k, v in payload.items() if k != "graph")
    return [f"   {event.stage}/{event.kind}: {details[:300]}"]


# ----------------------------------------------------------------------------- collection


def _session_of(compiled):
    """The capture session behind a compiled function, method or module (None for anything else)."""
    session = getattr(compiled, "_session", None) or getattr(compiled, "session", None)
    if session is None:  # a method: the captured function is bound
        session = getattr(getattr(compiled, "__func__", None), "session", None)
    return session


def _new_report(obj, session, backend) -> FunctionReport:
    target = getattr(obj, "_orig_mod", obj)
    target = getattr(target, "_torchsmith_captured_fn", target)
    if hasattr(target, "forward") and not inspect.isfunction(target):
        name, code_of = type(target).__name__, type(target).forward
    else:
        name = getattr(target, "__qualname__", getattr(target, "__name__", "compiled"))
        code_of = getattr(target, "__func__", target)
    try:
        lines, first = inspect.getsourcelines(code_of)
        filename = inspect.getsourcefile(code_of)
    except (OSError, TypeError):
        lines, first, filename = [], 1, None
    backend_name = backend if isinstance(backend, str) else getattr(backend, "__name__", repr(backend))
    return FunctionReport(name, filename, max(first, 1), [line.rstrip("\n") for line in lines],
                          backend_name, session)


def _hook_session(report: FunctionReport) -> None:
    """Wrap the session's entry and backend (instance attributes: the class is untouched)."""
    session = report.session
    run_code, backend = session.run_code, session.backend
    depth = [0]

    def observed_run_code(*args, **kwargs):
        depth[0] += 1
        previous, _STATE["active"] = _STATE["active"], report
        before = (len(session.records), len(report.all_events()))
        try:
            return run_code(*args, **kwargs)
        finally:
            depth[0] -= 1
            _STATE["active"] = previous if depth[0] else report
            if depth[0] == 0:
                report.calls += 1
                if report.dirty or (len(session.records), len(report.all_events())) != before:
                    report.dirty = False
                    write_report(report)

    def observed_backend(graph, example_inputs):
        entry = GraphReport(len(report.graphs), graph, len(example_inputs))
        report.graphs.append(entry)
        start = time.perf_counter()
        _STATE["in_backend"] += 1
        with events.observe() as seen, warnings.catch_warnings(record=True) as caught:
            try:
                compiled = backend(graph, example_inputs)
            except Exception as e:
                entry.backend_error = f"{type(e).__name__}: {e}"
                raise
            finally:
                _STATE["in_backend"] -= 1
                entry.backend_seconds = time.perf_counter() - start
                entry.events.extend(seen)
        # A stage that fell back warns; the page shows it, and the user still sees the warning.
        for w in caught:
            entry.warnings.append(str(w.message))
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno, source=w.source)
        return compiled

    session.run_code = observed_run_code
    if backend is not None:
        session.backend = observed_backend


def _on_event(event) -> None:
    """Events outside a backend call go to the function that ran last (a lazily compiled backward
    belongs to the forward that just ran); its page is rewritten at its next call or at exit."""
    report = _STATE["active"]
    if report is None or _STATE["in_backend"]:
        return  # inside a backend call, observed_backend's own observer files the event
    report.other_events.append(event)
    report.dirty = True


def flush() -> None:
    """Rewrite every page that has events it does not show yet (also run at interpreter exit)."""
    for report in list(_REPORTS):
        if report.dirty:
            report.dirty = False
            write_report(report)


atexit.register(flush)


def _page_path(directory: pathlib.Path, name: str) -> pathlib.Path:
    # a nested function's qualname (`test.<locals>.f`) makes a poor file name: keep its last part
    stem = re.sub(r"[^A-Za-z0-9_-]+", "_", name.rsplit(".", 1)[-1]).strip("_") or "compiled"
    taken = {r.path for r in _REPORTS}
    path, n = directory / f"{stem}.html", 2
    while path in taken:
        path, n = directory / f"{stem}_{n}.html", n + 1
    return path
