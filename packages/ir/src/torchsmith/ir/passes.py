"""The pass runner: a stage's pipeline is a flat list of named steps, run by one function.

A step is a pure function from the stage's state to a new state. The state is a `Graph`, or a frozen
dataclass holding the stage's IR and whatever the stage threads through (a loop program, the indices
of mutated inputs, ...). A pipeline prints as its listing::

    >>> pipeline = Pipeline("demo", (
    ...     Step("dce", dead_code_elimination, "graph without dead nodes"),
    ...     Step("rename", lambda g: g.replace(name="renamed"), "the same graph, renamed"),
    ... ))
    >>> print(pipeline)
    demo pipeline:
      dce     -> graph without dead nodes
      rename  -> the same graph, renamed
    >>> graph = pipeline.run(graph)               # doctest: +SKIP
    >>> [s.pass_name for s in graph.stamps]       # doctest: +SKIP
    ['dce', 'rename']

For every step the runner

- times it: a `Stamp(step, seconds)` (the one timing record of the project) goes onto the new state
  through its `stamped(name, seconds)` method when it has one (`Graph` has), into the `StepRun` that
  `Pipeline.iterate` yields, and into a `<stage>/time` compile event;
- verifies the IR the step produced when `verify=True`, or when `verify=None` and `TORCHSMITH_VERIFY=1`:
  each `Graph` with `torchsmith.ir.verify`, and each value of a kind a stage registered with
  `torchsmith.ir.ir_kinds.register_ir_kind` (inductor's loop IR) with that kind's verifier;
- dumps the IR the step produced as `NNN-<stage>-<step>.txt` into `dump=DIR`, or, when `dump=None`,
  into `TORCHSMITH_DUMP_IR` when `TORCHSMITH_DUMP_IR_STEPS=1` (numbered with compile_api's dumps).

A step that returns its state unchanged (the same object) did nothing: no stamp, check or dump.
`graph_pass` makes a pass that, called on its own, is a one-step pipeline (so it is timed too).
"""

import dataclasses
import functools
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from torchsmith.ir import events
from torchsmith.ir.dump_folder import reserve_dump_path, step_dump_directory
from torchsmith.ir.graph import Graph, Stamp
from torchsmith.ir.ir_kinds import ir_kind_of, ir_parts

GraphPass = Callable[[Graph], Graph]


@dataclass(frozen=True, slots=True)
class Step:
    """One named step of a pipeline: `run(state) -> new state`; `produces` says, for the listing,
    what the step turns the state into."""

    name: str
    run: Callable[[Any], Any]
    produces: str = ""


@dataclass(frozen=True, slots=True)
class StepRun:
    """What one step did: its name, the state it returned, and its timing."""

    step: str
    state: Any
    stamp: Stamp | None  # None: the step returned its state unchanged


@dataclass(frozen=True, slots=True)
class Pipeline:
    """A stage's steps in order; `stage` names the stage in events, dumps and messages."""

    stage: str
    steps: tuple[Step, ...]

    def __post_init__(self):
        object.__setattr__(self, "steps", tuple(as_step(s) for s in self.steps))

    def __str__(self) -> str:
        width = max((len(s.name) for s in self.steps), default=0)
        lines = [f"{self.stage} pipeline:"]
        lines += [f"  {s.name:<{width}}  -> {s.produces or '?'}".rstrip() for s in self.steps]
        return "\n".join(lines)

    def names(self) -> list[str]:
        """The step names in order."""
        return [s.name for s in self.steps]

    def iterate(self, state, *, verify: bool | None = None, dump=None) -> Iterator[StepRun]:
        """Run the steps one by one, yielding a `StepRun` after each (see the module docstring)."""
        from torchsmith.ir.verifier import verify_enabled

        check = verify_enabled() if verify is None else verify
        folder = step_dump_directory() if dump is None else dump
        for step in self.steps:
            start = time.perf_counter()
            try:
                new = step.run(state)
            except Exception as error:
                _note(error, f"in step {step.name!r} of the {self.stage} pipeline")
                raise
            seconds = time.perf_counter() - start
            if new is state:
                yield StepRun(step.name, state, None)
                continue
            # what the step changed, before the stamp makes every stamped part new
            fields = _changed_fields(state, new) if check or folder else ()
            stamp = Stamp(step.name, seconds)
            stamped = getattr(new, "stamped", None)
            if callable(stamped):
                new = stamped(step.name, seconds)
            events.emit(self.stage, "time", step=step.name, seconds=seconds)
            if fields:
                changed = [(field, value) for field, value in ir_parts(new) if field in fields]
                if folder:
                    _dump(folder, self.stage, step.name, changed)
                if check:
                    _verify(self.stage, step.name, changed)
            state = new
            yield StepRun(step.name, state, stamp)

    def run(self, state, *, verify: bool | None = None, dump=None):
        """Run every step on `state` and return the final state."""
        for result in self.iterate(state, verify=verify, dump=dump):
            state = result.state
        return state


def as_step(p) -> Step:
    """`p` as a `Step`: a Step; a `graph_pass` (its undecorated step); or a plain function, named
    by its `pass_name` or `__name__`."""
    if isinstance(p, Step):
        inner = getattr(p.run, "step", None)
        # a graph_pass as a step's function: run it undecorated, or it would time itself again
        return dataclasses.replace(p, run=inner.run) if isinstance(inner, Step) else p
    step = getattr(p, "step", None)
    if isinstance(step, Step):
        return step
    return Step(getattr(p, "pass_name", None) or getattr(p, "__name__", "step"), p)


def run_pipeline(state, passes: "Pipeline | Sequence", *, verify: bool | None = None, dump=None,
                 stage: str = "ir"):
    """Run `passes` (a `Pipeline`, or steps and passes in order) on `state`; returns the final
    state. Verifies between steps when `verify` (default: TORCHSMITH_VERIFY=1); see the module
    docstring for timing and dumps."""
    pipeline = passes if isinstance(passes, Pipeline) else Pipeline(stage, tuple(passes))
    return pipeline.run(state, verify=verify, dump=dump)


def graph_pass(name: str, *, stage: str = "ir", produces: str = "") -> Callable[[GraphPass], GraphPass]:
    """Decorate a `Graph -> Graph` function (extra arguments allowed) so that each call runs it as a
    one-step pipeline named `name`: timed and stamped, verified and dumped when asked. In a
    `Pipeline` the undecorated function is the step (`.step`, or `undecorated(fn)` for a pass
    with more arguments), so it is timed once."""

    def decorate(fn: GraphPass) -> GraphPass:
        @functools.wraps(fn)
        def run(graph, *args, **kwargs):
            step = Step(name, lambda g: fn(g, *args, **kwargs), produces)
            return Pipeline(stage, (step,)).run(graph)

        run.pass_name = name
        run.step = Step(name, fn, produces)
        return run

    return decorate


def undecorated(fn: Callable) -> Callable:
    """The function a `graph_pass` wraps (what a pipeline step calls, so the step is timed once by
    its own pipeline); any other function as it is."""
    step = getattr(fn, "step", None)
    return getattr(fn, "__wrapped__", fn) if isinstance(step, Step) else fn


def _changed_fields(old, new) -> set[str]:
    """The fields of `new` holding IR that is not the very object `old` held there."""
    before = dict(ir_parts(old))
    return {field for field, value in ir_parts(new) if before.get(field) is not value}


def _dump(folder, stage: str, step: str, parts: list[tuple[str, Any]]) -> None:
    for field, value in parts:
        kind = ir_kind_of(value)
        name = f"{step}.{field}" if field else step
        text = kind.format(value)
        path = reserve_dump_path(folder, stage, name, kind.suffix)
        path.write_text(text if text.endswith("\n") else text + "\n")


def _verify(stage: str, step: str, parts: list[tuple[str, Any]]) -> None:
    for field, value in parts:
        try:
            ir_kind_of(value).verify(value)
        except Exception as error:
            where = f" (field {field!r})" if field else ""
            _note(error, f"found by the verifier after step {step!r} of the {stage} pipeline{where}")
            raise


def _note(error: Exception, note: str) -> None:
    # once: an error object kept and raised again (a cached failure) must not grow on every raise
    if note not in getattr(error, "__notes__", ()):
        error.add_note(note)


_INPLACE_DUNDERS = frozenset(
    f"__i{op}__"
    for op in (
        "add",
        "sub",
        "mul",
        "truediv",
        "floordiv",
        "mod",
        "pow",
        "and",
        "or",
        "xor",
        "lshift",
        "rshift",
        "matmul",
    )
) | {"__setitem__"}


def _is_inplace_name(name: str) -> bool:
    if name.startswith("__") and name.endswith("__"):
        return name in _INPLACE_DUNDERS
    return name.endswith("_")


def has_side_effects(op: str) -> bool:
    """Ops that write memory and so must never be removed as dead: in-place torch methods and
    aten overloads (`add_`, `__iadd__`), `__setitem__`, `copy_` and `out=` variants."""
    parts = op.split(".")
    if parts[0] == "aten" and len(parts) == 3:
        return _is_inplace_name(parts[1]) or parts[2].startswith("out")
    return _is_inplace_name(parts[-1])


@graph_pass("dce")
def dead_code_elimination(graph: Graph) -> Graph:
    """Drop nodes none of whose outputs are used, unless the op has side effects."""
    live = {v.name for v in graph.outputs}
    kept = []
    for node in reversed(graph.nodes):
        if has_side_effects(node.op) or any(v.name in live for v in node.outputs):
            kept.append(node)
            live.update(v.name for v in node.inputs)
    return graph.replace(nodes=tuple(reversed(kept)))
