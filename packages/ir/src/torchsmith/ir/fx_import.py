"""The fx -> IR direction of torchsmith.ir.fx: `FxImporter` walks an fx graph once, in order.

Kept apart from fx.py because typing fx nodes (metadata, example run, inference) is its own concern.
"""

import builtins
import operator
import re

import sympy
import torch
import torch.fx

from torchsmith.ir.builder import infer_output_types
from torchsmith.ir.errors import FxConversionError, GraphBuildError, IRError
from torchsmith.ir.fx import (
    META_CONSTANT,
    META_NAME,
    META_OP,
    META_SOURCE,
    META_STAMPS,
    META_SYM_EXPR,
    META_TYPE,
    fx_dim,
)
from torchsmith.ir.graph import ArgList, Graph, Node, Value, freeze_arg
from torchsmith.ir.registry import lookup_op, op_name_of, registered_ops
from torchsmith.ir.types import ScalarType, SymIntType, TensorType, Type, as_type

_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_STACK_LINE_RE = re.compile(r'File "([^"]+)", line (\d+)')


def fetch_attribute(gm: torch.fx.GraphModule, fx_node: torch.fx.Node):
    """The object a `get_attr` node reads (`layer.weight` walks submodules)."""
    obj = gm
    for part in fx_node.target.split("."):
        if not hasattr(obj, part):
            raise FxConversionError(f"fx node %{fx_node.name} reads {fx_node.target!r}: the module lacks it")
        obj = getattr(obj, part)
    return obj


def run_example(gm: torch.fx.GraphModule, example_inputs) -> dict[torch.fx.Node, object]:
    """Run the fx graph node by node on `example_inputs`; returns each node's value."""
    if isinstance(example_inputs, torch.Tensor):
        raise FxConversionError("example_inputs is one tensor; pass a tuple of the forward() arguments: (x,)")
    inputs = list(example_inputs)
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    if len(inputs) > len(placeholders):
        raise FxConversionError(f"{len(inputs)} example inputs for {len(placeholders)} fx placeholders")
    env: dict[torch.fx.Node, object] = {}
    fetch = lambda arg: torch.fx.node.map_arg(arg, env.__getitem__)
    for fx_node in gm.graph.nodes:
        try:
            if fx_node.op == "placeholder":
                if inputs:
                    env[fx_node] = inputs.pop(0)
                elif fx_node.args:  # a default value
                    env[fx_node] = fx_node.args[0]
                else:
                    raise FxConversionError(f"no example input for placeholder {fx_node.target!r}")
            elif fx_node.op == "get_attr":
                env[fx_node] = fetch_attribute(gm, fx_node)
            elif fx_node.op == "call_function":
                env[fx_node] = fx_node.target(*fetch(fx_node.args), **fetch(fx_node.kwargs))
            elif fx_node.op == "call_method":
                self_arg, *rest = fetch(fx_node.args)
                env[fx_node] = getattr(self_arg, fx_node.target)(*rest, **fetch(fx_node.kwargs))
            elif fx_node.op == "call_module":
                env[fx_node] = gm.get_submodule(fx_node.target)(*fetch(fx_node.args), **fetch(fx_node.kwargs))
        except FxConversionError:
            raise
        except Exception as e:
            raise FxConversionError(
                f"running fx node {fx_node.format_node()} on the example inputs: {type(e).__name__}: {e}"
            ) from e
    return env


def types_of_runtime(value) -> tuple[list[Type], bool]:
    """([types], several?) of a value seen at run time or in meta["val"]."""
    if isinstance(value, (list, tuple)):  # torch.Size included
        types = [types_of_runtime(v) for v in value]
        if any(multi for _, multi in types):
            raise FxConversionError(f"a nested sequence {value!r} has no IR type; flatten it")
        return [t[0] for t, _ in types], True
    if isinstance(value, torch.Tensor):
        shape = tuple(fx_dim(d) for d in value.shape)
        strides = tuple(fx_dim(d) for d in value.stride())
        return [TensorType(shape, value.dtype, str(value.device), strides, value.requires_grad)], False
    if isinstance(value, (int, torch.SymInt)) and not isinstance(value, bool):
        return [SymIntType(fx_dim(value))], False
    if value is None or isinstance(value, (bool, float, complex)):
        return [ScalarType.of(value)], False
    raise FxConversionError(f"a value of type {type(value).__name__} has no IR type")


def _source_of(fx_node: torch.fx.Node) -> str | None:
    if META_SOURCE in fx_node.meta:
        return fx_node.meta[META_SOURCE]
    found = _STACK_LINE_RE.findall(fx_node.stack_trace or "")
    return f"{found[-1][0]}:{found[-1][1]}" if found else None


class FxImporter:
    """One conversion: `FxImporter(gm, example_inputs, lift_attributes).convert(name)`."""

    def __init__(self, gm: torch.fx.GraphModule, example_inputs, lift_attributes: bool):
        self.gm = gm
        self.lift_attributes = lift_attributes
        self.runtime = run_example(gm, example_inputs) if example_inputs is not None else {}
        # env maps an fx node to a Value, a tuple/ArgList of Values (several outputs) or a sympy expr.
        self.env: dict[torch.fx.Node, object] = {}
        self.inputs: list[Value] = []
        self.attribute_inputs: dict[str, Value] = {}
        self.nodes: list[Node] = []
        self.outputs: list[Value] = []
        self.used: set[str] = set()
        # Names fx nodes ask for: fresh names must avoid them so a later node keeps its own.
        self.wanted = {fx_node.meta.get(META_NAME, fx_node.name) for fx_node in gm.graph.nodes}

    def convert(self, name: str | None) -> Graph:
        for fx_node in self.gm.graph.nodes:
            try:
                self._convert_node(fx_node)
            except FxConversionError:
                raise
            except IRError as e:
                raise FxConversionError(f"fx node {fx_node.format_node()}: {type(e).__name__}: {e}") from e
        graph_name = name or type(self.gm).__name__
        if not _NAME_RE.match(graph_name):
            graph_name = "graph"
        stamps = tuple(self.gm.meta.get(META_STAMPS, ()))
        inputs = tuple(self.inputs) + tuple(self.attribute_inputs.values())
        return Graph(graph_name, inputs, tuple(self.nodes), tuple(self.outputs), stamps)

    def _claim(self, preferred: str) -> str:
        """`preferred` if it is a free identifier, else a fresh name like it."""
        base = preferred if _NAME_RE.match(preferred) else "v"
        if base not in self.used and (base == preferred):
            self.used.add(base)
            return base
        k = 1
        while f"{base}_{k}" in self.used or f"{base}_{k}" in self.wanted:
            k += 1
        self.used.add(f"{base}_{k}")
        return f"{base}_{k}"

    def _convert_node(self, fx_node: torch.fx.Node) -> None:
        op = fx_node.op
        if op == "placeholder":
            types, multi = self._types(fx_node, None, (), {})
            if multi:
                raise FxConversionError(f"placeholder {fx_node.target!r} is a sequence; pass its items")
            value = Value(self._claim(fx_node.meta.get(META_NAME, fx_node.target)), types[0])
            self.inputs.append(value)
            self.env[fx_node] = value
        elif op == "get_attr":
            self.env[fx_node] = self._attribute(fx_node)
        elif op in ("call_function", "call_method"):
            self._convert_call(fx_node)
        elif op == "call_module":
            module = self.gm.get_submodule(fx_node.target)
            raise FxConversionError(
                f"fx node %{fx_node.name} calls submodule {fx_node.target!r} ({type(module).__name__}); the "
                "IR has no module calls. Trace with a torch.fx.Tracer whose is_leaf_module() returns False, "
                "so modules are inlined as function calls, and pass lift_attributes=True for their parameters"
            )
        elif op == "output":
            self.outputs = self._flatten_output(fx_node.args[0])

    def _attribute(self, fx_node: torch.fx.Node) -> Value:
        target = fx_node.target
        if not self.lift_attributes:
            raise FxConversionError(
                f"fx node %{fx_node.name} reads attribute {target!r}; pass lift_attributes=True to make "
                "parameters and buffers graph inputs (their values: torchsmith.ir.fx.lifted_attributes(gm))"
            )
        if target not in self.attribute_inputs:
            tensor = fetch_attribute(self.gm, fx_node)
            if not isinstance(tensor, torch.Tensor):
                raise FxConversionError(
                    f"fx node %{fx_node.name} reads attribute {target!r}, a {type(tensor).__name__}; only "
                    "tensor attributes can become graph inputs"
                )
            preferred = fx_node.meta.get(META_NAME, target.replace(".", "_"))
            t = fx_node.meta.get(META_TYPE) or TensorType.of(tensor)
            self.attribute_inputs[target] = Value(self._claim(preferred), t)
        return self.attribute_inputs[target]

    def _arg(self, arg):
        """An fx argument in stored form."""
        if isinstance(arg, torch.fx.Node):
            value = self.env[arg]
            if isinstance(value, sympy.Basic) and not isinstance(value, sympy.Expr):
                raise FxConversionError(f"%{arg.name} is a symbolic relation, not an argument")
            return value
        if isinstance(arg, list):
            return ArgList(self._arg(a) for a in arg)
        if isinstance(arg, tuple):
            return tuple(self._arg(a) for a in arg)
        if isinstance(arg, slice):
            return freeze_arg(slice(self._arg(arg.start), self._arg(arg.stop), self._arg(arg.step)))
        if isinstance(arg, dict):
            raise FxConversionError(f"a dict argument {arg!r} has no IR form")
        try:
            return freeze_arg(arg)
        except GraphBuildError as e:
            raise FxConversionError(str(e)) from None

    def _convert_call(self, fx_node: torch.fx.Node) -> None:
        for marker in (META_SYM_EXPR, META_CONSTANT):  # made by to_fx to compute an argument: fold it back
            if marker in fx_node.meta:
                self.env[fx_node] = fx_node.meta[marker]
                return
        if fx_node.target is complex and all(isinstance(a, (int, float)) for a in fx_node.args):
            self.env[fx_node] = complex(*fx_node.args)  # how fx spells a complex constant with inf or nan
            return
        producer = fx_node.args[0] if fx_node.args and isinstance(fx_node.args[0], torch.fx.Node) else None
        if fx_node.target is operator.getitem and isinstance(self.env.get(producer), tuple):
            values, index = self.env[fx_node.args[0]], fx_node.args[1]
            if not isinstance(index, (int, slice)):
                raise FxConversionError(f"fx node %{fx_node.name} indexes a multi-output node with {index!r}")
            self.env[fx_node] = values[index] if isinstance(index, int) else type(values)(values[index])
            return
        op = self._op_name(fx_node)
        args = tuple(self._arg(a) for a in fx_node.args)
        if fx_node.target is builtins.getattr:
            args = args[:1]  # getattr(x, "shape") is x.size()
        kwargs = tuple((k, self._arg(v)) for k, v in fx_node.kwargs.items())
        types, multi = self._types(fx_node, op, args, dict(kwargs))
        if not multi:
            outputs = (Value(self._claim(fx_node.meta.get(META_NAME, fx_node.name)), types[0]),)
            self.env[fx_node] = outputs[0]
        else:
            outputs = self._multi_outputs(fx_node, types)
            container = self.runtime.get(fx_node, fx_node.meta.get("val"))
            self.env[fx_node] = ArgList(outputs) if isinstance(container, list) else tuple(outputs)
        self.nodes.append(Node(op, args, kwargs, outputs, _source_of(fx_node)))

    def _multi_outputs(self, fx_node: torch.fx.Node, types: list[Type]) -> tuple[Value, ...]:
        """Outputs named after the getitem nodes that read them."""
        names: dict[int, str] = {}
        for user in fx_node.users:
            if user.target is operator.getitem and user.args[0] is fx_node and isinstance(user.args[1], int):
                names.setdefault(user.args[1] % max(len(types), 1), user.meta.get(META_NAME, user.name))
        return tuple(
            Value(self._claim(names.get(i, f"{fx_node.name}_{i}")), t) for i, t in enumerate(types)
        )

    def _op_name(self, fx_node: torch.fx.Node) -> str:
        target = fx_node.target
        hinted = fx_node.meta.get(META_OP)
        if fx_node.op == "call_method":
            if not hasattr(torch.Tensor, target):
                raise FxConversionError(f"fx node %{fx_node.name} calls {target!r}: no such Tensor method")
            return f"torch.Tensor.{target}"
        if hinted is not None and lookup_op(hinted).eager is target:
            return hinted
        if target is builtins.getattr:
            if len(fx_node.args) == 2 and fx_node.args[1] == "shape":
                return "torch.Tensor.size"
            raise FxConversionError(
                f"fx node %{fx_node.name} reads attribute {fx_node.args[1:]!r} of a value; only .shape has "
                "an IR form (torch.Tensor.size). Call the matching method instead (e.g. x.dim(), x.size())"
            )
        if isinstance(target, torch._ops.OpOverloadPacket):
            overloads = target.overloads()
            if len(overloads) != 1:
                raise FxConversionError(
                    f"fx node %{fx_node.name} calls {target}, which has overloads {overloads}; "
                    "call one overload (e.g. torch.ops.aten.add.Tensor)"
                )
            target = getattr(target, overloads[0])
        try:
            name = op_name_of(target)
            lookup_op(name)
            return name
        except IRError:
            pass
        for candidate in registered_ops():
            if lookup_op(candidate).eager is target:
                return candidate
        raise FxConversionError(
            f"fx node %{fx_node.name} calls {target!r}, which has no torchsmith op; "
            "register it with torchsmith.ir.register_op"
        )

    def _types(self, fx_node: torch.fx.Node, op: str | None, args: tuple, kwargs: dict):
        """([types], several?) of a node's result, from the first source that knows it."""
        meta = fx_node.meta
        if META_TYPE in meta:
            t = meta[META_TYPE]
            return ([as_type(x) for x in t], True) if isinstance(t, (list, tuple)) else ([as_type(t)], False)
        if "val" in meta:
            return types_of_runtime(meta["val"])
        if fx_node in self.runtime:
            return types_of_runtime(self.runtime[fx_node])
        if op is not None:
            try:
                return infer_output_types(op, args, kwargs)
            except IRError:
                pass
        if "tensor_meta" in meta:
            return self._types_of_tensor_meta(meta["tensor_meta"])
        raise FxConversionError(
            f"fx node %{fx_node.name} ({fx_node.op} {fx_node.target}) has no type: pass example_inputs= to "
            "from_fx, or give its node.meta a 'val' or 'tensor_meta'"
        )

    def _types_of_tensor_meta(self, tm) -> tuple[list[Type], bool]:
        if isinstance(tm, (list, tuple)) and not hasattr(tm, "dtype"):
            return [self._types_of_tensor_meta(x)[0][0] for x in tm], True
        device = next((v.type.device for v in self.inputs if isinstance(v.type, TensorType)), "cpu")
        shape = tuple(fx_dim(d) for d in tm.shape)
        strides = tuple(fx_dim(s) for s in tm.stride)
        return [TensorType(shape, tm.dtype, device, strides, tm.requires_grad)], False

    def _flatten_output(self, arg) -> list[Value]:
        if isinstance(arg, torch.fx.Node):
            value = self.env[arg]
            if isinstance(value, Value):
                return [value]
            if isinstance(value, tuple):
                return list(value)
            raise FxConversionError(
                f"graph output %{arg.name} is a symbolic int made for an argument; the IR cannot return it"
            )
        if isinstance(arg, (list, tuple)):
            return [v for a in arg for v in self._flatten_output(a)]
        raise FxConversionError(
            f"the fx graph returns {type(arg).__name__} {arg!r}; the IR returns only values "
            "(flat or nested tuples/lists of nodes, no dicts or constants)"
        )
