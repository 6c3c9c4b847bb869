"""The entry points: `compile_graph` (an `aten.*` or `prims.*` graph -> a callable running generated
C++) and `inductor_backend`, the same with the custom-backend signature.

The pipeline, one step per line::

    decompose (aten -> prims)  ->  lower (prims -> loop IR)  ->  generate_cpp  ->  load_library  ->  wrap
"""

import logging
import time

from torchsmith.inductor.cpp_build import load_library
from torchsmith.inductor.cpp_codegen import generate_cpp
from torchsmith.inductor.errors import LoweringError
from torchsmith.inductor.lower import lower
from torchsmith.inductor.wrapper import CompiledGraph
from torchsmith.ir import Graph

# `TORCHSMITH_LOGS=output_code` (compile_api's logs) shows the loop IR and the C++ of each graph.
code_log = logging.getLogger("torchsmith.inductor.output_code")


def to_prims(graph: Graph) -> Graph:
    """`graph` with every aten op decomposed to prims (prims graphs pass through)."""
    if all(node.op.startswith("prims.") for node in graph.nodes):
        return graph
    import torchsmith.prims

    return torchsmith.prims.decompose(graph)


def compile_graph(graph: Graph, example_inputs=None) -> CompiledGraph:
    """Compile `graph` for the CPU; the result, called with the graph's inputs, returns the same
    list of outputs as `torchsmith.ir.interpret(graph, *inputs)`.

    >>> fn = compile_graph(graph, [x])   # doctest: +SKIP
    >>> fn(x)                            # doctest: +SKIP
    """
    timings = {}
    start = time.perf_counter()
    prims_graph = to_prims(graph)
    timings["decompose"] = time.perf_counter() - start
    devices = {v.type.device for v in prims_graph.values() if hasattr(v.type, "device")}
    if devices - {"cpu"}:
        raise LoweringError(
            f"graph {graph.name} uses devices {sorted(devices)}; the C++ backend runs on cpu only"
        )
    start = time.perf_counter()
    program = lower(prims_graph)
    timings["lower"] = time.perf_counter() - start
    start = time.perf_counter()
    source, kernels = generate_cpp(program)
    timings["codegen"] = time.perf_counter() - start
    start = time.perf_counter()
    library = load_library(source)
    timings["build"] = time.perf_counter() - start
    if code_log.isEnabledFor(logging.INFO):
        code_log.info("loop IR of %s:\n%s\n\nC++ of %s:\n%s", graph.name, program, graph.name, source)
    return CompiledGraph(program, library, kernels, source, prims_graph, timings)


def inductor_backend(graph: Graph, example_inputs) -> CompiledGraph:
    """The custom-backend form (`backend(graph, example_inputs) -> callable`), for inference graphs."""
    return compile_graph(graph, example_inputs)
