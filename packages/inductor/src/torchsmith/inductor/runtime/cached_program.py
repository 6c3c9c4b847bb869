"""The JSON form of what the compile cache keeps of a C++ program (`CppProgram`, made by the CPU pipeline):
the loop IR before and after inlining (loop_ir_json's form), the layout choice, the fusion
decisions, the schedule and kernel groups (buffer names into the program), the kernel-local
buffers, the memory plan and the C++ source. No pickle: reading a cache entry builds these records
from plain data, and a document of the wrong shape raises `CachedProgramError` (the cache treats it
as a miss).

    >>> doc = cpp_program_to_json(program)                             # doctest: +SKIP
    >>> cpp_program_from_json(json.loads(json.dumps(doc))) == program  # doctest: +SKIP
"""

from dataclasses import dataclass

from torchsmith.inductor.cpp.codegen import Kernel
from torchsmith.inductor.errors import InductorError
from torchsmith.inductor.fusion.memory_plan import Allocation, MemoryPlan
from torchsmith.inductor.fusion.scheduler import FusionDecision, Schedule
from torchsmith.inductor.loop_ir.program import Buffer, LoopProgram
from torchsmith.inductor.loop_ir.serialize import (
    LoopIRFormatError,
    program_from_json,
    program_to_json,
)
from torchsmith.inductor.lowering.channels_last import ChannelsLastPlan


@dataclass(frozen=True, slots=True)
class CppProgram:
    """Everything between a prims graph and its C++ source: what the compile cache keeps.

    `lowered` is the loop IR as lowered and `program` after inlining (`inlined`: those decisions);
    `plan` the kernel groups and extern calls in order; `local` the intermediates kept inside their
    kernel; `kernels` the C++ kernels with the group each computes."""

    layout: ChannelsLastPlan | None
    lowered: LoopProgram
    program: LoopProgram
    inlined: tuple[FusionDecision, ...]
    plan: Schedule
    local: frozenset[str]
    memory: MemoryPlan
    source: str
    kernels: tuple[tuple[Kernel, tuple[Buffer, ...]], ...]


FORMAT = "torchsmith.cpp_program"
VERSION = 1


class CachedProgramError(InductorError):
    """A cached program document that does not describe a program (damaged or foreign)."""


def _decision(d: FusionDecision) -> list:
    return [d.kind, d.producer, d.consumer, d.taken, d.reason]


def _read_decision(item) -> FusionDecision:
    kind, producer, consumer, taken, reason = item
    return FusionDecision(str(kind), str(producer), str(consumer), bool(taken), str(reason))


def _names(buffers) -> list[str]:
    return [b.name for b in buffers]


def cpp_program_to_json(cached: CppProgram) -> dict:
    """The document of `cached`."""
    layout, lowered, program = cached.layout, cached.lowered, cached.program
    plan, memory = cached.plan, cached.memory
    return {
        "format": FORMAT,
        "version": VERSION,
        "layout": None if layout is None else {
            "convolutions": sorted(layout.convolutions), "values": sorted(layout.values),
            "nhwc_loops": sorted(layout.nhwc_loops), "decision": _decision(layout.decision),
        },
        # Most programs inline something; when nothing changed, the program is not written twice.
        "lowered": None if lowered == program else program_to_json(lowered),
        "program": program_to_json(program),
        "inlined": [_decision(d) for d in cached.inlined],
        "steps": [_names(step) for step in plan.steps],
        "decisions": [_decision(d) for d in plan.decisions],
        "local": sorted(cached.local),
        "allocations": [[a.buffer, a.donor, a.in_place] for a in memory.allocations],
        "frees": [list(names) for names in memory.frees],
        "source": cached.source,
        "kernels": [[k.name, list(k.writes), list(k.reads), _names(group)] for k, group in cached.kernels],
    }  # fmt: skip


def cpp_program_from_json(doc: dict) -> CppProgram:
    """The `CppProgram` `cpp_program_to_json` wrote, with the program's own buffer records in the schedule
    and the kernel groups; raises `CachedProgramError` for a document of another shape."""
    if not isinstance(doc, dict) or doc.get("format") != FORMAT or doc.get("version") != VERSION:
        raise CachedProgramError(f"not a cached program of format {FORMAT} version {VERSION}")
    try:
        program = program_from_json(doc["program"])
        lowered = program if doc["lowered"] is None else program_from_json(doc["lowered"])
        by_name = {b.name: b for b in program.buffers}

        def buffers(names) -> tuple:
            return tuple(by_name[name] for name in names)

        layout = doc["layout"]
        if layout is not None:
            layout = ChannelsLastPlan(
                frozenset(layout["convolutions"]), frozenset(layout["values"]),
                frozenset(layout["nhwc_loops"]), _read_decision(layout["decision"]),
            )  # fmt: skip
        plan = Schedule(
            tuple(buffers(step) for step in doc["steps"]), tuple(_read_decision(d) for d in doc["decisions"])
        )
        memory = MemoryPlan(
            tuple(
                Allocation(str(b), None if d is None else str(d), bool(p)) for b, d, p in doc["allocations"]
            ),
            tuple(tuple(str(n) for n in names) for names in doc["frees"]),
        )
        kernels = tuple(
            (Kernel(str(name), tuple(writes), tuple(reads)), buffers(group))
            for name, writes, reads, group in doc["kernels"]
        )
        inlined = tuple(_read_decision(d) for d in doc["inlined"])
        source = doc["source"]
        if not isinstance(source, str):
            raise CachedProgramError("the cached program's source is not text")
        return CppProgram(
            layout, lowered, program, inlined, plan, frozenset(doc["local"]), memory, source, kernels
        )
    except (KeyError, TypeError, ValueError, LoopIRFormatError) as error:
        raise CachedProgramError(f"malformed cached program: {type(error).__name__}: {error}") from None
