"""mode="reduce-overhead": replay a compiled graph as a CUDA graph, so a call costs one launch
instead of one per kernel plus Python.

`cudagraphify(compiled)` returns a callable that, per input signature (shapes, strides, dtypes,
and the values of non-tensor inputs), warms the graph up once on a side stream (loading and
autotuning kernels), then records one CUDA graph reading from static copies of the inputs. Each
call copies the inputs into those static tensors, replays, and returns clones of the outputs:
the recording's outputs live in a private pool that the next replay overwrites, so handing them
out would let a later call change a tensor the user still holds (torch.compile instead returns the
pool's tensors and asks for `cudagraph_mark_step_begin`; we pay one copy per output for safety).

Graphs that cannot replay correctly run as they are, with the reason logged once on
`torchsmith.inductor.cudagraphs`: inputs the graph mutates (a replay would not write back
into the caller's tensor), CPU tensors (a CUDA graph cannot read or write them), or no CUDA.
"""

import logging
from dataclasses import dataclass

import torch

log = logging.getLogger("torchsmith.inductor.cudagraphs")


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
    static_inputs: list
    outputs: list


class CudaGraphRunner:
    """`runner(*inputs)` returns what `compiled(*inputs)` returns, by CUDA graph replay when
    `skip_reason` allows; `recordings` counts the graphs recorded, `skipped` the last reason."""

    def __init__(self, compiled, mutated_inputs=()):
        self.compiled = compiled
        self.mutated_inputs = tuple(mutated_inputs)
        self._recordings: dict[tuple, _Recording] = {}
        self._pool = None
        self.skipped: str | None = None
        self.replays = 0

    def __getattr__(self, name):
        # source, program, kernels, timings... of the wrapped graph stay reachable for reports.
        return getattr(self.compiled, name)

    @property
    def recordings(self) -> int:
        return len(self._recordings)

    def __call__(self, *inputs):
        reason = skip_reason(inputs, self.mutated_inputs)
        if reason is not None:
            if reason != self.skipped:
                log.info("CUDA graphs skipped for %s: %s", _name(self.compiled), reason)
            self.skipped = reason
            return self.compiled(*inputs)
        key = tuple(
            (tuple(x.shape), x.stride(), x.dtype, x.device) if isinstance(x, torch.Tensor) else ("value", x)
            for x in inputs
        )
        recording = self._recordings.get(key)
        if recording is None:
            recording = self._recordings[key] = self._record(inputs)
        for static, x in zip(recording.static_inputs, inputs):
            if isinstance(x, torch.Tensor) and static.data_ptr() != x.data_ptr():
                static.copy_(x)
        recording.graph.replay()
        self.replays += 1
        return [out.clone() for out in recording.outputs]

    def _record(self, inputs) -> _Recording:
        static = [
            torch.empty_strided(x.shape, x.stride(), dtype=x.dtype, device=x.device).copy_(x)
            if isinstance(x, torch.Tensor)
            else x
            for x in inputs
        ]
        # Warm up outside the recording: first launches compile kernels and autotune, which
        # synchronize and allocate, neither allowed while capturing.
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            self.compiled(*static)
        torch.cuda.current_stream().wait_stream(side)
        if self._pool is None:
            self._pool = torch.cuda.graph_pool_handle()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self._pool):
            outputs = self.compiled(*static)
        log.info(
            "recorded a CUDA graph for %s (%d recordings)", _name(self.compiled), len(self._recordings) + 1
        )
        return _Recording(graph, static, list(outputs))


def _name(compiled) -> str:
    program = getattr(compiled, "program", None)
    return getattr(program, "name", type(compiled).__name__)


def cudagraphify(compiled, mutated_inputs=()) -> CudaGraphRunner:
    """`compiled` replayed as CUDA graphs where that is safe (see the module docstring)."""
    return CudaGraphRunner(compiled, mutated_inputs)
