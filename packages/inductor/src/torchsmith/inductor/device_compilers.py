"""What `backend="inductor"` needs from the code generators: per-device compilers, support checks,
and the passes around them. compile_api (`torchsmith.inductor_backend`) wires them to autograd_aot:

    check_supported (devices, dtypes)                    the whole torch-level graph, before tracing
    autograd_aot.aot_compile(decompose=to_prims_keep)    ATen joint graph -> prims, then min-cut partition
      forward  -> compile_for_device                     now (inference: the only graph)
      backward -> compile_for_device                     on the first `.backward()` (checked now by
                                                         check_backward when options["fallback"] == "raise")

The device of a graph picks its code generator in `DEVICE_COMPILERS` (`"cpu"`: the C++ backend,
`"cuda"`: Triton); other devices plug in with `register_device_compiler`. Whatever the inductor cannot compile
raises `UnsupportedGraphError` naming the stage, the op and the user's source line; the backend never
falls back to eager itself (compile_api decides that, with one warning).
"""

import importlib.util
import inspect
from collections.abc import Callable
from dataclasses import dataclass

import torch

from torchsmith.inductor.cpu_pipeline import compile_graph
from torchsmith.inductor.errors import InductorError, UnsupportedGraphError
from torchsmith.inductor.loop_ir.program import ComputedBuffer
from torchsmith.ir import Graph, Node, TensorType, Value, lookup_op
from torchsmith.ir.graph import iter_values, map_arg

Compiler = Callable[[Graph, list], Callable]



def compile_cuda(graph: Graph, example_inputs, options: dict | None = None) -> Callable:
    """CUDA graphs go to the Triton code generator (imported on first use: CPU-only installs need no
    triton)."""
    if importlib.util.find_spec("triton") is None:
        raise UnsupportedGraphError(
            f"inductor: graph {graph.name} runs on cuda, whose code generator needs triton: "
            "pip install triton, or use backend='aot_eager'"
        )
    from torchsmith.inductor.gpu_pipeline import compile_graph_triton

    return compile_graph_triton(graph, example_inputs, options)


def prepare_device(device_type: str) -> None:
    """Start what a device's code generator needs before its first graph arrives: for CUDA, Triton's
    compile workers and driver (else started when the first graph lowers), so that they start while
    autograd_aot traces the graph (a quarter to half a second of a training step's first call)."""
    if device_type != "cuda" or importlib.util.find_spec("triton") is None:
        return
    from torchsmith.inductor.runtime.triton_launch import interpreting
    from torchsmith.inductor.runtime.triton_workers import start_workers

    if not interpreting():
        start_workers()


# device type -> compiler of prims graphs on that device; the one hook where the device decides.
DEVICE_COMPILERS: dict[str, Compiler] = {"cpu": compile_graph, "cuda": compile_cuda}


def register_device_compiler(device_type: str, compiler: Compiler) -> None:
    """Compile graphs whose tensors live on `device_type` ("cuda", ...) with `compiler(graph,
    example_inputs) -> callable` (a prims graph in, a callable returning the list of outputs)."""
    DEVICE_COMPILERS[device_type] = compiler


@dataclass
class BackendStats:
    """What backend="inductor" did in this process; tests read it to tell compiled runs from fallbacks."""

    graphs: int = 0  # prims graphs compiled (forward, backward or inference)
    graphs_with_kernels: int = 0  # ... of which generate at least one kernel (others: views, library calls)
    calls: int = 0  # calls of compiled graphs
    kernel_calls: int = 0  # calls of compiled graphs that ran at least one generated kernel
    backward_fallbacks: int = 0  # backward graphs run as eager ops after the inductor refused them


STATS = BackendStats()


def _where(node: Node | None) -> str:
    if node is None:
        return ""
    return f" (from {node.source})" if node.source else ""


def _device_type(device: str) -> str:
    return device.split(":", 1)[0]


def check_supported(graph: Graph) -> str:
    """The device type every tensor of `graph` lives on; raises `UnsupportedGraphError` naming the
    first node that uses a second device, or a device with no code generator. Every dtype passes:
    nodes reading or writing complex values (or another dtype no code generator computes) run
    torch's kernels as extern calls (`lowering.fallback.foreign_dtype`)."""
    device, first_user = None, None
    producers = graph.producers()
    for value in graph.values():
        t = value.type
        if not isinstance(t, TensorType):
            continue
        node = producers.get(value.name)
        op = node.op if node is not None else f"input %{value.name}"
        kind = _device_type(t.device)
        if device is None:
            device, first_user = kind, op
        elif kind != device:
            raise UnsupportedGraphError(
                f"inductor: {op} uses device {t.device}{_where(node)} while {first_user} uses {device}; "
                "one compiled graph runs on one device: move the tensors to one device first",
                op=op, source=node.source if node else None,
            )
        if kind not in DEVICE_COMPILERS:
            raise UnsupportedGraphError(
                f"inductor: {op} runs on {t.device}{_where(node)}, which has no code generator "
                f"(devices with one: {', '.join(sorted(DEVICE_COMPILERS))}); use backend='aot_eager'",
                op=op, source=node.source if node else None,
            )
    return device or "cpu"


def _failing_node(error: Exception, graph: Graph) -> Node | None:
    """The node an inductor error is about: its `node` attribute, else the node its message quotes
    (lowering messages read `%out = op (from file:line)`)."""
    node = getattr(error, "node", None)
    if isinstance(node, Node):
        return node
    text = str(error)
    for node in graph.nodes:
        names = ", ".join(f"%{v.name}" for v in node.outputs)
        if node.outputs and f"{names} = {node.op}" in text:
            return node
    return None


def _unsupported(error: Exception, graph: Graph) -> UnsupportedGraphError:
    node = _failing_node(error, graph)
    op = node.op if node is not None else None
    # An exception outside the inductor's hierarchy is a bug of ours, not a limit: say so.
    what = str(error) if isinstance(error, InductorError) else (
        f"internal error (a bug in torchsmith.inductor, please report it): {type(error).__name__}: {error}"
    )
    wrapped = UnsupportedGraphError(
        f"inductor could not compile graph {graph.name}: {what}", op=op, source=node.source if node else None
    )
    wrapped.__cause__ = error
    return wrapped


class InductorCompiled:
    """A compiled prims graph that counts its calls in `STATS` (so tests can tell it ran); other
    attributes (`program`, `source`, `timings`, ...) are the compiled graph's own."""

    def __init__(self, compiled: Callable, graph: Graph):
        self.compiled, self.graph = compiled, graph
        program = getattr(compiled, "program", None)
        self.has_kernels = program is not None and any(
            isinstance(b, ComputedBuffer) for b in program.buffers
        )

    def __getattr__(self, name: str):
        if name == "compiled":  # not set yet (copying): no recursion
            raise AttributeError(name)
        return getattr(self.compiled, name)

    def __call__(self, *args):
        STATS.calls += 1
        STATS.kernel_calls += self.has_kernels
        return self.compiled(*args)


def _accepts_options(compiler: Compiler) -> bool:
    try:
        return "options" in inspect.signature(compiler).parameters
    except (TypeError, ValueError):
        return False


def compile_for_device(graph: Graph, example_inputs, options: dict | None = None) -> InductorCompiled:
    """Compile a prims (or ATen) graph with the code generator of its device; `options` (compile_api's
    dict: "cpp.threads", "max_autotune", ...) reach code generators that take an `options` keyword."""
    device = check_supported(graph)
    compiler = DEVICE_COMPILERS[device]
    try:
        if options is not None and _accepts_options(compiler):
            compiled = compiler(graph, list(example_inputs), options=options)
        else:
            compiled = compiler(graph, list(example_inputs))
    except UnsupportedGraphError:
        raise
    except Exception as e:  # noqa: BLE001 - every failure becomes one error naming stage, op and line
        raise _unsupported(e, graph) from e
    STATS.graphs += 1
    result = InductorCompiled(compiled, graph)
    STATS.graphs_with_kernels += result.has_kernels
    return result


def _same_layout(shape, strides, other) -> bool:
    """Strides agree wherever they matter (kernels never step along a dim of size 1)."""
    return all(n == 1 or a == b for n, a, b in zip(shape, strides, other))


def with_input_strides(graph: Graph, example_inputs) -> Graph:
    """`graph` with the strides of its static tensor inputs taken from `example_inputs` where they
    differ. The backward's saved tensors come from the compiled forward, whose outputs may be laid
    out otherwise than the trace on meta tensors predicted (a permuted view of a contiguous buffer);
    the backward is compiled for the layouts it will really get."""
    types = {}
    for value, x in zip(graph.inputs, example_inputs):
        t = value.type
        if not isinstance(t, TensorType) or not isinstance(x, torch.Tensor) or t.free_symbols:
            continue
        if not _same_layout(t.shape, x.stride(), t.strides):
            types[value.name] = t.replace(strides=tuple(x.stride()))
    return graph.with_input_types(types)


def check_backward(graph: Graph) -> None:
    """Refuse now (at forward compile time) a backward graph the inductor could not compile later,
    in `.backward()`, where no fallback is possible: same checks as compiling it, without the build."""
    device = check_supported(graph)
    if device != "cpu":
        return  # other code generators are checked when they compile
    from torchsmith.inductor.lowering.lower import lower

    try:
        lower(graph)
    except Exception as e:  # noqa: BLE001 - as in compile_for_device
        raise _unsupported(e, graph) from e


def to_prims_keep(graph: Graph) -> Graph:
    """The functional ATen graph decomposed to prims; ops with no decomposition stay whole for the
    lowering's extern calls (they fail there, with the node named, if it cannot run them). Outputs
    keep the layouts eager gives them (see `keep_output_strides`)."""
    from torchsmith.inductor.runtime import compile_cache
    from torchsmith.ir import loads

    # A process that decomposed this graph before reads the prims graph back instead of decomposing.
    key = compile_cache.key_of("prims-graph", compile_cache.graph_text(graph))
    text = compile_cache.lookup(key)
    if text is not None:
        import torchsmith.prims  # noqa: F401 - registers the prims ops the graph read back holds

        return loads(text).replace(stamps=graph.stamps)
    from torchsmith.prims import prims_pipeline

    # Softmax attention written out as matmuls runs as the attention library kernel (see
    # fuse_attention); values the per-node decompositions repeat are computed once.
    prims = keep_output_strides(graph, prims_pipeline(on_missing="keep", fuse=True).run(graph))
    compile_cache.store(key, compile_cache.graph_text(prims))
    return prims


def _retype_views_of(prims: Graph, renamed: dict[str, Value]) -> None:
    """Add to `renamed` the nodes whose declared layout derives from a re-declared value: a view's
    strides follow its input's (a slice of a channels-last output is strided as channels-last), so
    a node declared with what its op's shape rule computes from the old input types is declared
    with what the rule computes from the new ones, in graph order (views of views follow)."""
    for node in prims.nodes:
        if any(v.name in renamed for v in node.outputs):
            continue
        if not any(isinstance(a, Value) and a.name in renamed for a in iter_values(node.args)):
            continue
        infer = lookup_op(node.op).infer
        if infer is None:
            continue
        swap = lambda v: renamed.get(v.name, v)  # noqa: E731
        try:
            before = _as_list(infer(node.args, dict(node.kwargs)))
            after = _as_list(infer(map_arg(node.args, swap), dict(map_arg(node.kwargs, swap))))
        except Exception:  # noqa: BLE001 - a rule that cannot say leaves the node as declared
            continue
        declared = [v.type for v in node.outputs]
        if declared != before or after == before or len(after) != len(declared):
            continue
        for value, new_type in zip(node.outputs, after):
            renamed[value.name] = Value(value.name, new_type)


def _as_list(result) -> list:
    return list(result) if isinstance(result, (list, tuple)) else [result]


def keep_output_strides(aten: Graph, prims: Graph) -> Graph:
    """`prims` with each output declared with the strides its ATen twin had. The ATen graph is traced
    on meta tensors, whose kernels follow eager's layout rules (TensorIterator's for pointwise ops: a
    channels-last or transposed operand's layout wins; the library's own for convolution, pooling,
    cat, clone with a memory format, `*_like`, reductions), while the prims' shape rules say
    contiguous. The lowering writes (or copies) each output into its declared layout, so users see
    eager's strides whatever op produced the output; a view of an input already has them (no copy)."""
    renamed: dict[str, Value] = {}
    inputs = {v.name for v in prims.inputs}
    for before, after in zip(aten.outputs, prims.outputs):
        if not isinstance(before, Value) or not isinstance(after, Value):
            continue
        if after.name in renamed or after.name in inputs:
            continue
        want, have = before.type, after.type
        if not isinstance(want, TensorType) or not isinstance(have, TensorType) or want.shape != have.shape:
            continue
        if want.free_symbols or want.strides == have.strides:
            continue
        if any(s < 0 for s in want.strides):
            continue  # no strided buffer steps backwards (the lowering copies such views)
        renamed[after.name] = Value(after.name, have.replace(strides=want.strides))
    if not renamed:
        return prims
    _retype_views_of(prims, renamed)
    swap = lambda v: renamed.get(v.name, v)  # noqa: E731
    nodes = tuple(
        node.replace(args=map_arg(node.args, swap), kwargs=map_arg(node.kwargs, swap),
                     outputs=tuple(swap(v) for v in node.outputs))
        for node in prims.nodes
    )
    return prims.replace(nodes=nodes, outputs=tuple(map_arg(prims.outputs, swap)))
