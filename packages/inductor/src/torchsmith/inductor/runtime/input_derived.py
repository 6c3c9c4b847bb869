"""Values a GPU graph computes from its unchanging inputs alone, kept between calls.

An inference graph of a convolution network recomputes, on every call, values that depend on its
parameters and buffers only: BatchNorm folded into convolution weights, weights copied to the
channels-last layout. Each is a kernel launch, and on the host those launches cost more than the
GPU spends on them. The straight-line form (`triton_straight`) runs such steps once and keeps
their results while the inputs they read stay the same:

- at the call that writes the straight-line form, the inputs that are a module's parameters or
  buffers (`module_state`: the capture names inputs by where it read them) and are the same tensor
  objects, at the same version and address, as in the first call are taken as unchanging; a
  caller's own tensors are not, even when passed again unchanged (keeping values derived from
  them would hold memory the size of an activation between calls, and skip work that callers
  with fresh inputs pay for); the kernel steps reading only those (or what such steps wrote) form
  the kept block, unless a step writes a graph output (the caller may change it) or a buffer
  another step writes;
- a call reuses the kept results when each of those inputs is still the same object, holds the
  same memory and has the same version counter (torch bumps it on every in-place change:
  optimizer steps, `load_state_dict`, `copy_`), else it runs the block and keeps its results;
- after `GIVE_UP` calls in a row that found the inputs changed (a training loop), the block runs
  every call without keeping anything;
- a graph recorded as a CUDA graph (mode="reduce-overhead") stops keeping first: a replay must
  compute the values from the parameters as they are then.

Writes through `.data` (`p.data.mul_(2)`) bypass the version counter, as they bypass autograd's
checks: a value kept from before such a write is stale. `TORCHSMITH_KEEP_INPUT_DERIVED=0` turns
the cache off.
"""

import os
import weakref

from torchsmith.inductor.loop_ir.program import TensorView

# Calls in a row whose unchanging inputs changed, after which a graph stops keeping results.
GIVE_UP = 8


def enabled() -> bool:
    """Whether graphs keep input-derived values (`TORCHSMITH_KEEP_INPUT_DERIVED`, on by default)."""
    return os.environ.get("TORCHSMITH_KEEP_INPUT_DERIVED", "1") != "0"


def input_state(inputs) -> list:
    """What `unchanged_inputs` compares later: per tensor input, a reference, version and address."""
    return [_state(x) for x in inputs]


def _state(x):
    try:
        return weakref.ref(x), x._version, x.data_ptr()
    except (TypeError, RuntimeError):  # not a tensor, or an inference tensor (no version counter)
        return None


def module_state(name: str) -> bool:
    """Whether the graph input `name` is a module's parameter or buffer: the capture names an input
    after its source, `self._modules['fc']._parameters['weight']` as
    `self__modules_fc__parameters_weight`."""
    return "__parameters_" in name or "__buffers_" in name


def unchanged_inputs(before: list, inputs) -> set[int]:
    """The positions of `inputs` that are the tensors `before` (an `input_state`) saw, unchanged."""
    same = set()
    for k, (seen, x) in enumerate(zip(before, inputs)):
        if seen is not None and seen[0]() is x and _state(x)[1:] == seen[1:]:
            same.add(k)
    return same


def kept_steps(program, steps: list, unchanging: set[int]) -> list[int]:
    """Indices of the kernel steps of `steps` (the graph's `(kind, what, extra)` list, in run order)
    computed from the inputs at `unchanging` positions alone, whose results may be kept. (An input
    the graph updates in place changes version every call: nothing read from it is kept for long.)"""
    known = {b.name for b in program.inputs if b.position in unchanging}
    # Outputs are handed out, and a step writing a graph input (a folded cache write) has an effect
    # every call rather than a result: neither is kept.
    not_kept = output_buffers(program) | {b.name for b in program.inputs}
    writes = [step_accesses(step)[1] for step in steps]
    written_twice = {n for k, names in enumerate(writes) for n in names
                     if any(n in other for j, other in enumerate(writes) if j != k)}
    kept = []
    for k, (kind, what, _) in enumerate(steps):
        if kind != "kernel" or not set(what.spec.reads) <= known:
            continue
        if writes[k] & (not_kept | written_twice):
            continue
        kept.append(k)
        known |= writes[k]
    return kept


def step_accesses(step) -> tuple[set[str], set[str]]:
    """(buffers read, buffers written) of one `(kind, what, extra)` step: a kernel launch, an extern
    call, a folded copy's alias, or (max-autotune) a matmul template launched with its consumer's
    kernel as epilogue."""
    kind, what, extra = step
    if kind == "extern":
        return {a.buffer for a in what.args}, {what.name}
    if kind == "alias":  # a folded copy (triton.folded_copy): the target, as the call's result
        return {extra}, {what.name}
    reads, writes = set(what.spec.reads), set(what.spec.writes)
    if kind == "epilogue":
        reads |= {a.buffer for a in extra.mm.args}
        writes.add(extra.mm.name)
    return reads, writes


def output_buffers(program) -> set[str]:
    """The buffers the graph's outputs view."""
    return {view.buffer for view in program.outputs if isinstance(view, TensorView)}


def read_after(steps: list, kept: list[int], output_buffers: set[str]) -> list[str]:
    """The buffers written by the `kept` steps that another step or an output reads: what a call
    that skips the kept steps takes from the cache."""
    kept_set = set(kept)
    written = [n for k in kept for n in steps[k][1].spec.writes]
    needed = set(output_buffers)
    for k, step in enumerate(steps):
        if k not in kept_set:
            needed |= step_accesses(step)[0]
    return [n for n in written if n in needed]


def read_inputs(program, steps: list, kept: list[int]) -> list[int]:
    """The positions of the graph inputs the `kept` steps read."""
    read = {n for k in kept for n in steps[k][1].spec.reads}
    return sorted(b.position for b in program.inputs if b.name in read)


class InputDerivedCache:
    """The kept results of one graph's kept block, valid while `positions`' inputs are unchanged;
    `switch[0]` false: nothing is kept or reused (shared with the graph, which clears it)."""

    def __init__(self, positions: list[int], switch: list):
        self.positions = positions
        self._switch = switch
        self._key = None
        self._values = None
        self._misses = 0

    def lookup(self, inputs):
        """The kept values, or None where an input they came from changed (or nothing is kept)."""
        key = self._key
        if key is None or not self._switch[0]:
            return None
        for k, (ref, version, pointer) in zip(self.positions, key):
            x = inputs[k]
            if ref() is not x or x._version != version or x.data_ptr() != pointer:
                self._key = self._values = None
                return None
        self._misses = 0
        return self._values

    def keep(self, inputs, values: tuple) -> None:
        """Keep `values`, computed from `inputs` this call (after a `lookup` that found none)."""
        if self._misses >= GIVE_UP or not self._switch[0]:
            self._key = self._values = None
            return
        self._misses += 1
        key = [_state(inputs[k]) for k in self.positions]
        if any(state is None for state in key):
            self._misses = GIVE_UP
            return
        self._key, self._values = key, values
