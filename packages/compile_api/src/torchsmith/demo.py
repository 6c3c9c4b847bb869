"""The demo (`nox -s demo`, or `python -m torchsmith.demo`): compile a small GPT and show what happened.

Compiles `torchsmith.demo_model.TinyGPT` (random weights, nothing downloaded) with the default
backend, checks its logits against eager PyTorch, and prints eager vs compiled time, the captured
graphs, graph breaks, the later stages' graphs and the generated kernels. A backend that is not
built yet, or a stage that fails and falls back, is reported and the next backend is tried
(`inductor`, then `aot_eager`), so the demo always ends with a working compiled model.

    python -m torchsmith.demo [--backend NAME] [--report DIR] [--repeats N]
"""

import argparse
import contextlib
import logging
import re
import statistics
import sys
import threading
import time
import warnings

import torch

import torchsmith
from torchsmith import report
from torchsmith.demo_model import GPTConfig, make_model
from torchsmith.ir import events, format_graph, format_type

FALLBACK_ORDER = ("inductor", "aot_eager", "eager")
SHOWN_LINES = 24


class Progress:
    """A one-line progress display while compiling: elapsed time, current stage, graphs, kernels."""

    def __init__(self, label: str, stream=None):
        self.label, self.stream = label, stream or sys.stdout
        self.stage, self.graphs, self.kernels = "capture", 0, 0
        self._done = threading.Event()
        self._start = time.perf_counter()
        self._tty = getattr(self.stream, "isatty", lambda: False)()

    def _on_event(self, event) -> None:
        self.stage = event.stage
        self.graphs += event.kind == "graph"
        self.kernels += event.kind == "code"

    def line(self) -> str:
        """The current progress text."""
        return (f"[torchsmith] {self.label}: {time.perf_counter() - self._start:5.1f} s, stage {self.stage}, "
                f"{self.graphs} graphs, {self.kernels} kernel sources")

    def _loop(self) -> None:
        shown = None
        while not self._done.wait(0.2 if self._tty else 2.0):
            text = self.line()
            if self._tty:
                self.stream.write("\r" + text.ljust(100))
            elif text != shown:  # a log file gets a line every two seconds, not a spinner
                self.stream.write(text + "\n")
            shown = text
            self.stream.flush()

    def __enter__(self):
        self._unsubscribe = events.subscribe(self._on_event)
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._done.set()
        self._thread.join()
        self._unsubscribe()
        end = "\r" if self._tty else ""
        self.stream.write(f"{end}{self.line().replace(self.label, self.label + ' done')}".ljust(100) + "\n")
        self.stream.flush()
        return False


class _Complaints(logging.Handler):
    """Collects the warnings torchsmith logs while compiling (a stage that fell back says so)."""

    def __init__(self):
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record) -> None:
        self.messages.append(record.getMessage().splitlines()[0])


@contextlib.contextmanager
def _collect_complaints():
    handler, logger = _Complaints(), logging.getLogger("torchsmith")
    logger.addHandler(handler)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            yield handler.messages
        finally:
            logger.removeHandler(handler)
            handler.messages.extend(str(w.message).splitlines()[0] for w in caught)


def _median_ms(functions, repeats: int) -> list[float]:
    """Median milliseconds per call of each function; the calls alternate, so a machine that gets
    busier halfway (other jobs on a shared box) slows all of them alike."""
    times = [[] for _ in functions]
    for _ in range(repeats):
        for fn, spent in zip(functions, times):
            start = time.perf_counter()
            fn()
            spent.append((time.perf_counter() - start) * 1000)
    return [statistics.median(spent) for spent in times]


# the first line of a generated kernel: C++ `extern "C" void kernel3_add(...) {`, Triton `def triton_...(`
_KERNEL = re.compile(r'^(extern "C" void \w+|def triton\w*)\(')


def _first_kernel(source: str) -> str:
    """From the first kernel function on (the prelude of includes and helpers is the same every time)."""
    lines = source.splitlines()
    start = next((i for i, line in enumerate(lines) if _KERNEL.match(line)), 0)
    return "\n".join(lines[start:])


def _compact_graph_text(graph) -> str:
    """The graph's text form for a terminal: the inputs counted instead of listed (a model has one per
    weight) and source comments cut to `file.py:line`."""
    lines = format_graph(graph).splitlines()
    first = graph.inputs[0] if graph.inputs else None
    shown = f"%{first.name}: {format_type(first.type)}, " if first is not None else ""
    lines[0] = f"graph {graph.name}({shown}... {len(graph.inputs)} inputs in all, weights included):"
    return "\n".join(re.sub(r"# \S*/([^/\s]+:\d+)$", r"# \1", line) for line in lines)


def _shorten(text: str, lines: int = SHOWN_LINES, width: int = 150) -> str:
    rows = [row if len(row) <= width else row[: width - 4] + " ..." for row in text.rstrip().splitlines()]
    if len(rows) <= lines:
        return "\n".join(rows)
    return "\n".join(rows[:lines] + [f"    ... {len(rows) - lines} more lines (see --report for all)"])


def try_backend(name, model, tokens, expected, out, report_dir=None):
    """Compile and run `model` with backend `name`; (compiled, FunctionReport) when it compiled
    and matched eager, else None after printing what went wrong."""
    try:
        backend = torchsmith.lookup_backend(name)
    except torchsmith.BackendError as e:
        out(f"{e}; trying the next one")
        return None
    if getattr(backend, "not_built", False):
        out(f"backend {name!r} is not built yet in this checkout; trying the next one")
        return None
    compiled = torchsmith.compile(model, backend=name)
    facts = report.report_of(report.attach(compiled, report_dir, fn=model, backend=name))
    error = None
    with _collect_complaints() as complaints, Progress(f"compiling TinyGPT with backend={name!r}"):
        try:
            logits = compiled(tokens)
        except Exception as e:  # the demo reports every failure instead of dying on it
            error = e
    if error is not None:  # printed after the progress line has finished
        out(f"backend {name!r} failed: {type(error).__name__}: {(str(error) or '?').splitlines()[0]}")
        return None
    failed = [g for g in facts.graphs if g.backend_error]
    for entry in failed:
        out(f"backend {name!r} failed on graph {entry.graph.name}: {entry.backend_error.splitlines()[0]}")
    for message in dict.fromkeys(complaints):
        out(f"  fallback: {message}")
    if failed or complaints:
        out(f"backend {name!r} fell back to eager for part of the model; trying the next backend")
        return None
    if not torch.allclose(logits, expected, rtol=1e-4, atol=1e-4):
        out(f"backend {name!r}: logits differ from eager by {(logits - expected).abs().max():.2e}")
        return None
    return compiled, facts


def show(facts, out) -> None:
    """Print the graphs, breaks, later stages and kernels of one compiled function."""
    records = facts.records
    captured = sum(r.graph is not None for r in records)
    out(f"\n-- graphs captured: {captured}, graph breaks: {len(facts.breaks)}")
    for brk in facts.breaks:
        out(f"   break at {brk.filename}:{brk.line}: {brk.reason}")
    for record in records:
        if record.graph is not None:
            out(f"\n-- captured graph {record.code_name} ({len(record.graph.nodes)} nodes, "
                f"{len(record.guards)} guards):")
            out(_shorten(_compact_graph_text(record.graph)))
    later = [e for e in facts.all_events() if e.stage != "capture"]
    for event in later:
        if event.kind == "graph" and "graph" in event.payload:
            graph = event.payload["graph"]
            out(f"-- {event.stage} graph {event.payload.get('name', '')}: {len(graph.nodes)} nodes")
    for event in later:
        if event.kind == "loops":
            out(f"-- loop IR of {event.payload.get('name', '')}: "
                f"{len(str(event.payload.get('program', '')).splitlines())} lines")
        elif event.kind == "fusion":
            decisions = [str(d) for d in event.payload.get("decisions") or []]
            refused = sum("refused" in d for d in decisions)
            out(f"-- fusion decisions of {event.payload.get('name', '')}: "
                f"{len(decisions) - refused} fused, {refused} refused")
    kernels = [e for e in later if e.kind == "code"]
    out(f"\n-- generated kernel sources: {len(kernels)}")
    if kernels:
        first = kernels[0].payload
        source = str(first.get("source", ""))
        functions = [line for line in source.splitlines() if _KERNEL.match(line)]
        out(f"{first.get('language', '?')} for {first.get('name', '')}: {len(source.splitlines())} lines, "
            f"{len(functions)} kernels; the first one:")
        out(_shorten(_first_kernel(source)))
    out("\n-- compile time per stage:")
    for step, seconds in facts.stage_times().items():
        out(f"   {step:<28} {seconds * 1000:8.1f} ms")


DEFAULT_CONFIG = GPTConfig()


def run_demo(backend: str = "inductor", out=print, report_dir=None, repeats: int = 10,
             config: GPTConfig = DEFAULT_CONFIG, fallbacks=FALLBACK_ORDER) -> bool:
    """Run the demo; True when a compiled model matched eager PyTorch (with `backend`, or else
    with the first of `fallbacks` that works)."""
    model = make_model(config=config)
    tokens = torch.randint(0, config.vocab, (4, config.context), generator=torch.Generator().manual_seed(1))
    parameters = sum(p.numel() for p in model.parameters())
    out(f"torchsmith demo: TinyGPT, {config.layers} layers, width {config.width}, {config.heads} heads, "
        f"{parameters / 1e6:.2f} M parameters, batch {tuple(tokens.shape)}")
    order = [backend] + [name for name in fallbacks if name != backend]
    with torch.no_grad():
        expected = model(tokens)
        for name in order:
            found = try_backend(name, model, tokens, expected, out, report_dir)
            if found is not None:
                break
        else:
            out("no backend compiled the model")
            return False
        compiled, facts = found
        show(facts, out)
        difference = (compiled(tokens) - expected).abs().max().item()
        eager_ms, compiled_ms = _median_ms([lambda: model(tokens), lambda: compiled(tokens)], repeats)
    out(f"\n-- backend {name!r}: logits match eager (max |difference| {difference:.1e})")
    out(f"   eager    {eager_ms:8.2f} ms per call (median of {repeats})")
    out(f"   compiled {compiled_ms:8.2f} ms per call ({eager_ms / compiled_ms:.2f}x)")
    if report_dir is not None and facts.path is not None:
        report.write_report(facts)
        out(f"   report: {facts.path}")
    return True


def main(argv=None) -> int:
    """Entry point of `python -m torchsmith.demo`; exit status 0 when the compiled model matched."""
    parser = argparse.ArgumentParser(prog="python -m torchsmith.demo", description=__doc__.split("\n")[0])
    parser.add_argument("--backend", default="inductor", help="backend to try first (default %(default)s)")
    parser.add_argument("--report", metavar="DIR", help="also write the HTML compile report there")
    parser.add_argument("--repeats", type=int, default=10, help="timed calls per measurement")
    options = parser.parse_args(argv)
    return 0 if run_demo(options.backend, report_dir=options.report, repeats=options.repeats) else 1


if __name__ == "__main__":
    sys.exit(main())
