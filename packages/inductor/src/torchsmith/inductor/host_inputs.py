"""Host tensors a device graph reads as device tensors.

Eager PyTorch lets a cpu tensor meet a GPU graph in two ways: moved there (`cache_length.to(x.device)`,
as transformers' StaticCache does on its first update) or read as a scalar (`x * torch.tensor(2.0)`,
a 0-dim cpu tensor). A compiled graph runs on one device, so such an input is moved to the graph's
device when the compiled code is called, and the graph reads it there. That is only the same program
when nothing the graph makes from the input stays on the cpu: every node reading it puts its results
on the graph's device, and the input is neither mutated (an in-place op's result is its input, on
the cpu) nor returned.
"""

from dataclasses import dataclass

import torch

from torchsmith.ir import Graph, TensorType, Value
from torchsmith.ir.graph import iter_values


@dataclass(frozen=True)
class MovedInputs:
    """`graph` with the host inputs at `positions` retyped to `device`, where callers move them."""

    graph: Graph
    positions: tuple[int, ...]
    device: str


def _accelerator(graph: Graph) -> str | None:
    """The one non-cpu device `graph` holds tensors on, if there is exactly one."""
    devices = {v.type.device for v in graph.values() if isinstance(v.type, TensorType)} - {"cpu"}
    return next(iter(devices)) if len(devices) == 1 else None


def _movable(value: Value, users: list, returned: set[str], device: str) -> bool:
    if value.name in returned:
        return False
    return all(
        isinstance(out.type, TensorType) and out.type.device == device
        for node in users for out in node.outputs
    )


def move_host_inputs(graph: Graph) -> MovedInputs:
    """The cpu tensor inputs of a graph on one accelerator that can be moved there at the call (see
    the module docstring), and the graph reading them on the accelerator; no positions when there
    is nothing to move (a cpu graph, or a host input the graph keeps on the cpu)."""
    device = _accelerator(graph)
    if device is None:
        return MovedInputs(graph, (), "cpu")
    users = graph.users()
    returned = {v.name for v in iter_values(graph.outputs)}
    types, positions = {}, []
    for k, value in enumerate(graph.inputs):
        t = value.type
        if isinstance(t, TensorType) and t.device == "cpu" and _movable(
            value, users.get(value.name, []), returned, device
        ):
            types[value.name] = t.replace(device=device)
            positions.append(k)
    return MovedInputs(graph.with_input_types(types), tuple(positions), device)


def moved(inputs, positions, device) -> list:
    """`inputs` with those at `positions` copied to `device`."""
    inputs = list(inputs)
    for k in positions:
        if isinstance(inputs[k], torch.Tensor):
            inputs[k] = inputs[k].to(device)
    return inputs
