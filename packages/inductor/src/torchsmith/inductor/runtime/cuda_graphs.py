"""mode="reduce-overhead": replay a compiled graph as a CUDA graph, so a call costs one launch
instead of one per kernel plus Python.

`cudagraphify(compiled)` returns a callable that keeps recordings per input signature (shapes,
strides, dtypes, and the values of non-tensor inputs). The first call of a signature runs the
graph as it is (it compiles and autotunes kernels, and shows which inputs come at which address);
the second records one CUDA graph. In that recording an input that came at the same address in
both calls (a parameter, a buffer, a preallocated KV cache) is read where it lies; the others are
copied into static tensors the graph reads. A replay checks the in-place inputs' addresses and
records again, with the moved inputs copied, when one changed; so a decode step reads its weights
and caches without copying them, and pays one small copy for its token and position.

Outputs are clones of the recording's: those live in a private pool that the next replay
overwrites, so handing them out would let a later call change a tensor the user still holds
(torch.compile instead returns the pool's tensors and asks for `cudagraph_mark_step_begin`; we pay
one copy per output for safety). `written_back={output: input}` names outputs the caller copies
back into an input (functionalized in-place updates): the recording writes them into that input
itself and the call returns the input, so the caller's `input.copy_(input)` costs nothing and no
copy of the whole tensor is made.

`lend_outputs(positions)` names outputs only the caller's backward reads (a training forward's saved
activations): those are returned as the recording's own memory, not copied. A replay overwrites that
memory, so it is made only while no earlier result lent out is still held (autograd lets saved
tensors go after the backward); while one is (two forwards before a backward), the call runs the
graph without replaying, into fresh memory. A graph recorded with lent tensors among its inputs
(the backward) reads them in place: they come at the same address every step.

A graph about to be recorded stops reusing values it computed from unchanging inputs on earlier
calls (`input_derived`): the recording holds those kernels, so a replay after a parameter changed
in place computes them from its new values.

Graphs that cannot replay correctly run as they are, with the reason logged once on
`torchsmith.inductor.cudagraphs`: inputs the graph mutates itself (a replay would write only its
static copies), CPU tensors (a CUDA graph cannot read or write them), or no CUDA.
"""

import logging
from dataclasses import dataclass

import torch

log = logging.getLogger("torchsmith.inductor.cudagraphs")

# Recordings per input signature whose inputs read in place sit at other addresses; past this
# many, a recording copies every tensor input and serves any address.
MAX_ADDRESS_VARIANTS = 4
# Storages that recordings lend out (their own memory, at one address for as long as they live):
# another graph reading one (a backward reading its forward's saved activations) reads it in place
# from its first recording on, though the previous call passed other tensors. A stale entry only
# makes an input read in place, which `_Recording.serves` checks on every call.
_LENT_STORAGES: set[int] = set()


def skip_reason(inputs, mutated_inputs=()) -> str | None:
    """Why a graph with these inputs must not be replayed as a CUDA graph, or None."""
    if mutated_inputs:
        return f"the graph mutates inputs {sorted(mutated_inputs)}; a replay writes only its static copies"
    if not torch.cuda.is_available():
        return "CUDA is not available"
    tensors = [(k, x) for k, x in enumerate(inputs) if isinstance(x, torch.Tensor)]
    for k, x in tensors:
        if x.device.type != "cuda":
            return f"input {k} is a {x.device.type} tensor; a CUDA graph only reads CUDA memory"
    if not tensors:
        return "the graph has no CUDA tensor inputs"
    return None


@dataclass
class _Recording:
    graph: "torch.cuda.CUDAGraph"
    in_place: tuple  # (position, address) of each input the graph reads where it lies
    copied: tuple  # (position, static tensor) of each input copied before a replay
    outputs: list  # the recording's outputs; None where the output is written back into an input
    lent: tuple  # (position, uses of its storage with none lent out) of each output returned as it is

    def __post_init__(self):
        self.lent_positions = frozenset(j for j, _ in self.lent)

    def serves(self, inputs) -> bool:
        return all(inputs[k].data_ptr() == address for k, address in self.in_place)

    def lent_out_held(self) -> bool:
        """Whether a tensor an earlier replay lent out still reads the recording's memory."""
        return any(_uses(self.outputs[j]) > idle for j, idle in self.lent)


def _uses(tensor: torch.Tensor) -> int:
    """How many tensors (and storage objects) hold `tensor`'s storage."""
    return torch._C._storage_Use_Count(tensor.untyped_storage()._cdata)


@dataclass
class _Signature:
    """What one input signature has seen: the addresses of its last recorded call (its first call's
    at first), its recordings, and whether CUDA graphs serve it at all."""

    addresses: tuple
    recordings: list
    skipped: str | None  # why these inputs run without CUDA graphs (skip_reason), or None


def _addresses(inputs) -> tuple:
    return tuple(x.data_ptr() if isinstance(x, torch.Tensor) else None for x in inputs)


class CudaGraphRunner:
    """`runner(*inputs)` returns what `compiled(*inputs)` returns, by CUDA graph replay when
    `skip_reason` allows; `recordings` counts the graphs recorded, `replays` the calls served by
    one, `skipped` the last reason for running without."""

    def __init__(self, compiled, mutated_inputs=(), written_back=None):
        self.compiled = compiled
        self.mutated_inputs = tuple(mutated_inputs)
        self.written_back = dict(written_back or {})
        self.lent = frozenset()
        self._signatures: dict[tuple, _Signature] = {}
        self._pool = None
        self.skipped: str | None = None
        self.replays = 0

    def __getattr__(self, name):
        # source, program, kernels, timings... of the wrapped graph stay reachable for reports.
        if name == "compiled":  # not set yet (copying): no recursion
            raise AttributeError(name)
        return getattr(self.compiled, name)

    def write_back_into_inputs(self, written_back: dict) -> None:
        """From now on output `j` of `written_back={j: k}` is the new value of input `k` that the
        caller copies back: recordings write it into input `k` and calls return that input."""
        self.written_back = dict(written_back)
        self._signatures.clear()
        inner = getattr(self.compiled, "write_back_into_inputs", None)
        if inner is not None:  # the graph itself may then compute them in the inputs
            inner(written_back)

    def lend_outputs(self, positions) -> None:
        """Return the outputs at `positions` as the recording's own memory instead of copies (see the
        module docstring): outputs nothing but the caller's backward reads."""
        self.lent = frozenset(positions)
        self._signatures.clear()

    @property
    def recordings(self) -> int:
        return sum(len(s.recordings) for s in self._signatures.values())

    @property
    def signatures(self) -> list:
        """What each input signature has seen (tests read its recordings)."""
        return list(self._signatures.values())

    def __call__(self, *inputs):
        key = tuple(
            (x.shape, x.stride(), x.dtype, x.device) if isinstance(x, torch.Tensor) else ("value", x)
            for x in inputs
        )
        signature = self._signatures.get(key)
        if signature is None:
            reason = skip_reason(inputs, self.mutated_inputs)
            self._signatures[key] = _Signature(_addresses(inputs), [], reason)
            if reason is not None:
                log.info("CUDA graphs skipped for %s: %s", _name(self.compiled), reason)
                self.skipped = reason
            return self.compiled(*inputs)
        if signature.skipped is not None:
            self.skipped = signature.skipped
            return self.compiled(*inputs)
        recording = next((r for r in signature.recordings if r.serves(inputs)), None)
        if recording is None:
            recording = self._record(inputs, signature)
            signature.recordings.append(recording)
        elif recording.lent and recording.lent_out_held():
            return self.compiled(*inputs)  # a replay would overwrite a result still held
        for k, static in recording.copied:
            static.copy_(inputs[k])
        recording.graph.replay()
        self.replays += 1
        lent = recording.lent_positions
        return [inputs[self.written_back[j]] if out is None else out.detach() if j in lent else out.clone()
                for j, out in enumerate(recording.outputs)]

    def _record(self, inputs, signature: _Signature) -> _Recording:
        addresses = _addresses(inputs)
        stable = len(signature.recordings) < MAX_ADDRESS_VARIANTS
        written = set(self.written_back.values())
        in_place, copied, graph_inputs = [], [], list(inputs)
        for k, x in enumerate(inputs):
            if not isinstance(x, torch.Tensor):
                continue
            # An input written back must be the caller's own tensor: the recording writes into it.
            lent = x.untyped_storage().data_ptr() in _LENT_STORAGES
            if k in written or (stable and (lent or addresses[k] == signature.addresses[k])):
                in_place.append((k, x.data_ptr()))
            else:
                static = torch.empty_strided(x.shape, x.stride(), dtype=x.dtype, device=x.device)
                copied.append((k, static.copy_(x)))
                graph_inputs[k] = static
        signature.addresses = addresses
        stop_keeping = getattr(self.compiled, "stop_keeping_input_derived", None)
        if stop_keeping is not None:  # the recording must compute what a call may reuse
            stop_keeping()
        # Warm up on a side stream outside the recording: library handles (cuBLAS workspaces) are
        # made on first use in a stream, which a recording does not allow.
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            self.compiled(*graph_inputs)
        torch.cuda.current_stream().wait_stream(side)
        if self._pool is None:
            self._pool = torch.cuda.graph_pool_handle()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self._pool):
            outputs = list(self.compiled(*graph_inputs))
            written_back = self._writable(inputs, outputs)
            for j, k in written_back.items():
                inputs[k].copy_(outputs[j])
                outputs[j] = None
        log.info(
            "recorded a CUDA graph for %s (%d inputs read in place, %d copied; %d recordings)",
            _name(self.compiled), len(in_place), len(copied), self.recordings + 1,
        )
        return _Recording(graph, tuple(in_place), tuple(copied), outputs, self._lendable(inputs, outputs))

    def _lendable(self, inputs, outputs) -> tuple:
        """(position, idle uses) of the outputs to lend out: those named by `lend_outputs` whose
        memory is the recording's own (an output sharing an input's memory is copied as before)."""
        held = {x.untyped_storage().data_ptr() for x in inputs if isinstance(x, torch.Tensor)}
        lendable = [j for j in self.lent if j < len(outputs) and isinstance(outputs[j], torch.Tensor)]
        lent = tuple((j, _uses(outputs[j])) for j in sorted(lendable)
                     if outputs[j].untyped_storage().data_ptr() not in held)
        _LENT_STORAGES.update(outputs[j].untyped_storage().data_ptr() for j, _ in lent)
        return lent

    def _writable(self, inputs, outputs) -> dict:
        """`written_back`, or nothing when another output shares memory with an input written
        into: that output is read after the replay, and must still hold what the graph computed."""
        written = {inputs[k].untyped_storage().data_ptr() for k in self.written_back.values()}
        for j, out in enumerate(outputs):
            if j not in self.written_back and isinstance(out, torch.Tensor):
                if out.untyped_storage().data_ptr() in written:
                    log.info("%s: output %d shares memory with an input the graph writes back into; "
                             "the caller copies it back instead", _name(self.compiled), j)
                    return {}
        return self.written_back


def _name(compiled) -> str:
    program = getattr(compiled, "program", None)
    return getattr(program, "name", type(compiled).__name__)


def cudagraphify(compiled, mutated_inputs=(), written_back=None) -> CudaGraphRunner:
    """`compiled` replayed as CUDA graphs where that is safe (see the module docstring)."""
    return CudaGraphRunner(compiled, mutated_inputs, written_back)
