"""`attention_forms(graph)`: attention prims rewritten to the forms fused kernels run fastest.

Two rewrites of `prims.scaled_dot_product_attention` nodes, each made only where it provably
computes the same values:

- A constant causal mask becomes `is_causal=True`. transformers builds its causal mask from
  `arange`s (masking_utils), never from the model's inputs, and passes `where(mask, 0, -inf)`: a
  mask the attention kernel must read (and which keeps flash attention away on the GPU). When the
  mask depends on no graph input it is computed here, once, and when it is exactly
  `tril(ones(L, S))` (0 kept, -inf dropped, every batch and head), the kernel's own causal masking
  replaces it.
- Grouped-query attention without copies. Llama-style models repeat each key/value head for the
  query heads that share it (transformers' `repeat_kv`): `expand` along a new group dim, then a
  `reshape` that copies, twice per layer. When both key and value are such copies, the attention
  reads the un-repeated tensors (the prim takes fewer key heads than query heads, as torch's
  `enable_gqa`). Done on the CPU, and on a GPU where torch's flash kernel runs it (half precision,
  no mask); other GPU kernels would repeat the heads themselves.

The nodes left unread (the mask, the copies) are dropped when pure.
"""

import torch

from torchsmith.ir import Graph, Node, Value, interpret
from torchsmith.ir.passes import graph_pass
from torchsmith.ir.types import TensorType
from torchsmith.prims.common_subexpressions import is_pure
from torchsmith.prims.core import same_dim

SDPA = "prims.scaled_dot_product_attention"
# Largest constant mask computed at compile time to compare it with a causal one (elements).
MAX_MASK_ELEMENTS = 1 << 26
_FLASH_DTYPES = (torch.float16, torch.bfloat16)
_FLASH_HEAD_DIM = 256


def _tensor_type(value) -> TensorType | None:
    return value.type if isinstance(value, Value) and isinstance(value.type, TensorType) else None


def _numel(shape) -> int:
    count = 1
    for d in shape:
        count *= d
    return count


def _static(shape) -> bool:
    return all(isinstance(d, int) for d in shape)


class _Reader:
    """A graph's producers, and which values depend on no graph input."""

    def __init__(self, graph: Graph):
        self.graph = graph
        self.producers = graph.producers()
        self._constant: dict[str, bool] = {v.name: False for v in graph.inputs}

    def node(self, value, op: str) -> Node | None:
        node = self.producers.get(value.name) if isinstance(value, Value) else None
        return node if node is not None and node.op == op else None

    def constant(self, value: Value) -> bool:
        """Whether `value` is computed by pure nodes from no graph input."""
        known = self._constant.get(value.name)
        if known is not None:
            return known
        stack = [value]
        while stack:  # iterative: a mask's cone may be deep
            v = stack.pop()
            if v.name in self._constant:
                continue
            node = self.producers.get(v.name)
            if node is None or not is_pure(node.op):
                self._constant[v.name] = False
                continue
            pending = [i for i in node.inputs if i.name not in self._constant]
            if pending:
                stack.append(v)
                stack.extend(pending)
                continue
            self._constant[v.name] = all(self._constant[i.name] for i in node.inputs)
        return self._constant[value.name]

    def evaluate(self, value: Value):
        """The tensor a constant `value` holds, computed with the reference interpreter."""
        needed, stack = set(), [value]
        while stack:
            v = stack.pop()
            if v.name in needed:
                continue
            needed.add(v.name)
            stack.extend(self.producers[v.name].inputs)
        nodes = tuple(n for n in self.graph.nodes if any(o.name in needed for o in n.outputs))
        cone = Graph(f"{self.graph.name}_mask", (), nodes, (value,))
        return interpret(cone)[0]


def _is_causal_mask(reader: _Reader, mask: Value, length, keys) -> bool:
    """Whether `mask` (an additive float mask) is a constant equal to 0 on and below the diagonal
    of each (L, S) slice and -inf above it."""
    t = _tensor_type(mask)
    if t is None or not _static(t.shape) or not isinstance(length, int) or not isinstance(keys, int):
        return False
    if _numel(t.shape) > MAX_MASK_ELEMENTS or not reader.constant(mask):
        return False
    try:
        value = reader.evaluate(mask)
    except Exception:  # noqa: BLE001 - a mask we cannot compute is left as it is
        return False
    if tuple(value.shape[-2:]) != (length, keys):
        return False
    keep = torch.ones(length, keys, dtype=torch.bool, device=value.device).tril()
    causal = torch.zeros(length, keys, dtype=value.dtype, device=value.device)
    causal = causal.masked_fill(~keep, float("-inf"))
    return torch.equal(value, causal.expand(value.shape))


def _unrepeated(reader: _Reader, value: Value, heads) -> tuple[Value, int] | None:
    """(x, group) when `value` is `x` (B, KV, S, E) with each head repeated `group` times in a row,
    as `x[:, :, None].expand(B, KV, group, S, E).reshape(B, KV * group, S, E)` decomposes, with
    `KV * group == heads`; else None."""
    reshape = reader.node(value, "prims.reshape")
    if reshape is None or _tensor_type(value) is None or _tensor_type(value).rank != 4:
        return None
    source = reshape.args[0]
    clone = reader.node(source, "prims.clone")
    if clone is not None:
        source = clone.args[0]
    broadcast = reader.node(source, "prims.broadcast_in_dim")
    if broadcast is None:
        return None
    x, shape, dims = broadcast.args
    if len(shape) != 5 or not _static(shape):
        return None
    expanded = reader.node(x, "prims.expand_dims")
    if list(dims) == [0, 1, 3, 4]:
        pass
    elif list(dims) == [0, 1, 2, 3, 4] and expanded is not None and list(expanded.args[1]) == [2]:
        x = expanded.args[0]
    else:
        return None
    batch, kv, group, keys, width = shape
    tx = _tensor_type(x)
    out = _tensor_type(value).shape
    if tx is None or tuple(tx.shape) != (batch, kv, keys, width) or not same_dim(heads, kv * group):
        return None
    if not all(same_dim(a, b) for a, b in zip(out, (batch, kv * group, keys, width))):
        return None
    return x, group


def _runs_grouped(query: TensorType, mask) -> bool:
    """Whether torch's attention kernel for these arguments takes grouped key/value heads itself:
    every CPU kernel; on a GPU the flash kernel (half precision, no mask, head dim <= 256)."""
    if torch.device(query.device).type == "cpu":
        return True
    return mask is None and query.dtype in _FLASH_DTYPES and query.shape[-1] <= _FLASH_HEAD_DIM


def _rewrite(reader: _Reader, node: Node) -> Node:
    query, key, value, mask, is_causal, scale = node.args
    tq = _tensor_type(query)
    if tq is None or tq.rank != 4:
        return node
    keys = _tensor_type(key).shape[2]
    if mask is not None and not is_causal and _is_causal_mask(reader, mask, tq.shape[2], keys):
        mask, is_causal = None, True
    if _runs_grouped(tq, mask):
        grouped_key = _unrepeated(reader, key, tq.shape[1])
        grouped_value = _unrepeated(reader, value, tq.shape[1])
        if grouped_key and grouped_value and grouped_key[1] == grouped_value[1]:
            key, value = grouped_key[0], grouped_value[0]
    args = (query, key, value, mask, is_causal, scale)
    return node if args == node.args else node.replace(args=args)


@graph_pass(
    "attention_forms", stage="prims", produces="prims graph, causal masks and grouped heads in attention"
)
def attention_forms(graph: Graph) -> Graph:
    """`graph` with its attention prims reading constant causal masks as `is_causal` and grouped
    key/value heads un-repeated (see the module docstring); the same graph object when nothing
    changed."""
    if not any(n.op == SDPA for n in graph.nodes):
        return graph
    reader = _Reader(graph)
    nodes = tuple(_rewrite(reader, n) if n.op == SDPA else n for n in graph.nodes)
    if all(a is b for a, b in zip(nodes, graph.nodes)):
        return graph
    return _drop_dead_pure(graph.replace(nodes=nodes))


def _drop_dead_pure(graph: Graph) -> Graph:
    """`graph` without the pure nodes whose outputs nothing reads."""
    used = {v.name for v in graph.outputs}
    kept = []
    for node in reversed(graph.nodes):
        if is_pure(node.op) and node.outputs and not any(v.name in used for v in node.outputs):
            continue
        kept.append(node)
        used.update(v.name for v in node.inputs)
    return graph.replace(nodes=tuple(reversed(kept)))
