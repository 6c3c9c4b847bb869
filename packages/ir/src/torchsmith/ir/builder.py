"""`GraphBuilder`: the short way to write graphs in tests and passes.

    >>> b = GraphBuilder("mlp")
    >>> x = b.input("x", "f32[8, 64] cpu")
    >>> w = b.input("w", "f32[256, 64] cpu")
    >>> y = b.op("aten.mm.default", x, b.op("aten.t.default", w))
    >>> g = b.build(y)
    >>> print(g)  # doctest: +SKIP
    graph mlp(%x: f32[8, 64] cpu, %w: f32[256, 64] cpu):
      %t: f32[64, 256]{1, 64} cpu = aten.t.default(%w)
      %mm: f32[8, 256] cpu = aten.mm.default(%x, %t)
      return (%mm)

Output types come from `out_type=` when given, else from the op's `infer` rule, else by running
the op on meta tensors (which needs concrete shapes).
"""

import re

import torch

from torchsmith.ir.errors import GraphBuildError
from torchsmith.ir.graph import Graph, Node, Value, freeze_arg, iter_values, map_arg
from torchsmith.ir.names import NameGenerator
from torchsmith.ir.registry import lookup_op
from torchsmith.ir.symbolic import is_symbolic
from torchsmith.ir.types import ScalarType, SymIntType, TensorType, Type, as_type, type_of

_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def name_hint(op: str) -> str:
    """A readable value name for an op's result: `aten.addmm.default` -> `addmm`."""
    parts = op.split(".")
    base = parts[1] if parts[0] == "aten" and len(parts) == 3 else parts[-1]
    base = base.strip("_") or "v"
    return base if _NAME_RE.match(base) else "v"


class GraphBuilder:
    """Appends inputs and nodes; `build()` returns the immutable `Graph`."""

    def __init__(self, name: str = "graph"):
        self.name = name
        self._inputs: list[Value] = []
        self._nodes: list[Node] = []
        self._outputs: list[Value] = []
        self._names = NameGenerator()

    def fresh_name(self, hint: str) -> str:
        """`hint`, or `hint_1`, `hint_2`, ... whichever is still free."""
        return self._names.unused(hint if _NAME_RE.match(hint) else "v")

    def _define(self, name: str | None, hint: str, t: Type) -> Value:
        if name is None:
            name = self.fresh_name(hint)
        elif name in self._names:
            raise GraphBuildError(f"value %{name} is already defined in graph {self.name}")
        elif not _NAME_RE.match(name):
            raise GraphBuildError(f"value name {name!r} must be an identifier")
        self._names.take(name)
        return Value(name, as_type(t))

    def input(self, name: str, t) -> Value:
        """Add a graph input of type `t` (a Type or its text form, e.g. `"f32[s0, 4] cpu"`)."""
        value = self._define(name, name, t)
        self._inputs.append(value)
        return value

    def op(self, op: str, *args, out_type=None, out_name=None, source=None, **kwargs):
        """Append `op(*args, **kwargs)`; returns its Value, or a tuple for several outputs.

        `out_type` is one type (one output) or a list/tuple of types (that many outputs).
        `out_name` names the output (or a list of names).
        """
        args = tuple(freeze_arg(a) for a in args)
        frozen_kwargs = tuple((k, freeze_arg(v)) for k, v in kwargs.items())
        for v in iter_values((args, tuple(v for _, v in frozen_kwargs))):
            if v.name not in self._names:
                raise GraphBuildError(f"{op}: argument %{v.name} is not defined in graph {self.name}")
        if out_type is None:
            types, multi = infer_output_types(op, args, dict(frozen_kwargs))
        elif isinstance(out_type, (list, tuple)):
            types, multi = [as_type(t) for t in out_type], True
        else:
            types, multi = [as_type(out_type)], False
        names = out_name if isinstance(out_name, (list, tuple)) else [out_name] * len(types)
        if len(names) != len(types):
            raise GraphBuildError(f"{op}: {len(names)} output names for {len(types)} outputs")
        hint = name_hint(op)
        outputs = tuple(self._define(n, hint, t) for n, t in zip(names, types, strict=True))
        self._nodes.append(Node(op, args, frozen_kwargs, outputs, source))
        return outputs if multi else outputs[0]

    def add_node(self, node: Node) -> Node:
        """Append an existing node (for passes that copy nodes); its output names must be free."""
        for v in node.inputs:
            if v.name not in self._names:
                raise GraphBuildError(f"{node.op}: argument %{v.name} is not defined in graph {self.name}")
        for v in node.outputs:
            if v.name in self._names:
                raise GraphBuildError(f"{node.op}: output %{v.name} is already defined in graph {self.name}")
            self._names.take(v.name)
        self._nodes.append(node)
        return node

    def output(self, *values: Value) -> None:
        """Add graph outputs (may be called more than once)."""
        for v in values:
            if not isinstance(v, Value) or v.name not in self._names:
                raise GraphBuildError(f"graph output {v!r} is not a value defined in graph {self.name}")
        self._outputs.extend(values)

    def build(self, *outputs: Value) -> Graph:
        """The finished graph; `outputs`, if given, are added first."""
        self.output(*outputs)
        return Graph(self.name, tuple(self._inputs), tuple(self._nodes), tuple(self._outputs))


def infer_output_types(op: str, args: tuple, kwargs: dict) -> tuple[list[Type], bool]:
    """Output types of `op` on these arguments: ([types], returns_several)."""
    opdef = lookup_op(op)
    if opdef.infer is not None:
        result = opdef.infer(args, kwargs)
        if isinstance(result, (list, tuple)):
            return [as_type(t) for t in result], True
        return [as_type(result)], False
    return _infer_by_meta(op, opdef.eager, args, kwargs)


def _meta_of(value: Value, op: str):
    t = value.type
    if isinstance(t, TensorType):
        if any(is_symbolic(d) for d in t.shape + t.strides):
            raise GraphBuildError(
                f"{op}: cannot infer output types from symbolic input %{value.name}: {t}; pass out_type="
            )
        return torch.empty_strided(t.shape, t.strides, dtype=t.dtype, device="meta")
    if isinstance(t, SymIntType) and not is_symbolic(t.expr):
        return t.expr
    raise GraphBuildError(f"{op}: cannot infer output types from %{value.name}: {t}; pass out_type=")


def _infer_by_meta(op: str, eager, args: tuple, kwargs: dict) -> tuple[list[Type], bool]:
    from torchsmith.ir.interpreter import thaw

    tensor_inputs = [
        v.type for v in iter_values((args, tuple(kwargs.values()))) if isinstance(v.type, TensorType)
    ]
    device = kwargs.get("device", tensor_inputs[0].device if tensor_inputs else "cpu")
    wants_grad = torch.is_grad_enabled() and any(t.requires_grad for t in tensor_inputs)
    meta_args = thaw(map_arg(args, lambda v: _meta_of(v, op)))
    meta_kwargs = {k: thaw(map_arg(v, lambda v: _meta_of(v, op))) for k, v in kwargs.items()}
    if "device" in meta_kwargs:
        meta_kwargs["device"] = "meta"
    try:
        with torch.no_grad():
            result = eager(*meta_args, **meta_kwargs)
    except Exception as e:
        raise GraphBuildError(
            f"{op}: could not infer output types on meta tensors ({e}); pass out_type="
        ) from e

    def to_type(r) -> Type:
        if isinstance(r, torch.Tensor):
            t = TensorType.of(r)
            grad = wants_grad and (r.dtype.is_floating_point or r.dtype.is_complex)
            return t.replace(device=str(torch.device(device)), requires_grad=grad, strides=t.strides)
        if isinstance(r, int) and not isinstance(r, bool):
            return SymIntType(r)
        if isinstance(r, (bool, float, complex)) or r is None:
            return ScalarType.of(r)
        return type_of(r)

    if isinstance(result, (list, tuple)):
        return [to_type(r) for r in result], True
    return [to_type(result)], False
