"""`fuse_attention(graph)`: softmax attention written out as matmuls becomes the attention prim.

Models that spell attention by hand (transformers' "eager" attention in GPT-2 and BERT, most
research code) decompose to::

    s = bmm(reshape(clone(q)), reshape(clone(k^T)))     # (B*H, L, S)
    x = reshape(s, (B, H, L, S)) * scale + mask         # scale and mask optional
    p = exp(x - amax(x)) / sum(exp(x - amax(x)))        # softmax over the last dim
    o = bmm(reshape(p), reshape(clone(v)))              # (B*H, L, E)

This pass replaces each such chain by `prims.scaled_dot_product_attention(q, k, v, mask, False,
scale)`: a backend's fused attention kernel (flash attention on CPU) reads q, k and v where they lie
(the three head-split copies go away), never stores the (L, S) scores and probabilities, and
writes the result in the heads-merged order the out-projection reads. The values computed are the
same up to rounding, with one exception the pass guards against: a query whose keys are all masked
with -inf gives nan in the written-out softmax but 0 in the fused kernel. So a mask is accepted only
when it is built by `prims.where` from finite constants (transformers' masks use the dtype's
minimum, not -inf), and otherwise the chain is left alone. The one -inf mask taken is the causal
one, `masked_fill(~ones(L, S).tril(), -inf)` (or `where(tril, x, -inf)`), written with iotas: every
query keeps its first key, so no row is all -inf, and the chain becomes `is_causal=True`.

A chain is fused only when its intermediate values are read nowhere else (the attention weights
are not an output), with q, k, v, mask and the products in one float dtype. In float16/bfloat16
the softmax (and a scale computed in float32) sits between conversions to float32 and back; the
fused kernel, which keeps the scores in float32, computes the same values up to the rounding of
those intermediate conversions.
"""

from dataclasses import dataclass

from torchsmith.ir import Graph, GraphBuilder, Node, Value
from torchsmith.ir.names import NameGenerator
from torchsmith.ir.passes import graph_pass
from torchsmith.ir.types import TensorType
from torchsmith.prims.core import same_dim

FLOAT_DTYPES_OK = ("float32", "float64", "float16", "bfloat16")
# A conversion the chain may pass through is between float32 and float32 or a half type.
_SOFTMAX_DTYPES = {"torch.float32", "torch.float16", "torch.bfloat16"}
# Ops whose unread results are dropped after fusing (no side effects, no random draws).
_PURE = (
    "prims.clone", "prims.reshape", "prims.permute", "prims.broadcast_in_dim", "prims.iota", "prims.full",
    "prims.sub", "prims.le", "prims.where", "prims.bitwise_not",
)
# What a mask may pass through between its prims.where and the add (views and broadcasts).
MASK_VIEWS = (
    "prims.broadcast_in_dim",
    "prims.reshape",
    "prims.expand_dims",
    "prims.squeeze",
    "prims.permute",
)


@dataclass(frozen=True)
class AttentionMatch:
    """One chain: the 4-d query (B, H, L, E), transposed key (B, H, E, S) and value (B, H, S, Ev),
    the mask (already broadcast to (B, H, L, S)) or None, the scale, the nodes the chain replaces,
    and the value the fused result stands for (the final bmm's, or its reshape to 4-d)."""

    query: Value
    key_t: Value
    value: Value
    mask: Value | None
    scale: float
    replaced: frozenset[int]  # ids of the chain's nodes
    result: Value  # the value the sdpa node defines (by name)
    result_4d: bool
    is_causal: bool = False


class _Chain:
    """Reads a graph's producers and users while matching one chain."""

    def __init__(self, graph: Graph):
        self.producers = graph.producers()
        self.users = graph.users()
        self.outputs = {v.name for v in graph.outputs}

    def node(self, value, op: str | tuple[str, ...]) -> Node | None:
        """The node defining `value` if its op is `op` (or one of them)."""
        if not isinstance(value, Value):
            return None
        node = self.producers.get(value.name)
        ops = (op,) if isinstance(op, str) else op
        return node if node is not None and node.op in ops else None

    def only_in(self, value: Value, nodes: list[Node]) -> bool:
        """Whether `value` is read only by `nodes` (and is not a graph output)."""
        if value.name in self.outputs:
            return False
        ids = {id(n) for n in nodes}
        return all(id(u) in ids for u in self.users.get(value.name, []))


def _shape(value: Value) -> tuple:
    return tuple(value.type.shape)


def _is_float(value) -> bool:
    return (
        isinstance(value, Value)
        and isinstance(value.type, TensorType)
        and str(value.type.dtype).removeprefix("torch.") in FLOAT_DTYPES_OK
    )


def _name(value) -> str | None:
    return value.name if isinstance(value, Value) else None


def _same_shape(a, b) -> bool:
    return len(a) == len(b) and all(same_dim(x, y) for x, y in zip(a, b))


def _unflatten(chain: _Chain, flat: Value, nodes: list[Node]) -> Value | None:
    """The 4-d (B, H, X, Y) value whose reshape (through an optional clone) is the 3-d `flat`
    (B*H, X, Y), as matmul's expand + contiguous + view leaves it."""
    reshape = chain.node(flat, "prims.reshape")
    if reshape is None:
        return None
    source = reshape.args[0]
    t = source.type if isinstance(source, Value) else None
    if not isinstance(t, TensorType) or t.rank != 4:
        return None
    if not _same_shape((t.shape[0] * t.shape[1], t.shape[2], t.shape[3]), _shape(flat)):
        return None
    nodes.append(reshape)
    clone = chain.node(source, "prims.clone")
    if clone is not None and chain.only_in(source, [reshape]):
        nodes.append(clone)
        source = clone.args[0]
    return source


def _through_converts(chain: _Chain, value, nodes: list[Node]):
    """`value` with the float32 <-> float16/bfloat16 conversions that produce it stripped (a
    half-precision softmax or scale computes in float32); the conversions join `nodes`."""
    node = chain.node(value, "prims.convert_element_type")
    while node is not None and _is_float(node.args[0]):
        dtypes = {str(node.args[0].type.dtype), str(node.outputs[0].type.dtype)}
        if "torch.float32" not in dtypes or not dtypes <= _SOFTMAX_DTYPES:
            break
        nodes.append(node)
        value = node.args[0]
        node = chain.node(value, "prims.convert_element_type")
    return value


def _through_views(chain: _Chain, value):
    """`value` with the views and broadcasts that produce it stripped."""
    node = chain.node(value, MASK_VIEWS)
    while node is not None:
        value = node.args[0]
        node = chain.node(value, MASK_VIEWS)
    return value


def _finite_constant(chain: _Chain, arg) -> bool:
    """Whether `arg` is a finite number, or a tensor filled with one by `prims.full`."""
    if isinstance(arg, Value):
        full = chain.node(_through_views(chain, arg), "prims.full")
        if full is None:
            return False
        arg = full.args[1]
    return isinstance(arg, (int, float)) and not isinstance(arg, bool) and abs(arg) != float("inf")


def _finite_mask(chain: _Chain, mask: Value) -> bool:
    """Whether `mask` is a `prims.where` choosing between finite constants (seen through views
    and broadcasts): then no score becomes -inf, and no row of probabilities is nan."""
    where = chain.node(_through_views(chain, mask), "prims.where")
    return where is not None and all(_finite_constant(chain, b) for b in where.args[1:3])


def _softmax_input(chain: _Chain, probs: Value, nodes: list[Node]) -> Value | None:
    """x when `probs` is `exp(x - amax(x)) / sum(exp(x - amax(x)))` over the last dim of 4-d x
    (conversions around it stripped)."""
    div = chain.node(_through_converts(chain, probs, nodes), "prims.div")
    if div is None:
        return None
    exp, total_b = div.args
    if not isinstance(exp, Value):
        return None
    total_node = chain.node(total_b, "prims.broadcast_in_dim")
    exp_node = chain.node(exp, "prims.exp")
    if total_node is None or exp_node is None:
        return None
    total = chain.node(total_node.args[0], "prims.sum")
    sub = chain.node(exp_node.args[0], "prims.sub")
    if total is None or sub is None or _name(total.args[0]) != exp.name or list(total.args[1]) != [3]:
        return None
    x, max_b = sub.args
    max_node = chain.node(max_b, "prims.broadcast_in_dim")
    amax = chain.node(max_node.args[0], "prims.amax") if max_node is not None else None
    if amax is None or _name(amax.args[0]) != _name(x) or list(amax.args[1]) != [3]:
        return None
    if list(total_node.args[2]) != [0, 1, 2] or list(max_node.args[2]) != [0, 1, 2]:
        return None
    nodes += [div, total_node, exp_node, total, sub, max_node, amax]
    return _through_converts(chain, x, nodes)


def _scores(chain: _Chain, x: Value, nodes: list[Node]):
    """(bmm node, scale, mask, is_causal) when `x` is `reshape(bmm) [* scale] [+ mask]` or
    `reshape(bmm) [* scale]` with the causal -inf mask, else None."""
    mask, causal = None, False
    scores = _causal_scores(chain, x, nodes)
    if scores is not None:
        x, causal = _through_converts(chain, scores, nodes), True
    add = chain.node(x, "prims.add") if not causal else None
    if add is not None:
        for scores, other in (add.args, add.args[::-1]):
            if _is_float(other) and _same_shape(_shape(other), _shape(x)) and _finite_mask(chain, other):
                inner = _through_converts(chain, scores, [])
                if chain.node(inner, ("prims.mul", "prims.div", "prims.reshape")) is not None:
                    mask, x = other, _through_converts(chain, scores, nodes)
                    nodes.append(add)
                    break
        else:
            return None
    scale = 1.0
    scaled = chain.node(x, ("prims.mul", "prims.div"))
    if scaled is not None:
        a, b = scaled.args
        if scaled.op == "prims.mul" and isinstance(a, (int, float)):
            a, b = b, a
        if not isinstance(b, (int, float)) or isinstance(b, bool) or b == 0:
            return None
        scale = float(b) if scaled.op == "prims.mul" else 1.0 / float(b)
        nodes.append(scaled)
        x = _through_converts(chain, a, nodes)
    reshape = chain.node(x, "prims.reshape")
    bmm = chain.node(reshape.args[0], "prims.bmm") if reshape is not None else None
    if bmm is None or len(_shape(x)) != 4:
        return None
    nodes += [reshape, bmm]
    return bmm, scale, mask, causal


def _causal_scores(chain: _Chain, x: Value, nodes: list[Node]):
    """The scores `x` masks when `x` is `where(~keep, -inf, scores)` or `where(keep, scores, -inf)`
    with `keep` the causal (L, S) mask (`ones(L, S).tril()`), else None. Only the chain's own
    nodes join `nodes`: the mask's are left for dead-code removal."""
    where = chain.node(x, "prims.where")
    if where is None:
        return None
    cond, a, b = where.args
    for scores, fill, negated in ((b, a, True), (a, b, False)):
        if fill == -float("inf") and isinstance(scores, Value) and _causal_keep(chain, cond, negated):
            nodes.append(where)
            return scores
    return None


def _causal_keep(chain: _Chain, cond, negated: bool) -> bool:
    """Whether `cond` (seen through views, with one `bitwise_not` when `negated`) keeps exactly the
    keys at or before each query: `col - row <= 0` over iotas, as `ones(L, S).tril()` decomposes
    (perhaps inside `where(keep, full(True), False)`)."""
    cond = _through_views(chain, cond)
    if negated:
        node = chain.node(cond, "prims.bitwise_not")
        if node is None:
            return False
        cond = _through_views(chain, node.args[0])
    where = chain.node(cond, "prims.where")
    if where is not None:
        if where.args[2] is not False or not _all_true(chain, where.args[1]):
            return False
        cond = _through_views(chain, where.args[0])
    le = chain.node(cond, "prims.le")
    sub = chain.node(le.args[0], "prims.sub") if le is not None and le.args[1] == 0 else None
    if sub is None:
        return False
    cols, rows = (_iota_along(chain, v) for v in sub.args)
    return cols == 1 and rows == 0


def _all_true(chain: _Chain, value) -> bool:
    full = chain.node(_through_views(chain, value), "prims.full")
    return value is True or (full is not None and full.args[1] is True)


def _iota_along(chain: _Chain, value) -> int | None:
    """d when `value` is a 2-d broadcast of `iota(n, 0, 1)` along dim d, else None."""
    broadcast = chain.node(value, "prims.broadcast_in_dim")
    if broadcast is None or len(broadcast.args[1]) != 2 or len(broadcast.args[2]) != 1:
        return None
    iota = chain.node(broadcast.args[0], "prims.iota")
    if iota is None or list(iota.args[1:3]) != [0, 1]:
        return None
    return broadcast.args[2][0]


def match_attention(chain: _Chain, final: Node) -> AttentionMatch | None:
    """The attention chain ending in the `prims.bmm` node `final`, or None."""
    probs_flat, value_flat = final.args
    nodes: list[Node] = [final]
    probs = _unflatten(chain, probs_flat, nodes)
    value = _unflatten(chain, value_flat, nodes)
    if probs is None or value is None:
        return None
    x = _softmax_input(chain, probs, nodes)
    found = _scores(chain, x, nodes) if x is not None else None
    if found is None:
        return None
    bmm, scale, mask, causal = found
    query = _unflatten(chain, bmm.args[0], nodes)
    key_t = _unflatten(chain, bmm.args[1], nodes)
    if query is None or key_t is None:
        return None
    values = (query, key_t, value) + ((mask,) if mask is not None else ())
    dtypes = {v.type.dtype for v in values} | {bmm.outputs[0].type.dtype, final.outputs[0].type.dtype}
    if len(dtypes) != 1 or not _is_float(query):
        return None
    # Every value the chain computes must be read only inside it.
    inner = [v for n in nodes for v in n.outputs if n is not final]
    if not all(chain.only_in(v, nodes) for v in inner):
        return None
    result, result_4d = final.outputs[0], False
    users = chain.users.get(result.name, [])
    if len(users) == 1 and users[0].op == "prims.reshape" and result.name not in chain.outputs:
        shaped = users[0].outputs[0]
        if _same_shape(_shape(shaped), _shape(query)[:3] + _shape(value)[3:]):
            nodes.append(users[0])
            result, result_4d = shaped, True
    return AttentionMatch(
        query, key_t, value, mask, scale, frozenset(map(id, nodes)), result, result_4d, causal
    )


@graph_pass("fuse_attention", stage="prims", produces="prims graph, softmax attention as one op")
def fuse_attention(graph: Graph) -> Graph:
    """`graph` (prims) with every matched softmax-attention chain replaced by one
    `prims.scaled_dot_product_attention`; the same graph object when nothing matched. Stamped
    `fuse_attention` (a `graph_pass`: `fuse_attention.step` is its pipeline step)."""
    chain = _Chain(graph)
    matches = [m for n in graph.nodes if n.op == "prims.bmm" and (m := match_attention(chain, n))]
    if not matches:
        return graph
    replaced = set().union(*(m.replaced for m in matches))
    at_result = {m.result.name: m for m in matches}
    names = NameGenerator(v.name for v in graph.values())  # no value's name, before or after this node

    builder = GraphBuilder(graph.name)
    for v in graph.inputs:
        builder.input(v.name, v.type)
    merged = _merged_head_copies(chain, {m.result.name for m in matches if m.result_4d})
    for node in graph.nodes:
        if id(node) in merged:
            # The fused result is stored heads-last, so its heads merge without this copy: a
            # same-shape reshape (a view) keeps the value's name for its readers.
            (out,) = node.outputs
            shape = list(out.type.shape)
            builder.op("prims.reshape", node.args[0], shape, out_name=out.name, source=node.source)
            continue
        if id(node) not in replaced:
            builder.add_node(node)
            continue
        match = next((m for v in node.outputs if (m := at_result.get(v.name))), None)
        if match is None:
            continue
        key_name = names.fresh(f"{match.key_t.name}_t")
        key = builder.op("prims.permute", match.key_t, [0, 1, 3, 2], out_name=key_name, source=node.source)
        args = (match.query, key, match.value, match.mask, match.is_causal, match.scale)
        if match.result_4d:
            builder.op(
                "prims.scaled_dot_product_attention", *args, out_name=match.result.name, source=node.source
            )
        else:
            fused = builder.op("prims.scaled_dot_product_attention", *args, out_name=names.fresh("attention"),
                               source=node.source)
            shape = list(_shape(match.result))
            builder.op("prims.reshape", fused, shape, out_name=match.result.name, source=node.source)
    result = builder.build(*graph.outputs)
    # Values the chains read and nothing else now does (the head-split copies, a causal mask) go too.
    result = _drop_unused(result, {id(n) for n in graph.nodes if n.op in _PURE})
    return result.replace(stamps=graph.stamps)


def _merged_head_copies(chain: _Chain, fused: set[str]) -> set[int]:
    """Ids of the `prims.clone` nodes copying `permute(fused, [0, 2, 1, 3])` (merging the heads of
    a fused attention result back before the out-projection), when the copy is no graph output
    (whose strides users see)."""
    found = set()
    for name in fused:
        for permute in chain.users.get(name, []):
            if permute.op != "prims.permute" or list(permute.args[1]) != [0, 2, 1, 3]:
                continue
            for clone in chain.users.get(permute.outputs[0].name, []):
                if clone.op == "prims.clone" and clone.outputs[0].name not in chain.outputs:
                    found.add(id(clone))
    return found


def _drop_unused(graph: Graph, candidates: set[int]) -> Graph:
    """`graph` without the candidate nodes (pure views and copies) whose outputs nothing reads."""
    used = {v.name for v in graph.outputs}
    kept = []
    for node in reversed(graph.nodes):
        if id(node) in candidates and not any(v.name in used for v in node.outputs):
            continue
        kept.append(node)
        used.update(v.name for v in node.inputs)
    return graph.replace(nodes=tuple(reversed(kept)))
