"""The op registry: qualified op name -> how to run it on eager PyTorch, and its schema.

Names carry their dialect in the first part:

- `aten.<op>.<overload>`  resolved on first use from `torch.ops.aten`, schema included;
- `torch.<path>`          a torch function, `torch.nn.functional` call or `torch.Tensor` method,
                          found in the explicit table of `op_table` (no schema: capture records what
                          the user wrote);
- `operator.<f>`, `math.<f>`  Python's own functions on scalars and tensors (the same table);
- `prims.*` and any other dialect: registered explicitly with `register_op` (the prims package,
  or a backend adding its own ops).
"""

import importlib
import operator
import re
from collections.abc import Callable
from dataclasses import dataclass

import sympy
import torch

from torchsmith.ir.errors import UnknownOpError
from torchsmith.ir.op_table import ATEN_EXCLUDED, bound_op_names, python_op_table

# Argument kinds a schema can name, and what each accepts (see ArgSpec.accepts).
ARG_KINDS = (
    "tensor",
    "tensors",
    "int",
    "ints",
    "float",
    "floats",
    "bool",
    "bools",
    "scalar",
    "dtype",
    "device",
    "layout",
    "memory_format",
    "str",
    "any",
)


@dataclass(frozen=True, slots=True)
class ArgSpec:
    """One parameter of an op: its name, kind, whether it may be None, must be passed by keyword,
    or may be left out."""

    name: str
    kind: str
    optional: bool = False
    kwarg_only: bool = False
    has_default: bool = False

    def accepts(self, arg) -> bool:
        """Whether a stored argument fits this parameter (values are judged by their type)."""
        from torchsmith.ir.graph import ArgList, Value
        from torchsmith.ir.types import ScalarType, SymIntType, TensorType

        if arg is None:
            return self.optional or self.kind in ("any", "scalar")
        kind = self.kind
        if kind == "any":
            return True
        if kind in ("tensors", "ints", "floats", "bools"):
            if isinstance(arg, Value) and kind == "ints" and isinstance(arg.type, SymIntType):
                return True  # torch broadcasts one int to an int list
            if not isinstance(arg, tuple):
                return kind != "tensors" and ArgSpec(self.name, kind[:-1]).accepts(arg)
            element = ArgSpec(self.name, kind[:-1], optional=kind == "tensors")
            return all(element.accepts(a) for a in arg)
        if isinstance(arg, Value):
            t = arg.type
            if kind == "tensor":
                return isinstance(t, TensorType)
            if kind == "int":
                return isinstance(t, SymIntType) or t == ScalarType("int") or t == ScalarType("bool")
            if kind == "float":
                return isinstance(t, SymIntType) or (
                    isinstance(t, ScalarType) and t.kind in ("int", "float", "bool")
                )
            if kind == "bool":
                return t == ScalarType("bool")
            if kind == "scalar":
                return isinstance(t, (SymIntType, ScalarType)) or (isinstance(t, TensorType) and t.rank == 0)
            return False
        if isinstance(arg, ArgList):
            return False
        checks = {
            "tensor": lambda a: False,
            "int": lambda a: isinstance(a, int) or isinstance(a, sympy.Expr),
            "float": lambda a: isinstance(a, (int, float)) or isinstance(a, sympy.Expr),
            "bool": lambda a: isinstance(a, bool),
            "scalar": lambda a: isinstance(a, (int, float, complex)) or isinstance(a, sympy.Expr),
            "dtype": lambda a: isinstance(a, torch.dtype),
            "device": lambda a: isinstance(a, (torch.device, str)),
            "layout": lambda a: isinstance(a, torch.layout),
            "memory_format": lambda a: isinstance(a, torch.memory_format),
            "str": lambda a: isinstance(a, str),
        }
        return checks[kind](arg)


@dataclass(frozen=True, slots=True)
class OpSchema:
    """Parameters of an op. `variadic` accepts extra positionals; `num_outputs=None` any count."""

    params: tuple[ArgSpec, ...]
    variadic: bool = False
    num_outputs: int | None = None

    def describe(self) -> str:
        parts = []
        for p in self.params:
            text = f"{p.name}: {p.kind}{'?' if p.optional else ''}{' = ...' if p.has_default else ''}"
            parts.append(("*, " if p.kwarg_only and not any("*, " in q for q in parts) else "") + text)
        return "(" + ", ".join(parts) + ")"


@dataclass(frozen=True, slots=True)
class OpDef:
    """A registered op: `eager` runs it on torch tensors; `schema` (optional) lets the verifier
    check arity and argument kinds; `infer` (optional) maps (args, kwargs) of the node, with
    Values in place of tensors, to its output types, so shapes work symbolically."""

    name: str
    eager: Callable
    schema: OpSchema | None = None
    infer: Callable | None = None
    doc: str = ""

    @property
    def dialect(self) -> str:
        return self.name.split(".", 1)[0]


_REGISTRY: dict[str, OpDef] = {}
# The names `register_op` added: the rest of _REGISTRY are torch's ops resolved on first lookup.
_REGISTERED: set[str] = set()
_TABLE_DIALECTS = frozenset({"torch", "operator", "math"})
# A qualified op name: dotted identifiers, nothing else (no spaces, brackets or quotes).
_OP_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)+")
MAX_OP_NAME_CHARS = 200


def register_op(name: str, eager: Callable, *, schema=None, infer=None, doc="", replace=False) -> OpDef:
    """Register `name`; re-registering needs `replace=True` so two packages never clash silently."""
    if not isinstance(name, str) or not _OP_NAME.fullmatch(name) and "." in name:
        raise UnknownOpError(f"op name {name!r} must be dotted identifiers, e.g. 'mybackend.my_op'")
    if "." not in name:
        raise UnknownOpError(f"op name {name!r} must be qualified by a dialect, e.g. 'mybackend.{name}'")
    if name in _REGISTRY and not replace:
        raise UnknownOpError(f"op {name!r} is already registered; pass replace=True to override it")
    opdef = OpDef(name, eager, schema, infer, doc)
    _REGISTRY[name] = opdef
    _REGISTERED.add(name)
    return opdef


def lookup_op(name: str) -> OpDef:
    """The OpDef for `name`: a registered op, a registered ATen overload (resolved on first use) or
    a torch/operator/math function of the explicit table in `op_table`. Anything else is an
    `UnknownOpError` naming the op."""
    opdef = _REGISTRY.get(name) if isinstance(name, str) else None
    if opdef is not None:
        return opdef
    if not isinstance(name, str) or len(name) > MAX_OP_NAME_CHARS or not _OP_NAME.fullmatch(name):
        shown = name if not isinstance(name, str) or len(name) <= 80 else name[:80] + "..."
        raise UnknownOpError(f"invalid op name {shown!r}: an op is dotted identifiers, e.g. aten.add.Tensor")
    dialect = name.split(".", 1)[0]
    if dialect == "aten":
        opdef = _resolve_aten(name)
    elif dialect in _TABLE_DIALECTS:
        fn = python_op_table().get(name)
        if fn is None:
            raise UnknownOpError(
                f"unknown op {name!r}: not in torchsmith's table of torch functions, Tensor methods and "
                "operator/math functions (torchsmith.ir.op_table); register it with torchsmith.ir.register_op"
            )
        opdef = OpDef(name, fn, OpSchema((), variadic=True))
    else:
        raise UnknownOpError(
            f"unknown op {name!r}: dialect {dialect!r} ops must be registered with "
            "torchsmith.ir.register_op (prims ops are registered by importing torchsmith.prims)"
        )
    _REGISTRY[name] = opdef
    return opdef


def draws_random(name: str) -> bool:
    """Whether the ATen op `name` draws from the global random generators (torch tags it
    nondeterministic_seeded): running it moves the generator even when nothing reads its result."""
    if not isinstance(name, str) or not name.startswith("aten."):
        return False
    try:
        overload = lookup_op(name).eager
    except UnknownOpError:
        return False
    return torch.Tag.nondeterministic_seeded in getattr(overload, "tags", ())


def is_registered(name: str) -> bool:
    try:
        lookup_op(name)
    except UnknownOpError:
        return False
    return True


def registered_ops(dialect: str | None = None) -> list[str]:
    """Names registered so far (resolved aten/torch names appear once looked up)."""
    return sorted(n for n in _REGISTRY if dialect is None or n.split(".", 1)[0] == dialect)


def explicit_registrations() -> dict[str, OpDef]:
    """The ops added with `register_op` (prims, a user's ops), by name: not the torch ops that
    `lookup_op` resolved and remembered, so the answer does not depend on what was looked up.
    Caches key on it, so that a graph compiled before a user's registration misses after it."""
    return {name: _REGISTRY[name] for name in sorted(_REGISTERED)}


def op_name_of(target) -> str:
    """The qualified name of an aten OpOverload, torch function or Tensor method; a Python-level
    name is given only when `lookup_op` resolves it back to `target`."""
    name = _name_of(target)
    if name.split(".", 1)[0] in _TABLE_DIALECTS and python_op_table().get(name) is not target:
        raise UnknownOpError(f"{name} is not in torchsmith's table of torch ops (torchsmith.ir.op_table)")
    return name


def _name_of(target) -> str:
    if isinstance(target, torch._ops.OpOverload):
        namespace = target.namespace
        packet, overload = target._schema.name.split("::")[1], target._overloadname
        return f"{namespace}.{packet}.{overload}"
    for module_name in ("torch.nn.functional", "torch.linalg", "torch.special", "torch.fft", "torch"):
        module = importlib.import_module(module_name)
        if getattr(module, getattr(target, "__name__", ""), None) is target:
            return f"{module_name}.{target.__name__}"
    bound = bound_op_names().get(id(target))
    if bound is not None:
        return bound
    qualname = getattr(target, "__qualname__", "")
    if (
        qualname.startswith(("Tensor.", "TensorBase."))
        and getattr(torch.Tensor, target.__name__, None) is target
    ):
        return f"torch.Tensor.{target.__name__}"
    module = getattr(target, "__module__", None)
    if module in ("_operator", "operator") and getattr(operator, target.__name__, None) is target:
        return f"operator.{target.__name__}"
    if module == "math":
        return f"math.{target.__name__}"
    raise UnknownOpError(f"{target!r} has no torchsmith op name; register it with torchsmith.ir.register_op")


def _resolve_aten(name: str) -> OpDef:
    parts = name.split(".")
    if len(parts) != 3:
        raise UnknownOpError(f"aten op {name!r} must be written aten.<op>.<overload>, e.g. aten.add.Tensor")
    if parts[1] in ATEN_EXCLUDED:
        raise UnknownOpError(f"op {name!r} reads or maps files; a graph may not call it")
    # aten has operators spelled as dunders (aten.__lshift__.Scalar); the type checks below refuse
    # whatever else the lookup meets (aten.__class__.__init__ is no OpOverload)
    packet = None
    try:
        packet = getattr(torch.ops.aten, parts[1], None)
        overload = getattr(packet, parts[2], None) if packet is not None else None
    except (AttributeError, RuntimeError):
        overload = None
    if not isinstance(packet, torch._ops.OpOverloadPacket) or not isinstance(overload, torch._ops.OpOverload):
        raise UnknownOpError(f"unknown op {name!r}: torch.ops.aten has no {parts[1]}.{parts[2]}")
    return OpDef(name, overload, _schema_from_torch(overload._schema))


def _kind_of_jit_type(type_text: str) -> tuple[str, bool]:
    """Map a TorchScript type string to (kind, optional)."""
    optional = type_text.endswith("?")
    base = type_text.rstrip("?")
    if base.startswith("Optional[") and base.endswith("]"):
        optional, base = True, base[len("Optional[") : -1]
    mapping = {
        "Tensor": "tensor",
        "Tensor[]": "tensors",
        "List[Tensor]": "tensors",
        "Tensor?[]": "tensors",
        "List[Optional[Tensor]]": "tensors",
        "int": "int",
        "SymInt": "int",
        "int[]": "ints",
        "SymInt[]": "ints",
        "List[int]": "ints",
        "List[SymInt]": "ints",
        "float": "float",
        "float[]": "floats",
        "List[float]": "floats",
        "bool": "bool",
        "bool[]": "bools",
        "List[bool]": "bools",
        "Scalar": "scalar",
        "number": "scalar",
        "ScalarType": "dtype",
        "int8": "dtype",
        "Device": "device",
        "Layout": "layout",
        "MemoryFormat": "memory_format",
        "str": "str",
    }
    kind = mapping.get(base)
    if kind is None and base.startswith(("SymInt[", "int[")):
        kind = "ints"  # fixed-length lists such as int[2]
    if kind is None and base.startswith("bool["):
        kind = "bools"
    return kind or "any", optional


def _schema_from_torch(schema) -> OpSchema:
    params = []
    for argument in schema.arguments:
        # `type` shows ScalarType, Layout and MemoryFormat as plain int; `real_type` keeps them
        kind, optional = _kind_of_jit_type(str(getattr(argument, "real_type", argument.type)))
        params.append(
            ArgSpec(argument.name, kind, optional, argument.kwarg_only, argument.has_default_value())
        )
    returns = schema.returns
    list_return = any(str(r.type) in ("Tensor[]", "List[Tensor]") for r in returns)
    return OpSchema(tuple(params), variadic=False, num_outputs=None if list_return else len(returns))
