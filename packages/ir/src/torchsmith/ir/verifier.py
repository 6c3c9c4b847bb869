"""The verifier: checks that a graph keeps the IR's invariants.

`verify(graph)` returns the graph unchanged or raises `VerifyError` listing every problem found,
each naming the node (in its text form), its source line, what is wrong and what was expected::

    graph = verify(some_pass(graph))       # in tests, between passes
    graph = maybe_verify(graph)            # in stages: a no-op unless TORCHSMITH_VERIFY=1

What it checks:

- SSA: every value name is defined once, across graph inputs and node outputs;
- every use (args, kwargs, nested lists and tuples, slices, graph outputs) comes after the definition,
  and names a value with the type it was defined with;
- every size symbol in a type or a `sym(...)` argument is bound by the inputs (a bare symbol in an
  input's shape or strides, or an input of type `sym(s0)`), so the interpreter can give it a value;
- ops resolve in the registry, and their arguments fit the op's schema: arity, required and unknown
  parameters, argument kinds, and the number of outputs;
- when an op has an `infer` rule, the declared output types are the ones the rule computes (strides
  as a layout: size-1 dims' strides are not compared, and any dense layout may be declared, the one
  a backend produces the value in; a non-dense one must be the rule's, a view's own); an
  ATen op without one is run on meta tensors of the declared input types and its output shapes and
  dtypes are compared with the declared ones (`verify_types`);
- sizes and strides are integers in 0 .. 2**63-1, a tensor has fewer than 2**63 elements, devices
  are of a known kind with an index below 64 (whether the device exists here is checked only when
  something runs: a graph may be verified on another machine than the one it runs on).

It is a plain function run between passes in tests and debug mode, never on the hot path.
"""

import os
import reprlib

import sympy

from torchsmith.ir.errors import IRError, VerifyError
from torchsmith.ir.graph import CONSTANT_TYPES, Graph, Node, Slice, Value, iter_values
from torchsmith.ir.registry import ArgSpec, OpSchema, lookup_op
from torchsmith.ir.symbolic import format_dim, free_symbols
from torchsmith.ir.types import ScalarType, SymIntType, TensorType, as_type, format_type
from torchsmith.ir.verify_types import meta_result_problems, type_problems

ENV_VAR = "TORCHSMITH_VERIFY"
_MAX_REPORTED = 25  # past this the first problems are what matters; the rest are usually consequences


def verify_enabled() -> bool:
    """Whether `TORCHSMITH_VERIFY` asks stages to verify the graphs they produce (`1`, `true`, `yes`)."""
    return os.environ.get(ENV_VAR, "").strip().lower() in ("1", "true", "yes", "on")


def maybe_verify(graph: Graph) -> Graph:
    """`verify(graph)` when `TORCHSMITH_VERIFY=1`, else return `graph` at once (cheap enough to call
    after every pass)."""
    return verify(graph) if verify_enabled() else graph


def verify(graph: Graph) -> Graph:
    """Return `graph` if it is valid IR; else raise `VerifyError` listing every problem.

    >>> verify(GraphBuilder("g").build())  # doctest: +SKIP
    Graph(name='g', inputs=(), nodes=(), outputs=(), stamps=())
    """
    problems = _Checker(graph).run()
    if problems:
        shown = problems[:_MAX_REPORTED]
        more = len(problems) - len(shown)
        lines = [f"graph {graph.name} is not valid IR ({len(problems)} problem{'s' * (len(problems) != 1)}):"]
        lines += [f"  - {p}" for p in shown]
        if more:
            lines.append(f"  ... and {more} more")
        error = VerifyError("\n".join(lines))
        error.problems = problems
        raise error
    return graph


def describe_node(node: Node, index: int) -> str:
    """`node 3 (%y: f32[4] cpu = aten.relu.default(%x)) at model.py:12`: how problems name a node."""
    from torchsmith.ir.text import format_node

    try:
        text = format_node(node.replace(source=None))
    except Exception:  # a node with unprintable types or arguments must still be named
        try:
            text = format_node(node.replace(source=None, outputs=()))
        except Exception:
            text = f"{node.op}(...)"
        names = ", ".join(f"%{getattr(v, 'name', v)}" for v in node.outputs)
        text = f"{names} = {text}" if names else text
    where = f"node {index} ({text})"
    return where + (f" at {node.source}" if node.source else "")


class _NodeWhere:
    """Names a node in problem messages; the node is printed only when a problem is reported."""

    __slots__ = ("node", "index", "_text")

    def __init__(self, node: Node, index: int):
        self.node, self.index, self._text = node, index, None

    def __str__(self) -> str:
        if self._text is None:
            self._text = describe_node(self.node, self.index)
        return self._text


def _describe_arg(arg) -> str:
    if isinstance(arg, Value):
        try:
            return f"%{arg.name}: {format_type(arg.type)}"
        except IRError:
            return f"%{arg.name}: {arg.type!r}"
    from torchsmith.ir.text import format_arg

    try:
        return format_arg(arg)
    except Exception:  # e.g. a layout the text form has no name for
        return repr(arg)


def _bare_symbols(t) -> set[str]:
    """Symbols a value of type `t` binds when it is a graph input (what the interpreter reads)."""
    if isinstance(t, TensorType):
        return {d.name for d in t.shape + t.strides if isinstance(d, sympy.Symbol)}
    if isinstance(t, SymIntType) and isinstance(t.expr, sympy.Symbol):
        return {t.expr.name}
    return set()


class _Checker:
    """One verification run: walks the graph once, collecting problems in graph order."""

    def __init__(self, graph: Graph):
        self.graph = graph
        self.problems: list[str] = []
        self.defined: dict[str, Value] = {}
        self.defined_at: dict[str, str] = {}
        self.bound: set[str] = set()

    def run(self) -> list[str]:
        graph = self.graph
        for value in graph.inputs:
            if self._is_valid_type(value, "graph input"):
                self.bound |= _bare_symbols(value.type)
        for value in graph.inputs:
            if isinstance(value, Value):
                self._define(value, f"graph input %{value.name}", f"graph input %{value.name}")
                self._check_symbols(value.type, f"graph input %{value.name}", "its type")
        for index, node in enumerate(graph.nodes):
            self._check_node(node, index)
        for position, value in enumerate(graph.outputs):
            self._check_use(value, f"graph output {position}")
        return self.problems

    # -- values ------------------------------------------------------------------------------

    def _is_valid_type(self, value, where) -> bool:
        if not isinstance(value, Value):
            self.problems.append(f"{where}: {value!r} is not a Value; expected Value(name, type)")
            return False
        if not isinstance(value.type, (TensorType, SymIntType, ScalarType)):
            self.problems.append(
                f"{where}: %{value.name} has type {value.type!r}; "
                "expected a TensorType, SymIntType or ScalarType"
            )
            return False
        problems = type_problems(value.type)
        self.problems += [f"{where}: %{value.name}: {p}" for p in problems]
        return not problems

    def _define(self, value: Value, where, label: str) -> None:
        if not value.name.isidentifier():
            self.problems.append(
                f"{where}: value name {value.name!r} is not an identifier, "
                "so the text form cannot be read back"
            )
        if value.name in self.defined:
            self.problems.append(
                f"{where}: %{value.name} is already defined by {self.defined_at[value.name]} "
                "(SSA: every value is defined once); give this value a fresh name"
            )
            return
        self.defined[value.name] = value
        self.defined_at[value.name] = label

    def _check_use(self, value, where) -> None:
        if not isinstance(value, Value):
            self.problems.append(f"{where}: {value!r} is not a Value")
            return
        definition = self.defined.get(value.name)
        if definition is None:
            later = any(v.name == value.name for node in self.graph.nodes for v in node.outputs)
            why = "it is defined by a later node; nodes must be in topological order" if later else (
                "no graph input or earlier node defines it"
            )
            self.problems.append(f"{where}: uses %{value.name} before it is defined: {why}")
        elif definition.type != value.type:
            self.problems.append(
                f"{where}: uses %{value.name} with type {_type_text(value.type)}, but it was defined with "
                f"type {_type_text(definition.type)}; a use must carry the type of the definition"
            )

    def _check_symbols(self, t, where, what: str) -> None:
        if not isinstance(t, (TensorType, SymIntType, ScalarType)):
            return
        unbound = sorted(t.free_symbols - self.bound)
        if unbound:
            self.problems.append(
                f"{where}: {what} {_type_text(t)} uses unbound symbol{'s' * (len(unbound) > 1)} "
                f"{', '.join(unbound)}; every symbol must appear bare in an input's shape, strides or "
                f"sym type ({self._bound_text()})"
            )

    def _bound_text(self) -> str:
        return "bound: " + ", ".join(sorted(self.bound)) if self.bound else "no symbols are bound"

    # -- nodes -------------------------------------------------------------------------------

    def _check_node(self, node: Node, index: int) -> None:
        where = _NodeWhere(node, index)
        if not isinstance(node.op, str) or "." not in node.op:
            self.problems.append(f"{where}: op {node.op!r} is not a qualified name such as 'aten.mm.default'")
            return
        arguments = [(None, a) for a in node.args] + list(node.kwargs)
        known_problems = len(self.problems)
        for name, arg in arguments:
            self._check_arg(arg, where, name)
        for value in node.outputs:
            if self._is_valid_type(value, where):
                self._check_symbols(value.type, where, f"output %{value.name} has type")
        # running the op on inputs already found wrong would only repeat that finding
        self._check_op(node, where, run_meta=len(self.problems) == known_problems)
        for value in node.outputs:
            if isinstance(value, Value):
                self._define(value, where, f"node {index}")

    def _check_arg(self, arg, where, keyword: str | None) -> None:
        label = f"argument {keyword}=" if keyword else "an argument"
        for value in iter_values(arg):
            self._check_use(value, where)
        for leaf in _leaves(arg):
            if isinstance(leaf, Value):
                continue
            if not isinstance(leaf, CONSTANT_TYPES):
                self.problems.append(
                    f"{where}: {label} holds {type(leaf).__name__} {reprlib.repr(leaf)}, which is not an IR "
                    "argument; expected a Value, a constant, a slice or a list/tuple of those "
                    "(see graph.freeze_arg)"
                )
            elif isinstance(leaf, sympy.Basic):
                unbound = sorted(free_symbols(leaf) - self.bound)
                if unbound:
                    self.problems.append(
                        f"{where}: {label} sym({format_dim(leaf)}) uses unbound symbol"
                        f"{'s' * (len(unbound) > 1)} {', '.join(unbound)} ({self._bound_text()})"
                    )

    def _check_op(self, node: Node, where, run_meta: bool = True) -> None:
        try:
            opdef = lookup_op(node.op)
        except IRError as e:
            self.problems.append(f"{where}: {e}")
            return
        schema_problems = _schema_problems(node, opdef.schema) if opdef.schema is not None else []
        self.problems += [f"{where}: {p}" for p in schema_problems]
        # an infer rule given arguments that break the schema would only add a confusing failure
        outputs_ok = all(isinstance(v, Value) for v in node.outputs)
        if opdef.infer is not None and not schema_problems and outputs_ok:
            self._check_infer(node, opdef.infer, where)
        elif not schema_problems and outputs_ok and run_meta:
            self.problems += [f"{where}: {p}" for p in meta_result_problems(node, opdef.eager)]

    def _check_infer(self, node: Node, infer, where) -> None:
        try:
            result = infer(node.args, dict(node.kwargs))
            results = result if isinstance(result, (list, tuple)) else [result]
            expected = [as_type(t) for t in results]
        except Exception as e:  # a rule that cannot handle these arguments is itself a finding
            self.problems.append(f"{where}: the infer rule of {node.op} failed: {type(e).__name__}: {e}")
            return
        declared = [v.type for v in node.outputs]
        if len(declared) != len(expected) or not all(map(_agrees, declared, expected)):
            self.problems.append(
                f"{where}: declared output types ({', '.join(_type_text(t) for t in declared)}) differ from "
                f"what {node.op}'s infer rule computes ({', '.join(_type_text(t) for t in expected)})"
            )


def _agrees(declared, expected) -> bool:
    """Whether a declared output type is the one an infer rule computes. Strides are a layout: the
    strides of a size-1 dim address nothing, and a tensor without elements has no layout, so those
    are not compared; and a declared layout that a fresh tensor can have (dense, not overlapping) is
    the layout the value is produced in (eager's strides of a graph output, a channels-last plan),
    which a backend writes whatever the op's natural layout. Every other layout is a view's own and
    must be the rule's."""
    if not (isinstance(declared, TensorType) and isinstance(expected, TensorType)):
        return declared == expected
    if (declared.shape, declared.dtype, declared.device, declared.requires_grad) != (
        expected.shape, expected.dtype, expected.device, expected.requires_grad
    ):  # fmt: skip
        return False
    if declared.strides == expected.strides or any(_equal(d, 0) for d in declared.shape):
        return True
    addressed = [i for i, d in enumerate(declared.shape) if not _equal(d, 1)]
    if all(_equal(declared.strides[i], expected.strides[i]) for i in addressed):
        return True
    return _dense(declared.shape, declared.strides)


def _equal(a, b) -> bool:
    """Whether two dims (ints or size expressions) are provably equal."""
    return a == b or sympy.simplify(sympy.sympify(a) - sympy.sympify(b)) == 0


def _dense(shape, strides) -> bool:
    """Whether `strides` lay `shape` out densely without overlap (contiguous in some dim order):
    from stride 1 up, each next stride is the product of the sizes below it."""
    left = [i for i, d in enumerate(shape) if not _equal(d, 1)]
    expected = sympy.Integer(1)
    while left:
        inner = next((i for i in left if _equal(strides[i], expected)), None)
        if inner is None:
            return False
        left.remove(inner)
        expected = expected * shape[inner]
    return True


def _leaves(arg):
    """The non-container parts of an argument (constants and Values)."""
    if isinstance(arg, tuple):  # tuple and ArgList
        for a in arg:
            yield from _leaves(a)
    elif isinstance(arg, Slice):
        yield from _leaves((arg.start, arg.stop, arg.step))
    else:
        yield arg


def _type_text(t) -> str:
    try:
        return format_type(t)
    except IRError:
        return repr(t)


def _is_open(schema: OpSchema) -> bool:
    """torch/operator/math names resolve with an empty variadic schema: the callable takes anything."""
    return schema.variadic and not schema.params


_NUMBER_AS_TENSOR_OPS = frozenset(
    f"{name}{suffix}"
    for name in (
        "add", "sub", "subtract", "mul", "multiply", "div", "divide", "true_divide", "floor_divide", "copy"
    )
    for suffix in ("", "_")
)


def _accepts(spec: ArgSpec, arg, op: str) -> bool:
    try:
        if spec.accepts(arg):
            return True
    except Exception:  # a schema with an unknown kind must not crash the verifier
        return False
    # torch.ops.aten wraps a Python number passed for a Tensor parameter of the arithmetic ops
    # (aten.add.Tensor(%x, 1)), and only of those: aten.where.self(%c, %x, 0.0) is refused by eager.
    dialect, _, rest = op.partition(".")
    if spec.kind == "tensor" and dialect == "aten" and rest.split(".")[0] in _NUMBER_AS_TENSOR_OPS:
        if isinstance(arg, Value):
            t = arg.type
            return isinstance(t, SymIntType) or (isinstance(t, ScalarType) and t.kind != "none")
        return isinstance(arg, (int, float, complex, sympy.Expr))
    return False


def _schema_problems(node: Node, schema: OpSchema) -> list[str]:
    """What is wrong with `node`'s arguments and outputs according to `schema`."""
    signature = f"{node.op}{schema.describe()}"
    problems = []
    positional = [p for p in schema.params if not p.kwarg_only]
    if len(node.args) > len(positional) and not schema.variadic:
        problems.append(
            f"takes at most {len(positional)} positional argument{'s' * (len(positional) != 1)}, "
            f"got {len(node.args)}; expected {signature}"
        )
    by_name = {p.name: p for p in schema.params}
    given = {p.name: a for p, a in zip(positional, node.args)}
    for name, arg in node.kwargs:
        if name not in by_name:
            if not _is_open(schema):
                problems.append(f"got an unknown keyword argument {name!r}; expected {signature}")
        elif name in given:
            problems.append(f"argument {name!r} is given both by position and by keyword")
        else:
            given[name] = arg
    for spec in schema.params:
        if spec.name not in given:
            if not spec.has_default:
                problems.append(f"missing required argument {spec.name!r}; expected {signature}")
        elif not _accepts(spec, given[spec.name], node.op):
            kind = spec.kind + ("?" if spec.optional else "")
            problems.append(
                f"argument {spec.name!r} is {_describe_arg(given[spec.name])}, "
                f"but the schema expects {kind}; "
                f"expected {signature}"
            )
    if schema.num_outputs is not None and len(node.outputs) != schema.num_outputs:
        problems.append(
            f"has {len(node.outputs)} output{'s' * (len(node.outputs) != 1)}, but {node.op} returns "
            f"{schema.num_outputs}"
        )
    return problems

