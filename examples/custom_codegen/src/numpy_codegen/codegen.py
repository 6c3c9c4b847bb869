"""A prims-level `torchsmith.ir.Graph` -> the source of one Python function over NumPy arrays.

Each node becomes one line. Common prims are written as plain NumPy (`np.add(a, b)`,
`np.transpose(a, (1, 0))`, `np.matmul(a, b)`, `np.sum(a, axis=(1,))`); the rest call the NumPy
reference implementation the prims package keeps for every prim (`PRIM["prims.erf"](a)`), and a node
outside the prims dialect (an op a decomposition kept) calls eager PyTorch on converted arrays.
Constants a literal cannot spell (dtypes, devices, inf) go into a table `K` next to the code.
"""

import keyword
import math
from dataclasses import dataclass

import torch

from torchsmith.ir import ArgList, Graph, Slice, TensorType, Value

# prims whose NumPy spelling is a ufunc of the same arguments
UFUNCS = {
    "prims.abs": "np.abs", "prims.neg": "np.negative", "prims.exp": "np.exp", "prims.log": "np.log",
    "prims.sin": "np.sin", "prims.cos": "np.cos", "prims.tan": "np.tan", "prims.tanh": "np.tanh",
    "prims.sinh": "np.sinh", "prims.cosh": "np.cosh", "prims.sqrt": "np.sqrt", "prims.floor": "np.floor",
    "prims.ceil": "np.ceil", "prims.log1p": "np.log1p", "prims.expm1": "np.expm1", "prims.log2": "np.log2",
    "prims.add": "np.add", "prims.sub": "np.subtract", "prims.mul": "np.multiply",
    "prims.maximum": "np.maximum", "prims.minimum": "np.minimum", "prims.eq": "np.equal",
    "prims.ne": "np.not_equal", "prims.lt": "np.less", "prims.le": "np.less_equal",
    "prims.gt": "np.greater", "prims.ge": "np.greater_equal", "prims.where": "np.where",
    "prims.mm": "np.matmul", "prims.bmm": "np.matmul",
}
REDUCTIONS = {"prims.sum": "np.sum", "prims.amax": "np.max", "prims.amin": "np.min"}
FLOAT_DTYPES = {torch.float32: "np.float32", torch.float64: "np.float64", torch.float16: "np.float16"}


class NumpyCodegenError(Exception):
    """A graph this example backend cannot turn into NumPy code (the message says which node)."""


@dataclass(frozen=True)
class GeneratedCode:
    """The generated function's source, its name and the constants table it reads as `K`."""

    name: str
    source: str
    constants: tuple


def generate_numpy(graph: Graph) -> GeneratedCode:
    """The source of `def <graph name>(inputs...)` returning the list of the graph's outputs.

    >>> print(generate_numpy(graph).source)   # doctest: +SKIP
    def forward(v_x, v_w):
        v_permute = np.transpose(v_w, (1, 0))  # prims.permute
        ...
    """
    symbolic = [v.name for v in graph.inputs if v.type.free_symbols]
    if symbolic:
        raise NumpyCodegenError(f"graph {graph.name}: inputs {symbolic} have symbolic sizes; this example "
                                "backend needs static shapes (compile with dynamic=False)")
    writer = _Writer()
    name = _identifier(graph.name)
    lines = [f"def {name}({', '.join(writer.name(v) for v in graph.inputs)}):"]
    for node in graph.nodes:
        try:
            call = writer.call(node)
        except NumpyCodegenError:
            raise
        except Exception as e:
            raise NumpyCodegenError(f"cannot write NumPy code for {node.op} ({node.source}): {e}") from e
        targets = ", ".join(writer.name(v) for v in node.outputs)
        if len(node.outputs) == 1:
            lines.append(f"    {targets} = {call}  # {node.op}")
        else:
            lines.append(f"    ({targets},) = {call}  # {node.op}")
    outputs = ", ".join(writer.name(v) if isinstance(v, Value) else writer.constant(v) for v in graph.outputs)
    lines.append(f"    return [{outputs}]")
    return GeneratedCode(name, "\n".join(lines) + "\n", tuple(writer.constants))


class _Writer:
    def __init__(self):
        self.constants: list = []
        self.names: dict[str, str] = {}

    def name(self, value: Value) -> str:
        if value.name not in self.names:
            self.names[value.name] = _identifier("v_" + value.name)
        return self.names[value.name]

    def constant(self, value) -> str:
        """A Python expression for a constant argument."""
        if value is None or isinstance(value, bool | int | str):
            return repr(value)
        if isinstance(value, float):
            return repr(value) if math.isfinite(value) else self._table(value)
        if isinstance(value, Slice):
            return f"slice({self.arg(value.start)}, {self.arg(value.stop)}, {self.arg(value.step)})"
        if isinstance(value, ArgList):
            return "[" + ", ".join(self.arg(a) for a in value) + "]"
        if isinstance(value, tuple):
            items = [self.arg(a) for a in value]
            return f"({items[0]},)" if len(items) == 1 else "(" + ", ".join(items) + ")"
        if hasattr(value, "free_symbols") and value.free_symbols:
            raise NumpyCodegenError(f"symbolic size {value}: this example backend needs static shapes "
                                    "(compile with dynamic=False)")
        return self._table(value)

    def _table(self, value) -> str:
        self.constants.append(value)
        return f"K[{len(self.constants) - 1}]"

    def arg(self, value) -> str:
        return self.name(value) if isinstance(value, Value) else self.constant(value)

    def call(self, node) -> str:
        """The right-hand side for one node."""
        args = [self.arg(a) for a in node.args]
        kwargs = [f"{k}={self.arg(a)}" for k, a in node.kwargs]
        out = node.outputs[0].type if node.outputs else None
        if node.op in UFUNCS and not kwargs:
            return f"{UFUNCS[node.op]}({', '.join(args)})"
        if node.op == "prims.permute":
            return f"np.transpose({args[0]}, {self.constant(tuple(node.args[1]))})"
        if node.op == "prims.broadcast_in_dim" and isinstance(node.args[0], Value):
            # give the operand the result's rank (size 1 where it has no dim), then broadcast
            rank, dims = len(node.args[1]), list(node.args[2])
            sizes = [1] * rank
            for i, d in enumerate(dims):
                sizes[d] = node.args[0].type.shape[i]
            return (f"np.broadcast_to(np.reshape({args[0]}, {self.constant(tuple(sizes))}), "
                    f"{self.constant(tuple(node.args[1]))})")
        if node.op == "prims.reshape":
            return f"np.reshape({args[0]}, {self.constant(tuple(node.args[1]))})"
        if node.op in REDUCTIONS and not kwargs and _is_float(out):
            # keep dims as given; NumPy's float sums are pairwise, as accurate as PyTorch's
            return f"{REDUCTIONS[node.op]}({args[0]}, axis={self.constant(tuple(node.args[1]))})"
        if node.op == "prims.convert_element_type" and _is_float(out):
            return f"np.asarray({args[0]}).astype({FLOAT_DTYPES[out.dtype]})"
        if node.op.startswith("prims."):
            return f"PRIM[{node.op!r}]({', '.join(args + kwargs)})"
        return f"TORCH[{node.op!r}]({', '.join(args + kwargs)})"


def _is_float(t) -> bool:
    return isinstance(t, TensorType) and t.dtype in FLOAT_DTYPES


def _identifier(name: str) -> str:
    text = "".join(c if c.isalnum() or c == "_" else "_" for c in name) or "graph"
    if text[0].isdigit() or keyword.iskeyword(text):
        text = "_" + text
    return text
