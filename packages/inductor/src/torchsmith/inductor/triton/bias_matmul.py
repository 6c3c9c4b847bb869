"""Half-precision linear layers as one library call on the GPU path (a `Graph -> Graph` pass over
the prims graph): `aten.addmm` decomposes, in float16/bfloat16, to

    convert(convert(mm(a, b), float32) + broadcast(convert(bias, float32)), half)

which rounds the product to half precision, adds the bias in float32 and rounds again. Eager's
`nn.Linear` calls `addmm`, whose cuBLAS epilogue adds the bias to the float32 accumulator and rounds
once; this pass puts that call back (`aten.addmm.default(bias, a, b)`, an extern call), so the values
are eager's and a bias add that no other kernel would take in (a query, key or value projection
feeding attention) is no kernel of its own. Under max-autotune the pass stays off: the Triton matmul
template fuses the bias with the rest of the epilogue there.
"""

import torch

from torchsmith.ir import Graph, GraphBuilder, Value
from torchsmith.ir.types import TensorType

HALF = (torch.float16, torch.bfloat16)


def _tensor(value) -> TensorType | None:
    return value.type if isinstance(value, Value) and isinstance(value.type, TensorType) else None


class _Reader:
    def __init__(self, graph: Graph):
        self.producers = graph.producers()
        self.users = graph.users()
        self.outputs = {v.name for v in graph.outputs if isinstance(v, Value)}

    def node(self, value, op: str):
        node = self.producers.get(value.name) if isinstance(value, Value) else None
        return node if node is not None and node.op == op else None

    def only_read_by(self, value: Value, node) -> bool:
        users = self.users.get(value.name, [])
        return value.name not in self.outputs and len(users) == 1 and users[0] is node


def _upcast_of(reader: _Reader, value, dtype):
    """The half value `value` converts to float32, or None."""
    node = reader.node(value, "prims.convert_element_type")
    source = node.args[0] if node is not None else None
    t = _tensor(source)
    if t is None or t.dtype != dtype or node.outputs[0].type.dtype != torch.float32:
        return None
    return node, source


def match_bias_matmul(reader: _Reader, node):
    """(bias, a, b, replaced nodes) when `node` is the final conversion of a half-precision mm plus
    a 1-d bias of its dtype, the intermediate values read nowhere else; else None."""
    if node.op != "prims.convert_element_type":
        return None
    out = node.outputs[0].type
    add = reader.node(node.args[0], "prims.add")
    if out.dtype not in HALF or out.rank != 2 or not out.is_contiguous or add is None:
        return None
    if not reader.only_read_by(add.outputs[0], node):
        return None
    for product, bias in (add.args, add.args[::-1]):
        up = _upcast_of(reader, product, out.dtype)
        mm = reader.node(up[1], "prims.mm") if up is not None else None
        if mm is None or not reader.only_read_by(up[1], up[0]):
            continue
        if not reader.only_read_by(up[0].outputs[0], add):
            continue
        broadcast = reader.node(bias, "prims.broadcast_in_dim")
        if broadcast is None or list(broadcast.args[2]) != [1]:
            continue
        bias_up = _upcast_of(reader, broadcast.args[0], out.dtype)
        if bias_up is None or _tensor(bias_up[1]).rank != 1:
            continue
        return bias_up[1], mm.args[0], mm.args[1], {id(mm), id(up[0]), id(add)}
    return None


def bias_matmuls(graph: Graph) -> Graph:
    """`graph` with every half-precision mm + bias (as addmm decomposes) as one `aten.addmm`; the
    graph itself when it has none. Nodes only the rewritten ones read are left for the lowering's
    dead-buffer removal."""
    reader = _Reader(graph)
    matches = {id(n): m for n in graph.nodes if (m := match_bias_matmul(reader, n))}
    if not matches:
        return graph
    replaced = set().union(*(m[3] for m in matches.values()))
    builder = GraphBuilder(graph.name)
    for v in graph.inputs:
        builder.input(v.name, v.type)
    for node in graph.nodes:
        if id(node) in replaced:
            continue
        match = matches.get(id(node))
        if match is None:
            builder.add_node(node)
            continue
        (out,) = node.outputs
        builder.op("aten.addmm.default", *match[:3], out_name=out.name, out_type=out.type, source=node.source)
    return builder.build(*graph.outputs).replace(stamps=graph.stamps)
