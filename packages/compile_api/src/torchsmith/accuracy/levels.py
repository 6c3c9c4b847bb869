"""The ladder of one backend: each stage's output as something callable, from capture's graph down.

A `Level` turns a torch-level graph and example inputs into a callable with the graph's calling
convention (inputs in, list of outputs out), running that stage's output graph. `reference=True`
runs it through torchsmith.ir's reference interpreter (what the check compares); `reference=False`
through generated Python (the same ops, faster: what a call falls back to).

    inductor:   capture (torch.*) -> autograd_aot (aten.*) -> prims (prims.*) -> inductor (kernels)
    aot_eager:  capture (torch.*) -> autograd_aot (aten.*)
    any other:  capture (torch.*) -> backend <name>
"""

from collections.abc import Callable
from dataclasses import dataclass

from torchsmith.ir import Graph, compile_to_python, interpret

Build = Callable[[Graph, list, bool], Callable]


@dataclass(frozen=True, slots=True)
class Level:
    """One stage of a ladder: its name and how to run its output graph (see the module docstring)."""

    stage: str
    build: Build


def _graph_runner(graph: Graph, example_inputs, reference: bool) -> Callable:
    if not reference:
        return compile_to_python(graph)
    return lambda *args: interpret(graph, *args)


def _graph_compiler(reference: bool):
    import torchsmith.prims  # noqa: F401  (prims ops, for the interpreter and generated Python)

    return lambda graph, example_inputs: _graph_runner(graph, example_inputs, reference)


def _aten_level(graph: Graph, example_inputs, reference: bool) -> Callable:
    from torchsmith.autograd_aot import aot_compile

    compiler = _graph_compiler(reference)
    return aot_compile(graph, list(example_inputs), compiler, compiler)


def prims_decomposition(graph: Graph) -> Graph:
    """The decomposition the inductor backend runs (torchsmith.inductor.device_compilers.to_prims_keep)."""
    from torchsmith.inductor.device_compilers import to_prims_keep

    return to_prims_keep(graph)


def _prims_level(graph: Graph, example_inputs, reference: bool) -> Callable:
    from torchsmith.autograd_aot import aot_compile

    compiler = _graph_compiler(reference)
    return aot_compile(graph, list(example_inputs), compiler, compiler, decompose=prims_decomposition)


def _inductor_level(options: dict | None) -> Build:
    def build(graph: Graph, example_inputs, reference: bool) -> Callable:
        from torchsmith.inductor_backend import inductor_backend

        return inductor_backend(graph, list(example_inputs), options=options)

    return build


def _custom_level(backend) -> Build:
    return lambda graph, example_inputs, reference: backend(graph, list(example_inputs))


CAPTURE = Level("capture", _graph_runner)
AUTOGRAD_AOT = Level("autograd_aot", _aten_level)
PRIMS = Level("prims", _prims_level)


def ladder(backend_name: str, backend, options: dict | None) -> list[Level]:
    """The levels a graph compiled by `backend` (registered as `backend_name`) goes through."""
    if backend_name == "inductor":
        return [CAPTURE, AUTOGRAD_AOT, PRIMS, Level("inductor", _inductor_level(options))]
    if backend_name == "aot_eager":
        return [CAPTURE, AUTOGRAD_AOT]
    if backend_name == "eager":
        return [CAPTURE]
    return [CAPTURE, Level(f"backend {backend_name!r}", _custom_level(backend))]
