"""The declarative helper every prim is defined with, and the tables it fills.

A prim is one call to `define_prim`: its schema (written as a short parameter string), its
shape/dtype rule, its torch implementation and its NumPy reference implementation::

    define_prim(
        "prims.exp", "a: tensor", kind="elementwise.unary",
        infer=same_as_input, torch_impl=torch.exp, numpy_impl=np.exp,
        doc="e ** a, elementwise.",
    )

The op is registered in torchsmith.ir's registry (so graphs with it build, print and run), its
`PrimInfo` goes into `PRIMS` and its NumPy implementation into `NUMPY_IMPLS`, both keyed by name.
"""

from collections.abc import Callable
from dataclasses import dataclass

import sympy
import torch

from torchsmith.ir import ArgSpec, OpSchema, Value, register_op
from torchsmith.ir.symbolic import Dim, compare, format_dim, normalize_dim
from torchsmith.ir.types import ScalarType, SymIntType, TensorType
from torchsmith.prims.errors import PrimTypeError

PRIM_KINDS = (
    "elementwise.unary",
    "elementwise.binary",
    "elementwise.ternary",
    "reduction",
    "view",
    "shape",
    "creation",
    "indexing",
    "conversion",
    "scan",
    "random",
    "library",
)


@dataclass(frozen=True, slots=True)
class PrimInfo:
    """What the prims package knows about one prim beyond its registry entry."""

    name: str
    kind: str
    schema: OpSchema
    doc: str


PRIMS: dict[str, PrimInfo] = {}
NUMPY_IMPLS: dict[str, Callable] = {}


def parse_params(text: str) -> OpSchema:
    """`"a: tensor, dims: ints, *, keepdim: bool = ..., dtype: dtype?"` -> OpSchema."""
    params, kwarg_only = [], False
    for part in (p.strip() for p in text.split(",") if p.strip()):
        if part == "*":
            kwarg_only = True
            continue
        name, _, kind = (s.strip() for s in part.partition(":"))
        has_default = kind.endswith("= ...")
        kind = kind.removesuffix("= ...").strip()
        optional = kind.endswith("?")
        params.append(ArgSpec(name, kind.rstrip("?"), optional, kwarg_only, has_default or optional))
    return OpSchema(tuple(params))


def define_prim(
    name: str,
    params: str,
    *,
    kind: str,
    infer: Callable,
    torch_impl: Callable,
    numpy_impl: Callable,
    doc: str,
    num_outputs: int = 1,
) -> PrimInfo:
    """Define and register one prim (see the module docstring)."""
    assert name.startswith("prims.") and kind in PRIM_KINDS, (name, kind)
    schema = parse_params(params)
    schema = OpSchema(schema.params, schema.variadic, num_outputs)

    def checked_infer(args, kwargs):
        try:
            return infer(*args, **kwargs)
        except TypeError as e:  # wrong arity from a hand-written node
            raise PrimTypeError(f"{name}{schema.describe()}: {e}") from None

    register_op(name, torch_impl, schema=schema, infer=checked_infer, doc=doc)
    info = PrimInfo(name, kind, schema, doc)
    PRIMS[name] = info
    NUMPY_IMPLS[name] = numpy_impl
    return info


# ---- helpers for shape/dtype rules ---------------------------------------------------------------


def tensor_arg(op: str, what: str, arg) -> TensorType:
    """The TensorType of a Value argument, or a clear error."""
    if isinstance(arg, Value) and isinstance(arg.type, TensorType):
        return arg.type
    raise PrimTypeError(f"{op}: {what} must be a tensor value, got {arg!r}")


def dim_value(op: str, arg) -> Dim:
    """An int-like argument (int, sympy expression or a SymInt Value) as a dim."""
    if isinstance(arg, Value) and isinstance(arg.type, SymIntType):
        return arg.type.expr
    if isinstance(arg, bool):
        raise PrimTypeError(f"{op}: expected an integer, got {arg!r}")
    if isinstance(arg, (int, sympy.Expr)):
        return normalize_dim(arg)
    raise PrimTypeError(f"{op}: expected an integer or symbolic int, got {arg!r}")


def shape_value(op: str, arg) -> tuple[Dim, ...]:
    if not isinstance(arg, tuple):
        raise PrimTypeError(f"{op}: expected a shape (a list of ints), got {arg!r}")
    return tuple(dim_value(op, d) for d in arg)


def int_list(op: str, arg) -> tuple[int, ...]:
    """A list of concrete ints such as dims or permutations."""
    if isinstance(arg, int) and not isinstance(arg, bool):
        return (arg,)
    if not isinstance(arg, tuple) or not all(isinstance(a, int) and not isinstance(a, bool) for a in arg):
        raise PrimTypeError(f"{op}: expected a list of ints, got {arg!r}")
    return tuple(arg)


def same_dim(a: Dim, b: Dim) -> bool:
    """Whether two dims are provably equal (symbolic dims must match as expressions)."""
    return compare("==", a, b) is True


def check_same_shape(op: str, types: list[TensorType]) -> None:
    first = types[0]
    for t in types[1:]:
        if len(t.shape) != len(first.shape) or not all(same_dim(a, b) for a, b in zip(t.shape, first.shape)):
            shapes = " and ".join(str([format_dim(d) for d in u.shape]) for u in (first, t))
            raise PrimTypeError(
                f"{op}: operands must have the same shape, got {shapes}; "
                "broadcast with prims.broadcast_in_dim"
            )
        if t.device != first.device:
            raise PrimTypeError(f"{op}: operands on different devices {first.device} and {t.device}")


def check_same_dtype(op: str, types: list[TensorType]) -> None:
    dtypes = {t.dtype for t in types}
    if len(dtypes) > 1:
        raise PrimTypeError(
            f"{op}: operands must have the same dtype, got {', '.join(sorted(map(str, dtypes)))}; "
            "convert with prims.convert_element_type"
        )


def check_dim(op: str, dim: int, rank: int, *, inclusive: bool = False) -> int:
    """A dim index, checked: prims take non-negative dims only (decompositions normalize)."""
    if not isinstance(dim, int) or isinstance(dim, bool) or not 0 <= dim < rank + inclusive:
        raise PrimTypeError(
            f"{op}: dim {dim!r} out of range for a tensor of rank {rank} (prims need 0 <= dim)"
        )
    return dim


def result(shape, dtype: torch.dtype, device: str) -> TensorType:
    """A contiguous output type (prims other than views produce contiguous results)."""
    return TensorType.make(shape, dtype, device)


def scalar_kind(arg) -> str | None:
    """`"bool"`, `"int"`, `"float"`, `"complex"` for a Python scalar or scalar Value, else None."""
    if isinstance(arg, Value):
        t = arg.type
        if isinstance(t, SymIntType):
            return "int"
        return t.kind if isinstance(t, ScalarType) and t.kind != "none" else None
    if isinstance(arg, bool):
        return "bool"
    if isinstance(arg, int) or (isinstance(arg, sympy.Expr) and arg.is_integer):
        return "int"
    if isinstance(arg, float):
        return "float"
    if isinstance(arg, complex):
        return "complex"
    return None


# ---- dtype classes -------------------------------------------------------------------------------

CATEGORY_OF = {"bool": 0, "int": 1, "float": 2, "complex": 3}


def dtype_category(dtype: torch.dtype) -> str:
    """`"bool"`, `"int"`, `"float"` or `"complex"`: the four ordered type-promotion categories."""
    if dtype == torch.bool:
        return "bool"
    if dtype.is_complex:
        return "complex"
    if dtype.is_floating_point:
        return "float"
    return "int"


DTYPE_CLASSES = {
    "any": ("bool", "int", "float", "complex"),
    "numeric": ("int", "float", "complex"),
    "real": ("bool", "int", "float"),
    "real_numeric": ("int", "float"),
    "integral": ("bool", "int"),
    "int": ("int",),
    "float": ("float",),
    "inexact": ("float", "complex"),
}


def check_dtype_class(op: str, dtype: torch.dtype, allowed: str) -> None:
    """Refuse a dtype outside the class a prim accepts (decompositions convert first)."""
    if dtype_category(dtype) not in DTYPE_CLASSES[allowed]:
        raise PrimTypeError(
            f"{op}: does not accept {dtype} "
            f"(it takes {allowed} dtypes: {', '.join(DTYPE_CLASSES[allowed])}); "
            "convert with prims.convert_element_type first"
        )
