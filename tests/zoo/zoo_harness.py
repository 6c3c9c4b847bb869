"""Runs one zoo model eagerly, under torchsmith.compile and under torch.compile, and compares.

What a row of the zoo table holds: outputs equal to eager at every size, torchsmith's graphs and
graph breaks beside torch.compile's (counted with a backend that only counts, so torch.compile's
compile time is not paid here), the graphs compiled over three sizes (automatic dynamic: at most two
per graph of the first size), optionally one training step with every gradient equal to eager's and
`generate()` of a compiled decoder token for token. With `timing`, the row also holds first-call and
steady per-call times of eager, torchsmith.compile and torch.compile (inductor both), measured at the
first size before the other sizes recompile anything (benchmarks/bench_zoo.py writes the table).
"""

import copy
import dataclasses
import time

import torch

import torchsmith

ATOL, RTOL = 1e-4, 1e-4


class Counting:
    """A torchsmith backend that counts the graphs it compiles and the errors it raised."""

    def __init__(self, name: str):
        self.graphs, self.failures = [], []
        self.inner = torchsmith.lookup_backend(name)

    def __call__(self, graph, example_inputs):
        self.graphs.append(graph)
        try:
            return self.inner(graph, example_inputs)
        except Exception as e:
            self.failures.append(f"{type(e).__name__}: {e}")
            raise


@dataclasses.dataclass
class ZooResult:
    name: str
    correct: bool = False
    error: str | None = None
    graphs: int = 0  # torchsmith graphs after the first size
    breaks: int = 0
    break_reasons: list = dataclasses.field(default_factory=list)
    graphs_all_sizes: int = 0
    failures: list = dataclasses.field(default_factory=list)
    tc_graphs: int | None = None  # torch.compile's, same first size
    tc_breaks: int | None = None
    tc_graphs_all_sizes: int | None = None  # torch.compile's graphs over the same sizes
    train_ok: bool | None = None
    generate_ok: bool | None = None
    eager_ms: float | None = None  # steady per-call times at the first size (timing only)
    first_call_s: float | None = None  # torchsmith: compile and first run
    steady_ms: float | None = None
    tc_first_call_s: float | None = None  # torch.compile (inductor), timing only
    tc_steady_ms: float | None = None
    tc_error: str | None = None  # torch.compile's output not equal to eager's, or its crash


def tensors_of(x) -> list[torch.Tensor]:
    """Every tensor reachable from a model output (ModelOutput, tuples, caches), in a fixed order."""
    if isinstance(x, torch.Tensor):
        return [x]
    if isinstance(x, dict):
        return [t for v in x.values() for t in tensors_of(v)]
    if isinstance(x, (list, tuple)):
        return [t for v in x for t in tensors_of(v)]
    if hasattr(x, "__dict__") and not isinstance(x, (type, torch.nn.Module)):
        return [t for k, v in sorted(vars(x).items()) if not k.startswith("_") for t in tensors_of(v)]
    return []


def same(expected, actual) -> str | None:
    """None when every tensor of `actual` matches `expected`, else what differs."""
    a, b = tensors_of(expected), tensors_of(actual)
    if len(a) != len(b):
        return f"{len(a)} tensors in eager's output, {len(b)} in the compiled one"
    for i, (x, y) in enumerate(zip(a, b)):
        if x.shape != y.shape or x.dtype != y.dtype:
            return f"output tensor {i}: {tuple(x.shape)}/{x.dtype} vs {tuple(y.shape)}/{y.dtype}"
        if not torch.allclose(x.detach(), y.detach(), atol=ATOL, rtol=RTOL, equal_nan=True):
            err = (x.detach() - y.detach()).abs().max().item()
            return f"output tensor {i} {tuple(x.shape)} differs, max error {err:.3g}"
    return None


def problems_of(result) -> list[str]:
    """Everything a zoo row must hold, as a list of what does not."""
    found = []
    if not result.correct:
        found.append(f"not equal to eager: {result.error}")
    if result.tc_graphs is not None and result.graphs > result.tc_graphs:
        found.append(f"{result.graphs} graphs where torch.compile makes {result.tc_graphs}")
    if result.tc_breaks is not None and result.breaks > result.tc_breaks:
        found.append(f"{result.breaks} graph breaks where torch.compile has {result.tc_breaks}: "
                     f"{result.break_reasons[:3]}")
    # automatic dynamic: one static and one dynamic graph per graph of the first size, or as many as
    # torch.compile makes over the same sizes (a branch on a size's parity recompiles both)
    allowed = max(2 * result.graphs, result.tc_graphs_all_sizes or 0)
    if result.graphs and result.graphs_all_sizes > allowed:
        found.append(f"{result.graphs_all_sizes} graphs over three sizes ({result.graphs} at the first, "
                     f"torch.compile {result.tc_graphs_all_sizes})")
    if result.train_ok not in (None, True):
        found.append(f"training step: {result.train_ok}")
    if result.generate_ok not in (None, True):
        found.append(f"generate: {result.generate_ok}")
    return found


def _session(compiled):
    return getattr(compiled, "session", None) or compiled._session


def _breaks(compiled) -> list[str]:
    return [r.break_reason.reason for r in _session(compiled).records if r.break_reason is not None]


def torch_compile_counts(model: torch.nn.Module, inputs: list[dict]) -> tuple[int, int, int]:
    """torch.compile's graphs and graph breaks for the first call, and its graphs after a call with
    each of `inputs` (its Python capture only, no codegen)."""
    import torch._dynamo

    torch._dynamo.reset()
    graphs = []

    def count(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    counters = torch._dynamo.utils.counters
    before = sum(counters["graph_break"].values())
    compiled = torch.compile(model, backend=count)
    with torch.no_grad():
        compiled(**inputs[0])
        first_graphs, breaks = len(graphs), sum(counters["graph_break"].values()) - before
        for other in inputs[1:]:
            compiled(**other)
    torch._dynamo.reset()
    return first_graphs, breaks, len(graphs)


def run_model(entry, backend: str = "inductor", torch_compile: bool = True, timing=None,
              sizes=(0, 1, 2)) -> ZooResult:
    """One zoo row: correctness at every size, graph counts, training and generate where asked.

    `timing` (a `Timing`, or None for no timing) adds first-call and steady times of eager,
    torchsmith and torch.compile (inductor) at the first size."""
    result = ZooResult(entry.name)
    model = entry.build()
    try:
        counter = Counting(backend)
        compiled = torchsmith.compile(copy.deepcopy(model), backend=counter)
        errors = []
        for i, size in enumerate(sizes):
            inputs = entry.inputs(size)
            with torch.no_grad():
                expected = model(**inputs)
                start = time.perf_counter()
                actual = compiled(**inputs)
                if i == 0:
                    result.first_call_s = time.perf_counter() - start
            problem = same(expected, actual)
            if problem:
                errors.append(f"size {size}: {problem}")
            if i == 0:
                result.graphs = len(counter.graphs)
                result.breaks = len(_breaks(compiled))
                if timing:  # before other sizes make torchsmith's graphs dynamic
                    _time_against_torch_compile(result, model, compiled, inputs, expected, timing)
        result.graphs_all_sizes = len(counter.graphs)
        result.break_reasons = sorted(set(_breaks(compiled)))
        result.failures = list(counter.failures)
        result.correct = not errors and not counter.failures
        if errors:
            result.error = errors[0]
        elif counter.failures:
            result.error = f"a graph fell back to eager: {counter.failures[0][:300]}"
    except Exception as e:  # a crash is a row too
        result.error = f"{type(e).__name__}: {str(e)[:300]}"
    if torch_compile:
        try:
            result.tc_graphs, result.tc_breaks, result.tc_graphs_all_sizes = torch_compile_counts(
                model, [entry.inputs(size) for size in sizes])
        except Exception as e:
            result.tc_graphs = result.tc_breaks = None
            result.error = result.error or f"torch.compile failed: {type(e).__name__}: {e}"
    if entry.train:
        result.train_ok = _train_step_matches(entry, backend)
    if entry.generate:
        result.generate_ok = _generate_matches(entry, backend)
    return result


@dataclasses.dataclass(frozen=True)
class Timing:
    """How steady times are taken: `warmup` calls of each system, then `rounds` rounds in which
    eager, torchsmith and torch.compile each run for about `round_s` seconds in turn (so a slow
    spell of a shared machine hits all three alike); a system's time is its median round."""

    rounds: int = 7
    warmup: int = 3
    round_s: float = 0.05


def _time_against_torch_compile(result: ZooResult, model, compiled, inputs: dict, expected, timing: Timing):
    """torch.compile's first call (inductor, after torch._dynamo.reset()) and the steady times of
    the three systems at one size, into `result`."""
    import torch._dynamo

    torch._dynamo.reset()
    baseline = torch.compile(copy.deepcopy(model), backend="inductor")
    try:
        with torch.no_grad():
            start = time.perf_counter()
            actual = baseline(**inputs)
            result.tc_first_call_s = time.perf_counter() - start
        result.tc_error = same(expected, actual)
    except Exception as e:  # the baseline's crash is a note in the row, not torchsmith's error
        result.tc_error = f"{type(e).__name__}: {str(e)[:300]}"
        baseline = None
    systems = {"eager": model, "torchsmith": compiled}
    if baseline is not None:
        systems["torch.compile"] = baseline
    medians = steady_ms({name: (lambda f=fn: f(**inputs)) for name, fn in systems.items()}, timing)
    result.eager_ms, result.steady_ms = medians["eager"], medians["torchsmith"]
    result.tc_steady_ms = medians.get("torch.compile")
    torch._dynamo.reset()


def steady_ms(fns: dict, timing: Timing) -> dict[str, float]:
    """Median milliseconds per call of each function, the functions taking turns every round."""
    with torch.no_grad():
        calls = {}
        for name, fn in fns.items():
            for _ in range(timing.warmup):
                fn()
            start = time.perf_counter()
            fn()
            calls[name] = max(1, round(timing.round_s / max(time.perf_counter() - start, 1e-7)))
        samples = {name: [] for name in fns}
        for _ in range(timing.rounds):
            for name, fn in fns.items():
                start = time.perf_counter()
                for _ in range(calls[name]):
                    fn()
                samples[name].append((time.perf_counter() - start) / calls[name])
    return {name: sorted(times)[len(times) // 2] * 1e3 for name, times in samples.items()}


def _train_step_matches(entry, backend: str) -> bool | str:
    """One forward and backward in training mode: every parameter's gradient equals eager's."""
    model = entry.build().train()
    other = copy.deepcopy(model)
    compiled = torchsmith.compile(other, backend=backend)
    inputs = entry.inputs(0)
    for _, fn in ((model, model), (other, compiled)):
        out = fn(**inputs)
        loss = sum(t.float().sum() for t in tensors_of(out) if t.is_floating_point() and t.requires_grad)
        loss.backward()
    for (name, p), q in zip(model.named_parameters(), other.parameters()):
        if (p.grad is None) != (q.grad is None):
            return f"{name}: gradient {'missing' if q.grad is None else 'unexpected'}"
        if p.grad is not None and not torch.allclose(p.grad, q.grad, atol=1e-4, rtol=1e-3):
            return f"{name}: gradient differs, max error {(p.grad - q.grad).abs().max().item():.3g}"
    return True


def _generate_matches(entry, backend: str) -> bool | str:
    """Greedy generate() with the compiled forward: the same tokens as eager."""
    model = entry.build()
    inputs = entry.inputs(0)
    kwargs = dict(max_new_tokens=6, do_sample=False, pad_token_id=0)
    expected = model.generate(**inputs, **kwargs)
    other = copy.deepcopy(model)
    other.forward = torchsmith.compile(other.forward, backend=backend)
    actual = other.generate(**inputs, **kwargs)
    if not torch.equal(expected, actual):
        return f"tokens differ: {expected.tolist()} vs {actual.tolist()}"
    return True
