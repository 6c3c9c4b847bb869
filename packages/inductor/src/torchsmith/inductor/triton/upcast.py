"""Layer and batch norm in float16/bfloat16 on the GPU path: run them in float32 between conversions,
so that they decompose and fuse instead of running eager's kernels whole.

prims.decompose declines `native_layer_norm`, the batch norms (and their backward) in low precision:
no prims formula in that dtype rounds as eager does. Eager's CUDA kernels load half values, compute
the statistics and the affine output in float32 and round each output once; this pass writes exactly that as a
graph (convert the floating inputs to float32, the op in float32, convert each output back to the
dtype the graph declared). In a Triton kernel the conversions cost nothing: half loads are widened
to float32 anyway, and the final conversion is the store's rounding.
"""

from dataclasses import replace

import torch

from torchsmith.ir import Graph, GraphBuilder, Value, map_arg
from torchsmith.ir.types import TensorType

UPCAST_OPS = frozenset({
    "aten.native_layer_norm.default",
    "aten.native_layer_norm_backward.default",
    "aten._native_batch_norm_legit_no_training.default",
    "aten._native_batch_norm_legit_functional.default",
    "aten.native_batch_norm_backward.default",
})
# Batch norm in training mode updates its running statistics in place: computing it on float32
# copies would update the copies. Only its inference form (training=False) is upcast.
EVAL_ONLY_OPS = frozenset({"aten.native_batch_norm.default", "aten._native_batch_norm_legit.default"})
LOW_PRECISION = (torch.float16, torch.bfloat16)


def _low(v) -> bool:
    return isinstance(v, Value) and isinstance(v.type, TensorType) and v.type.dtype in LOW_PRECISION


def _needs_upcast(node) -> bool:
    if node.op in EVAL_ONLY_OPS:
        return node.args[5] is False and any(_low(a) for a in node.args)  # args[5]: training
    return node.op in UPCAST_OPS and any(_low(a) for a in node.args)


def upcast_half_norms(graph: Graph) -> Graph:
    """`graph` with every half-precision layer or batch norm (forward or backward) computed in float32
    between conversions; the graph itself when it has none."""
    if not any(_needs_upcast(node) for node in graph.nodes):
        return graph
    import torchsmith.prims  # noqa: F401  (registers the prims ops this graph now holds)

    builder = GraphBuilder(graph.name)
    env: dict[str, Value] = {v.name: builder.input(v.name, v.type) for v in graph.inputs}
    lookup = lambda v: env[v.name]  # noqa: E731
    for node in graph.nodes:
        args = tuple(map_arg(a, lookup) for a in node.args)
        kwargs = {k: map_arg(a, lookup) for k, a in node.kwargs}
        declared = [v.type for v in node.outputs]
        if not _needs_upcast(node):
            produced = builder.op(node.op, *args, out_type=declared, source=node.source, **kwargs)
            for v, got in zip(node.outputs, produced):
                env[v.name] = got
            continue
        wide = tuple(
            builder.op(
                "prims.convert_element_type",
                a,
                torch.float32,
                out_type=replace(a.type, dtype=torch.float32),
                source=node.source,
            )
            if _low(a)
            else a
            for a in args
        )
        wide_types = [
            replace(t, dtype=torch.float32) if isinstance(t, TensorType) and t.dtype in LOW_PRECISION else t
            for t in declared
        ]
        produced = builder.op(node.op, *wide, out_type=wide_types, source=node.source, **kwargs)
        for v, got in zip(node.outputs, produced):
            if isinstance(v.type, TensorType) and v.type.dtype != got.type.dtype:
                got = builder.op(
                    "prims.convert_element_type", got, v.type.dtype, out_type=v.type, source=node.source
                )
            env[v.name] = got
    result = builder.build(*(env[v.name] for v in graph.outputs))
    return result.replace(stamps=graph.stamps)
