"""Records a torch-level torchsmith.ir graph of one eager run of a module, for benchmarks.

It stands in for capture where capture cannot yet take a program in one graph (`transformers`
models): the module runs once eagerly under a `TorchFunctionMode` that records every torch
function and Tensor method call that makes or mutates tensors into a `GraphBuilder`. Parameters
and buffers become graph inputs, as capture lifts them. Python values read off tensors (sizes,
`bool(t)`) are baked in, so the graph is specialized to these inputs, like a capture under guards.

    >>> graph, data, params, buffers, constants = record_graph("mlp", module, [x, labels])  # doctest: +SKIP
    >>> interpret(graph, *data, *params, *buffers, *constants)  # doctest: +SKIP
"""

from __future__ import annotations

import torch
from torch.overrides import TorchFunctionMode

import torchsmith.ir as ir
from torchsmith.ir import GraphBuilder, ScalarType, TensorType, op_name_of


class RecordError(Exception):
    """A call the recorder cannot express in the IR."""


_INPLACE_NONE = {"__setitem__"}  # mutating methods that return None


class _Recorder(TorchFunctionMode):
    """Records every torch call that produces (or mutates) tensors into a GraphBuilder."""

    def __init__(self, builder: GraphBuilder, known: dict[int, tuple[torch.Tensor, ir.Value]]):
        super().__init__()
        self.builder, self.known = builder, known
        self.lifted: list[torch.Tensor] = []  # tensors met that no recorded call produced

    def value_of(self, t: torch.Tensor) -> ir.Value:
        entry = self.known.get(id(t))
        if entry is None:  # e.g. a tensor a library made before the run: a constant input
            t_type = TensorType.of(t).replace(requires_grad=False)
            value = self.builder.input(f"const{len(self.lifted)}", t_type)
            self.lifted.append(t.detach().clone())
            entry = self.known[id(t)] = (t, value)
        return entry[1]

    def to_ir(self, arg):
        if isinstance(arg, torch.Tensor):
            return self.value_of(arg)
        if isinstance(arg, (list, tuple)):
            items = [self.to_ir(a) for a in arg]
            return items if isinstance(arg, list) else tuple(items)
        if isinstance(arg, slice):
            return slice(self.to_ir(arg.start), self.to_ir(arg.stop), self.to_ir(arg.step))
        return arg

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        result = func(*args, **kwargs)
        name = getattr(func, "__name__", "")
        tensors = _flat_tensors(result)
        if not tensors and name not in _INPLACE_NONE:
            return result  # sizes, dtypes, bools: baked into the graph as constants
        try:
            op = op_name_of(func)
        except ir.IRError as e:
            raise RecordError(f"cannot record {func!r}: {e}") from None
        ir_args = [self.to_ir(a) for a in args]
        ir_kwargs = {k: self.to_ir(v) for k, v in kwargs.items()}
        if not tensors:
            out_type = ScalarType("none")
        elif isinstance(result, torch.Tensor):
            out_type = TensorType.of(result)
        else:
            out_type = [_output_type(op, r) for r in result]
        outputs = self.builder.op(op, *ir_args, out_type=out_type, **ir_kwargs)
        if isinstance(result, torch.Tensor):
            self.known[id(result)] = (result, outputs)
        elif tensors:
            for r, v in zip(result, outputs):
                if isinstance(r, torch.Tensor):
                    self.known[id(r)] = (r, v)
        return result


def _output_type(op: str, r):
    if isinstance(r, torch.Tensor):
        return TensorType.of(r)
    if r is None:  # multi_head_attention_forward's weights when not asked for
        return ScalarType("none")
    raise RecordError(f"cannot record {op}: it returns a {type(r).__name__} beside tensors")


def _flat_tensors(result) -> list[torch.Tensor]:
    if isinstance(result, torch.Tensor):
        return [result]
    if isinstance(result, (tuple, list)):
        return [r for r in result if isinstance(r, torch.Tensor)]
    return []


def record_graph(name: str, module: torch.nn.Module, data: list[torch.Tensor]):
    """The torch-level graph of `module(*data)` (which must return a scalar loss) and its inputs:
    the data, then the parameters, then the buffers, then constants met on the way."""
    builder = GraphBuilder(name)
    known: dict[int, tuple[torch.Tensor, ir.Value]] = {}
    params = [p for _, p in module.named_parameters()]
    buffers = [b for _, b in module.named_buffers()]
    for i, t in enumerate(data):
        known[id(t)] = (t, builder.input(f"data{i}", TensorType.of(t)))
    for i, t in enumerate(params):
        known[id(t)] = (t, builder.input(f"param{i}", TensorType.of(t)))
    for i, t in enumerate(buffers):
        known[id(t)] = (t, builder.input(f"buffer{i}", TensorType.of(t)))
    saved_buffers = [b.detach().clone() for b in buffers]  # the run updates BatchNorm's stats
    recorder = _Recorder(builder, known)
    with recorder:
        loss = module(*data)
    with torch.no_grad():
        for b, old in zip(buffers, saved_buffers):
            b.copy_(old)
    graph = builder.build(recorder.value_of(loss))
    return graph, list(data), params, buffers, recorder.lifted
