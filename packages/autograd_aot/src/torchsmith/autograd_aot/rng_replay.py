"""The random-number state a compiled forward drew from, kept so that a second run draws the same.

A differentiable backward (`double_backward.py`) runs the captured graph again with autograd
recording. Random ops in it (dropout, `rand_like`, `bernoulli`, `randn`) must see the numbers the
compiled forward saw, or the second-order gradient belongs to another mask. Compiled forwards call
torch's random kernels in the graph's order on the global generators, as eager does, so the state of
those generators before the forward, set again before the re-run, replays the forward's numbers. The
state after the forward is kept too: the re-run must leave the generators exactly there, which shows
it drew as many numbers as the forward did.

Generators are per device: the CPU generator, and one per CUDA device. Programs whose random ops
draw elsewhere, or from counter-based streams the global generators do not drive (`prims.philox_*`
after `decompose(..., philox=True)`), cannot be replayed (`unreplayable_random_op`).
"""

from collections.abc import Callable
from dataclasses import dataclass

import torch

from torchsmith.ir import Graph, TensorType, draws_random

_REPLAYABLE_DEVICES = ("cpu", "cuda", "meta")  # meta tensors draw nothing


def is_random(op: str) -> bool:
    """Whether an ATen op draws from the global random generators."""
    return draws_random(op)


def random_ops(graph: Graph) -> list:
    """The nodes of an ATen graph that draw random numbers, in graph order."""
    return [node for node in graph.nodes if is_random(node.op)]


def random_devices(graph: Graph) -> tuple[torch.device, ...]:
    """The devices whose generators the random ops of `graph` draw from."""
    devices = []
    for node in random_ops(graph):
        for device in _node_devices(node):
            if device.type != "meta" and device not in devices:
                devices.append(device)
    return tuple(devices)


def _node_devices(node) -> list[torch.device]:
    """The devices of a random node's outputs (an op with no tensor output draws on its first tensor
    argument's device)."""
    types = [v.type for v in node.outputs if isinstance(v.type, TensorType)]
    types = types or [v.type for v in node.inputs if isinstance(v.type, TensorType)]
    return [_normalized(torch.device(t.device)) for t in types]


def _normalized(device: torch.device) -> torch.device:
    if device.type == "cuda" and device.index is None:
        return torch.device("cuda", torch.cuda.current_device())
    return device


def unreplayable_random_op(graphs: list[Graph]) -> str | None:
    """Why the random numbers of these lowered graphs cannot be drawn again by an eager re-run, as
    `op: reason`; None when they can (or nothing is random)."""
    for graph in graphs:
        for node in graph.nodes:
            if node.op.startswith("prims.philox"):
                return (f"{node.op}: it draws from a counter-based stream (decompose(..., philox=True)), "
                        "not from the torch generators an eager re-run draws from")
            if is_random(node.op):
                other = [d for d in _node_devices(node) if d.type not in _REPLAYABLE_DEVICES]
                if other:
                    return f"{node.op}: it draws on {other[0]}, a device whose generator state is not saved"
    return None


@dataclass(frozen=True, slots=True)
class RngState:
    """The states of the generators of some devices, in `devices` order."""

    devices: tuple[torch.device, ...]
    states: tuple[torch.Tensor, ...]

    def same_as(self, other: "RngState") -> bool:
        return self.devices == other.devices and all(
            torch.equal(a, b) for a, b in zip(self.states, other.states)
        )


def save_rng_state(devices: tuple[torch.device, ...]) -> RngState:
    """The current states of the generators of `devices`."""
    return RngState(devices, tuple(_get(d) for d in devices))


def _get(device: torch.device) -> torch.Tensor:
    if device.type == "cuda":
        return torch.cuda.get_rng_state(device)
    return torch.get_rng_state()


def _set(device: torch.device, state: torch.Tensor) -> None:
    if device.type == "cuda":
        torch.cuda.set_rng_state(state, device)
    else:
        torch.set_rng_state(state)


def replay(before: RngState, run: Callable[[], object]) -> tuple[object, RngState]:
    """`run()` with the generators set to `before`; returns its result and the states it left. The
    caller's generator states are restored afterwards: the re-run draws nothing of its own."""
    current = save_rng_state(before.devices)
    for device, state in zip(before.devices, before.states):
        _set(device, state)
    try:
        result = run()
        return result, save_rng_state(before.devices)
    finally:
        for device, state in zip(current.devices, current.states):
            _set(device, state)
