"""Making sample tensors and one-node graphs from samples."""

from dataclasses import dataclass, field

import torch

from torchsmith.ir import ArgList, Graph, GraphBuilder
from torchsmith.ir.types import TensorType

ALL_DTYPES = (
    torch.float32,
    torch.float64,
    torch.bfloat16,
    torch.float16,
    torch.int64,
    torch.int32,
    torch.bool,
)
FLOAT_DTYPES = (torch.float32, torch.float64, torch.bfloat16, torch.float16)
INT_DTYPES = (torch.int64, torch.int32)


@dataclass(frozen=True)
class Sample:
    """One call of an op: positional and keyword arguments (tensors, scalars, lists) and a note
    saying what the sample exercises."""

    args: tuple
    kwargs: dict = field(default_factory=dict)
    note: str = ""

    def __repr__(self) -> str:
        def describe(a):
            if isinstance(a, torch.Tensor):
                layout = "" if a.is_contiguous() else " noncontig"
                return f"{str(a.dtype).removeprefix('torch.')}{list(a.shape)}{layout}"
            if isinstance(a, (list, tuple)):
                return "[" + ", ".join(describe(x) for x in a) + "]"
            return repr(a)

        kwargs = "".join(f", {k}={describe(v)}" for k, v in self.kwargs.items())
        return f"({', '.join(describe(a) for a in self.args)}{kwargs}){' ' + self.note if self.note else ''}"

    @property
    def tensors(self) -> list[torch.Tensor]:
        found = []

        def walk(a):
            if isinstance(a, torch.Tensor):
                found.append(a)
            elif isinstance(a, (list, tuple)):
                for x in a:
                    walk(x)

        for a in list(self.args) + list(self.kwargs.values()):
            walk(a)
        return found


def make_tensor(
    shape, dtype, *, seed: int, low: float = -3.0, high: float = 3.0, noncontiguous: bool = False
):
    """A deterministic random tensor; integers are drawn from [low, high], bools are fair coins.
    `noncontiguous` returns a transposed view with the same shape and values drawn likewise."""
    generator = torch.Generator().manual_seed(seed)
    shape = tuple(shape)
    if noncontiguous and len(shape) >= 2:
        base_shape = shape[:-2] + (shape[-1], shape[-2])
        return make_tensor(base_shape, dtype, seed=seed, low=low, high=high).transpose(-1, -2)
    if noncontiguous and len(shape) == 1:
        return make_tensor((shape[0] * 2,), dtype, seed=seed, low=low, high=high)[::2]
    if dtype == torch.bool:
        return torch.rand(shape, generator=generator) < 0.5
    if dtype.is_floating_point:
        values = torch.rand(shape, generator=generator, dtype=torch.float64) * (high - low) + low
        return values.to(dtype)
    return torch.randint(int(low), int(high) + 1, shape, generator=generator, dtype=torch.int64).to(dtype)


def one_node_graph(op: str, sample: Sample, *, symbolic: bool = False) -> tuple[Graph, list[torch.Tensor]]:
    """A graph with one input per sample tensor and one `op` node; returns (graph, its inputs).
    `symbolic=True` gives every dim of size >= 2 one symbol per distinct size (as dynamo's duck
    sizing does); output types come from the concrete graph with the same sizes symbolized."""
    import sympy

    from torchsmith.ir.symbolic import symbol

    concrete_outputs = one_node_graph(op, sample)[0].outputs if symbolic else None

    builder = GraphBuilder(op.replace(".", "_"))
    inputs: list[torch.Tensor] = []
    symbols: dict[int, sympy.Symbol] = {}

    def freeze(a):
        if isinstance(a, torch.Tensor):
            t = TensorType.of(a).replace(requires_grad=False, strides=tuple(a.stride()))
            if symbolic:
                a = a.contiguous()  # symbolic strides are contiguous ones
                shape = tuple(
                    symbols.setdefault(s, symbol(f"s{len(symbols)}")) if s >= 2 else s for s in a.shape
                )
                t = TensorType.make(shape, a.dtype, str(a.device))
            inputs.append(a)
            return builder.input(f"x{len(inputs) - 1}", t)
        if isinstance(a, list):
            return ArgList(freeze(x) for x in a)
        if isinstance(a, tuple):
            return tuple(freeze(x) for x in a)
        return a

    args = [freeze(a) for a in sample.args]
    kwargs = {k: freeze(v) for k, v in sample.kwargs.items()}
    out_type = None
    if symbolic:
        out_type = [
            TensorType.make(
                [symbols.get(s, s) if isinstance(s, int) and s >= 2 else s for s in v.type.shape],
                v.type.dtype,
                v.type.device,
            )
            if isinstance(v.type, TensorType)
            else v.type
            for v in concrete_outputs
        ]
        out_type = out_type if len(out_type) > 1 else out_type[0]
    result = builder.op(op, *args, out_type=out_type, **kwargs)
    outputs = result if isinstance(result, tuple) else (result,)
    return builder.build(*outputs), inputs
