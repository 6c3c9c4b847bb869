"""Inlining of pointwise producers: a `LoopProgram -> LoopProgram` pass, the first half of fusion.

A `ComputedBuffer` with a `Pointwise` body that no graph output and no extern call reads is written
into the expressions of its consumers instead of memory: `load(exp, 1024*i0 + r0)` becomes
`exp(sub(load(x, 1024*i0 + r0), load(amax, i0)))`. The flat load index is split back into the
producer's per-dim indices (`index_math.split_index`), so every index stays affine.

It refuses (and records why) when that would cost more than it saves:
- the producer's value is computed once per load site, so an expensive producer read at several
  sites (cost x sites > MAX_DUPLICATED_OPS) stays a buffer; sibling consumers that read it at the
  same element of the same loops, with all their other inputs ready before the first of them and
  each of them kept in memory (a graph output or a library call's input: a GELU's erf term read by
  its output and by its derivative), count as one site: the scheduler runs them in one loop, whose
  code computes a repeated subexpression once. A sibling that could itself be inlined further (into
  a consumer after a matmul, say) would carry the producer into another kernel, and a chain of such
  producers (a residual stream) would be recomputed from its start in every layer;
- a consumer that reads it broadcast (a smaller producer, e.g. a row statistic read per element)
  would recompute it per element; it stays a buffer (the scheduler puts it in the consumer's kernel).
  A caller may allow a cheap producer computed from graph inputs alone (BatchNorm's
  `1 / sqrt(running_var + eps)` read per channel) to be recomputed per element: on a GPU its own
  kernel costs a launch, while the memory-bound consumer has arithmetic to spare;
- a load whose index does not split into per-dim affine indices (reshapes across dims) stays a load;
- a producer that gathers (`Indirect`) stays a buffer: its index check runs once per element.
"""

from dataclasses import replace

import sympy

from torchsmith.inductor.fusion.scheduler import FusionDecision, log_decision
from torchsmith.inductor.loop_ir.index_math import count_ops, distinct_loads, split_index, variable_ranges
from torchsmith.inductor.loop_ir.program import (
    ComputedBuffer,
    Expr,
    ExternCall,
    IndexValue,
    Indirect,
    Load,
    LoopProgram,
    Op,
    Pointwise,
    index_vars,
    loads,
    reduction_vars,
    substitute,
)
from torchsmith.inductor.loop_ir.simplify import simplify
from torchsmith.ir.symbolic import format_dim

# A producer computed from loop indices alone (a causal mask: iota, subtract, compare) is inlined even
# where a consumer reads it broadcast, up to this cost: a few integer vector ops per element cost about
# what loading its stored value does, and its kernel, buffer and memory traffic go away.
MAX_INDEX_ONLY_OPS = 4
# A producer read at several sites is recomputed at each: allowed while cost x sites stays this small
# (index_math.count_ops: 1 per arithmetic op, 4 per library call). softmax's exp(x - max), read by the
# sum and by the division, costs 5 x 2 and stays a buffer: its kernel stores it once per row.
MAX_DUPLICATED_OPS = 8


def replace_loads(expr: Expr, fn) -> Expr:
    """`expr` with every `Load` replaced by `fn(load)` (which returns an expression)."""
    if isinstance(expr, Load):
        return fn(expr)
    if isinstance(expr, Op):
        return Op(expr.op, tuple(replace_loads(a, fn) for a in expr.args), expr.dtype)
    if isinstance(expr, Indirect):
        return Indirect(expr.var, replace_loads(expr.value, fn), expr.size, replace_loads(expr.body, fn))
    return expr


def _has_indirect(expr: Expr) -> bool:
    if isinstance(expr, Indirect):
        return True
    return isinstance(expr, Op) and any(_has_indirect(a) for a in expr.args)


def _with_value(buffer: ComputedBuffer, value: Expr) -> ComputedBuffer:
    return replace(buffer, body=replace(buffer.body, value=simplify(value)))


class _NotFlat(Exception):
    pass


def _flat_value(producer: ComputedBuffer, offset) -> Expr | None:
    """The producer's value at storage `offset` when every load in it reads at `alpha * (its own flat
    offset) + c` (an elementwise chain over tensors of its layout): then a consumer that reads it
    through a reshape (`8*i0 + r0` into a [4, 6, 8] buffer) needs no per-dim split. None otherwise."""
    layout = producer.layout
    own = index_vars(len(layout.shape))
    real = [(v, s) for v, s, d in zip(own, layout.strides, layout.shape) if d != 1]
    if not real:
        return None
    unit = {v: 0 for v, d in zip(own, layout.shape) if d == 1}
    store = sympy.expand(sum((v * s for v, s in real), sympy.Integer(0)))
    last, last_stride = real[-1]

    def at_offset(load: Load) -> Expr:
        index = sympy.expand(sympy.sympify(load.index).xreplace(unit))
        alpha = sympy.cancel(index.coeff(last, 1) / last_stride)
        rest = sympy.expand(index - alpha * store)
        if alpha.free_symbols & set(own) or rest.free_symbols & set(own) or sympy.fraction(alpha)[1] != 1:
            raise _NotFlat
        return Load(load.buffer, sympy.expand(alpha * offset + rest), load.dtype)

    def walk(expr: Expr) -> Expr:
        if isinstance(expr, Load):
            return at_offset(expr)
        if isinstance(expr, Op):
            return Op(expr.op, tuple(walk(a) for a in expr.args), expr.dtype)
        if isinstance(expr, IndexValue) and sympy.sympify(expr.expr).free_symbols & set(own):
            raise _NotFlat
        if isinstance(expr, Indirect):
            raise _NotFlat
        return expr

    try:
        return walk(producer.body.value)
    except _NotFlat:
        return None


def _gathers_along_innermost(value: Expr, consumer: ComputedBuffer) -> bool:
    """Whether an indirect index in `value` (the producer's value as `consumer` reads it) depends on
    the consumer's innermost loop variable. One that does not (an embedding row chosen per token and
    read along the hidden dim) is computed once per row of that loop, like any invariant load."""
    body = consumer.body
    reduction_ranges = getattr(body, "reduction_ranges", ())
    if reduction_ranges:
        innermost = reduction_vars(len(reduction_ranges))[-1]
    elif body.ranges:
        innermost = index_vars(len(body.ranges))[-1]
    else:
        return False

    def symbols(expr: Expr) -> set:
        found = set()
        if isinstance(expr, Load):
            found |= sympy.sympify(expr.index).free_symbols
        elif isinstance(expr, IndexValue):
            found |= sympy.sympify(expr.expr).free_symbols
        for part in getattr(expr, "args", ()) if isinstance(expr, Op) else ():
            found |= symbols(part)
        if isinstance(expr, Indirect):
            found |= symbols(expr.value) | symbols(expr.body)
        return found

    def walk(expr: Expr) -> bool:
        if isinstance(expr, Indirect):
            return innermost in symbols(expr.value) or walk(expr.body)
        return isinstance(expr, Op) and any(walk(a) for a in expr.args)

    return walk(value)


def _value_at(producer: ComputedBuffer, load: Load, ranges) -> Expr | None:
    """The producer's value where `load` reads it: by per-dim split, else by flat offset; None when
    neither keeps the indices affine."""
    layout = producer.layout
    split = split_index(load.index, layout.shape, layout.strides, ranges)
    if split is not None:
        return substitute(producer.body.value, dict(zip(index_vars(len(layout.shape)), split)))
    return _flat_value(producer, load.index)


def _one_shared_site(producer: ComputedBuffer, consumers, position: dict[str, int], kept: set[str]) -> bool:
    """Whether the `consumers` of `producer` read it as siblings of one loop: pointwise over the same
    ranges, each kept in memory (`kept`: graph outputs and library call inputs, never inlined), each
    at one load site, all at the same index, and every other buffer they read computed before the
    first of them (so the scheduler can fuse them there; `position`: program order)."""
    if len(consumers) < 2 or not all(isinstance(c.body, Pointwise) and c.name in kept for c in consumers):
        return False
    if len({tuple(c.body.ranges) for c in consumers}) != 1:
        return False
    sites = {tuple(distinct_loads(c.body.value, producer.name)) for c in consumers}
    if len(sites) != 1 or len(next(iter(sites))) != 1:
        return False
    first = min(position[c.name] for c in consumers)
    return all(
        position.get(name, -1) < first for c in consumers for name in _reads(c) if name != producer.name
    )


def _refusal(
    producer: ComputedBuffer,
    consumers,
    reads_elsewhere: list[str],
    shared_site: bool = False,
    broadcast_ops: int = 0,
) -> str | None:
    """Why `producer` must stay a buffer, or None when it can be inlined into all `consumers`
    (`shared_site`: they read it as siblings of one loop, `_one_shared_site`; `broadcast_ops`: the
    cost up to which the producer may be recomputed per element where a consumer reads it broadcast)."""
    if reads_elsewhere:
        return f"read by {', '.join(reads_elsewhere)}, which need it in memory"
    gathers = _has_indirect(producer.body.value)
    layout = producer.layout
    ops = count_ops(producer.body.value)
    cheap_everywhere = ops <= broadcast_ops
    sites = 0
    for consumer in consumers:
        ranges = variable_ranges(consumer)
        for load in distinct_loads(consumer.body.value, producer.name):
            sites += 1
            value = _value_at(producer, load, ranges)
            if value is None:
                return (
                    f"{consumer.name} reads it at {format_dim(load.index)}, which does not split into "
                    f"per-dim affine indices of {list(map(format_dim, layout.shape))}"
                )
            if gathers and _gathers_along_innermost(value, consumer):
                return (
                    f"it gathers through an indirect index that changes along {consumer.name}'s innermost "
                    "loop: inlined, the index would be loaded and checked once per element"
                )
            used = sympy.sympify(load.index).free_symbols
            broadcast = [v for v, size in ranges.items() if size != 1 and v not in used]
            index_only = not loads(producer.body.value) and ops <= MAX_INDEX_ONLY_OPS
            # A gather of one row per index (an embedding lookup) is a load at a computed row:
            # read per element it costs what reading it back from a buffer would.
            lookup = gathers and ops <= 1
            if broadcast and ops and not index_only and not lookup and not cheap_everywhere:
                along = ", ".join(sorted(map(str, broadcast)))
                return (
                    f"{consumer.name} reads it broadcast along {along}: inlined, its ops (cost {ops}) would "
                    "run once per element instead of once per value"
                )
    if shared_site:
        sites = 1
    if sites > 1 and ops * sites > MAX_DUPLICATED_OPS:
        return (
            f"cost {ops} x {sites} load sites > {MAX_DUPLICATED_OPS}: recomputing it costs more than storing "
            "it once (in a fused kernel, a row stays in cache)"
        )
    return None


def _inline_into(consumer: ComputedBuffer, producer: ComputedBuffer) -> ComputedBuffer:
    ranges = variable_ranges(consumer)

    def value_at(load: Load) -> Expr:
        if load.buffer != producer.name:
            return load
        value = _value_at(producer, load, ranges)
        assert value is not None, (producer.name, load)  # _refusal checked every load site
        return value

    return _with_value(consumer, replace_loads(consumer.body.value, value_at))


def _reads(buffer) -> set[str]:
    if isinstance(buffer, ExternCall):
        return {arg.buffer for arg in buffer.args}
    return {load.buffer for load in loads(buffer.body.value)}


def inline_pointwise(
    program: LoopProgram, broadcast_input_ops: int = 0
) -> tuple[LoopProgram, list[FusionDecision]]:
    """`program` with cheap pointwise producers computed inside their consumers, and one decision
    (taken or refused, with the reason) per producer and consumer. A producer that reads graph
    inputs only and costs at most `broadcast_input_ops` is inlined into consumers that read it
    broadcast too."""
    input_names = {b.name for b in program.inputs}
    # name -> buffer as rewritten so far; no-op ops (iota's `* 1 + 0`) dropped first, so that they
    # count for nothing in inlining costs.
    current = {
        b.name: _with_value(b, b.body.value) if isinstance(b, ComputedBuffer) else b for b in program.buffers
    }
    order = [b.name for b in program.buffers]
    position = {name: k for k, name in enumerate(order)}
    readers: dict[str, list[str]] = {}  # name -> the buffers reading it, in program order
    for b in program.buffers:
        for name in sorted(_reads(b)):
            readers.setdefault(name, []).append(b.name)
    decisions: list[FusionDecision] = []
    outputs = {view.buffer for view in program.outputs}
    extern_inputs = set().union(*(_reads(b) for b in program.buffers if isinstance(b, ExternCall)))
    kept = outputs | extern_inputs
    removed = set()
    for name in order:
        producer = current[name]
        if not isinstance(producer, ComputedBuffer) or not isinstance(producer.body, Pointwise):
            continue
        users = [current[n] for n in readers.get(name, ())]
        consumers = [u for u in users if isinstance(u, ComputedBuffer)]
        elsewhere = ["a graph output"] if name in outputs else []
        elsewhere += [f"extern call {u.name} ({u.kernel})" for u in users if isinstance(u, ExternCall)]
        if not consumers:
            continue
        from_inputs = _reads(producer) <= input_names
        broadcast_ops = broadcast_input_ops if from_inputs else 0
        reason = _refusal(producer, consumers, elsewhere, broadcast_ops=broadcast_ops)
        # Refused for its load sites, it may still be inlined into siblings of one loop.
        shared = (reason is not None and not elsewhere
                  and _one_shared_site(producer, consumers, position, kept)
                  and _refusal(producer, consumers, elsewhere, True, broadcast_ops) is None)
        if shared:
            reason = None
        taken = reason is None
        if taken:
            ops = count_ops(producer.body.value)
            reason = f"its ops (cost {ops}) run in {len(consumers)} consumer(s) instead of a store and loads"
            if shared:
                reason += ", computed once in their shared loop"
        for consumer in consumers:
            decision = FusionDecision("inline", name, consumer.name, taken, reason)
            decisions.append(decision)
            log_decision(decision)
        if not taken:
            continue
        removed.add(name)
        for consumer in consumers:
            current[consumer.name] = _inline_into(consumer, producer)
        # The consumers now read what the producer read.
        for source in _reads(producer):
            names = readers.setdefault(source, [])
            names.remove(name)
            names.extend(c.name for c in consumers if c.name not in names)
            names.sort(key=order.index)
    buffers = tuple(current[n] for n in order if n not in removed)
    return replace(program, buffers=buffers), decisions
