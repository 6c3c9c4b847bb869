"""Random but valid graphs, for round-trip tests and benchmarks of the IR.

    >>> g = random_graph(seed=3, num_nodes=30)
    >>> outputs = interpret(g, *example_inputs(g), check_types=True)  # doctest: +SKIP

A graph mixes aten and torch-level ops (elementwise, reductions, permute/view/slicing, mm, cat,
stack, the multi-output `aten.max.dim`, factories, `sym_size`/`item` producing symbolic ints and
Python scalars) and puts a constant of every argument kind somewhere: None, bools, ints, floats
(including inf, -inf, nan and -0.0), complex, strings, dtypes, devices, layouts, memory formats,
Ellipsis, slices, tuples, lists and symbolic ints. Output types are written out, never inferred,
so building a 10,000-node graph stays fast; every declared type (strides included, for sizes > 1)
is what eager PyTorch produces, which the tests check by running the interpreter.
"""

import math
import random

import sympy
import torch

from torchsmith.ir.builder import name_hint
from torchsmith.ir.gc_pause import paused_gc
from torchsmith.ir.graph import Graph, Node, Slice, Value, freeze_arg, iter_values
from torchsmith.ir.sample_inputs import example_inputs
from torchsmith.ir.symbolic import evaluate, floordiv, free_symbols, normalize_dim, symbol
from torchsmith.ir.types import ScalarType, SymIntType, TensorType

__all__ = ["example_inputs", "random_graph"]

_SYMBOLS = ("s0", "s1", "s2")
_CONCRETE = (2, 3, 4, 5)
_MAX_RANK = 4
_MAX_NUMEL = 4096  # with every symbol at 5, so interpreted graphs stay small
_FLOATS = (torch.float32, torch.float64)
_INTS = (torch.int64, torch.int32)
_COMPLEX = {torch.float32: torch.complex64, torch.float64: torch.complex128}
_SPECIAL_FLOATS = (0.5, -1.25, -0.0, math.inf, -math.inf, math.nan, 3.0)


def _dense_strides(shape: tuple, perm: tuple) -> tuple:
    """Strides of a dense tensor whose dims are laid out in `perm` order (outermost first)."""
    strides = [0] * len(shape)
    running = 1
    for d in reversed(perm):
        strides[d] = running
        running = normalize_dim(running * shape[d])
    return tuple(strides)


class _Generator:
    """Holds the nodes so far and, per tensor value, its layout: the order of its dims in memory
    (`perm`, outermost first) and whether it is dense (no gaps, as slicing makes)."""

    def __init__(self, seed: int, symbolic: bool):
        self.rng = random.Random(seed)
        self.name = f"random_{seed}"
        # Nodes are made directly, not through GraphBuilder: every operand is known to be
        # defined, and skipping its checks keeps 10,000-node graphs fast.
        self.inputs: list[Value] = []
        self.nodes: list[Node] = []
        self._hints: dict[str, str] = {}
        self.symbolic = symbolic
        self.tensors: list[Value] = []
        self.layout: dict[str, tuple[tuple, bool]] = {}
        self.by_type: dict[TensorType, list[Value]] = {}
        self.matrices: dict[tuple, list[Value]] = {}  # 2-d tensors by (dtype, rows), for mm
        self.syms: list[Value] = []
        self.syms_by_expr: dict[object, Value] = {}
        self.live_symbols: frozenset[str] = frozenset()
        self._numel_cache: dict[tuple, int] = {}
        self.floats: list[Value] = []  # Python float values (from item())
        self.used: set[str] = set()
        self._strides_cache: dict = {}

    # ---- bookkeeping -------------------------------------------------------------------------

    def ttype(self, shape, dtype, perm=None, strides=None) -> TensorType:
        shape = tuple(shape)
        if strides is None:
            perm = tuple(range(len(shape))) if perm is None else perm
            key = (shape, perm)
            strides = self._strides_cache.get(key)
            if strides is None:
                strides = self._strides_cache[key] = _dense_strides(shape, perm)
        return TensorType(shape, dtype, "cpu", tuple(strides))

    def numel_bound(self, shape) -> int:
        shape = tuple(shape)
        total = self._numel_cache.get(shape)
        if total is None:
            total = 1
            for d in shape:
                total *= d if isinstance(d, int) else evaluate(d, dict.fromkeys(free_symbols(d), 5))
            self._numel_cache[shape] = total
        return total

    def add_tensor(self, v: Value, perm=None, dense=True) -> Value:
        perm = tuple(range(v.type.rank)) if perm is None else perm
        self.tensors.append(v)
        self.layout[v.name] = (perm, dense)
        self.by_type.setdefault(v.type, []).append(v)
        if v.type.rank == 2:
            self.matrices.setdefault((v.type.dtype, v.type.shape[0]), []).append(v)
        return v

    def add_sym(self, s: Value) -> None:
        self.syms.append(s)
        self.syms_by_expr.setdefault(s.type.expr, s)

    def op(self, name, *args, out_type, **kwargs):
        """Append one node; returns its output Value, or a tuple when `out_type` is a list."""
        args = tuple(freeze_arg(a) for a in args)
        frozen_kwargs = tuple((k, freeze_arg(v)) for k, v in kwargs.items())
        for v in iter_values((args, frozen_kwargs)):
            self.used.add(v.name)
        hint = self._hints.get(name) or self._hints.setdefault(name, name_hint(name))
        index = len(self.nodes)
        if isinstance(out_type, list):
            outputs = tuple(Value(f"{hint}_{index}_{i}", t) for i, t in enumerate(out_type))
        else:
            outputs = (Value(f"{hint}_{index}", out_type),)
        self.nodes.append(Node(name, args, frozen_kwargs, outputs))
        return outputs if isinstance(out_type, list) else outputs[0]

    def pick(self, accept=lambda v: True) -> Value | None:
        """A tensor that `accept`s, preferring recent ones so graphs grow deep, not wide."""
        if self.rng.random() < 0.7:
            candidates = [v for v in self.tensors[-8:] if accept(v)]
            if candidates:
                return self.rng.choice(candidates)
        for _ in range(16):  # bounded tries keep generation linear in the number of nodes
            v = self.rng.choice(self.tensors)
            if accept(v):
                return v
        return None

    def contiguous(self, v: Value) -> bool:
        perm, dense = self.layout[v.name]
        return dense and perm == tuple(range(len(perm)))

    def elementwise_type(self, v: Value, dtype=None) -> tuple[TensorType, tuple]:
        """Eager elementwise ops lay the result out densely in the input's memory order."""
        perm, _ = self.layout[v.name]
        return self.ttype(v.type.shape, dtype or v.type.dtype, perm), perm

    def dim(self) -> object:
        if self.symbolic and self.rng.random() < 0.6:
            return symbol(self.rng.choice(_SYMBOLS))
        return self.rng.choice(_CONCRETE)

    # ---- ops: each appends one node, or returns False when no operand fits ------------------

    def unary(self) -> bool:
        real = lambda v: v.type.dtype in _FLOATS or v.type.dtype in _INTS
        x = self.pick(lambda v: v.type.dtype != torch.bool)
        if x is None:
            return False
        floating = x.type.dtype in _FLOATS or x.type.dtype.is_complex
        names = ["aten.neg.default", "torch.neg", "torch.Tensor.abs"]
        if real(x):
            names += ["aten.relu.default", "torch.relu"]
        if floating:
            names += ["aten.sin.default", "aten.tanh.default", "torch.exp", "torch.Tensor.sigmoid"]
        name = self.rng.choice(names)
        dtype = x.type.dtype.to_real() if name == "torch.Tensor.abs" else None
        t, perm = self.elementwise_type(x, dtype)
        self.add_tensor(self.op(name, x, out_type=t), perm)
        return True

    def binary(self) -> bool:
        x = self.pick(lambda v: v.type.dtype != torch.bool)
        if x is None:
            return False
        # Same type on both sides: no broadcasting, no promotion, one memory order.
        y = self.rng.choice(self.by_type[x.type])
        t, perm = self.elementwise_type(x)
        choice = self.rng.randrange(5)
        if choice == 0:
            alpha = self.rng.choice([2, -1]) if x.type.dtype in _INTS else self.rng.choice([2, 0.5, -0.0])
            out = self.op("aten.add.Tensor", x, y, out_type=t, alpha=alpha)
        elif choice == 1:
            name = self.rng.choice(["aten.mul.Tensor", "aten.sub.Tensor", "torch.add"])
            out = self.op(name, x, y, out_type=t)
        elif choice == 2 and x.type.dtype in _FLOATS:
            mode = self.rng.choice([None, "floor", "trunc"])
            out = self.op("aten.div.Tensor_mode", x, y, out_type=t, rounding_mode=mode)
        elif choice == 3 and x.type.dtype in _FLOATS:
            approximate = self.rng.choice(["tanh", "none"])
            out = self.op("torch.nn.functional.gelu", x, out_type=t, approximate=approximate)
        else:
            out = self.op("torch.Tensor.mul", x, y, out_type=t)
        self.add_tensor(out, perm)
        return True

    def scalar(self) -> bool:
        x = self.pick(lambda v: v.type.dtype != torch.bool)
        if x is None:
            return False
        dtype = x.type.dtype
        name = self.rng.choice(["aten.add.Scalar", "aten.mul.Scalar"])
        if dtype in _INTS:
            use_sym = self.syms and self.rng.random() < 0.4
            other = self.rng.choice(self.syms) if use_sym else self.rng.randint(-3, 3)
        elif dtype in _FLOATS and self.rng.random() < 0.15:
            other = complex(self.rng.choice([1.0, -0.5]), self.rng.choice([2.0, -0.0, math.inf]))
            dtype = _COMPLEX[dtype]
        elif self.floats and self.rng.random() < 0.3:
            other = self.rng.choice(self.floats)
        elif self.syms and self.rng.random() < 0.3:
            other = self.rng.choice(self.syms)
        else:
            other = self.rng.choice(_SPECIAL_FLOATS)
        t, perm = self.elementwise_type(x, dtype)
        self.add_tensor(self.op(name, x, other, out_type=t), perm)
        return True

    def reduce(self) -> bool:
        x = self.pick(lambda v: v.type.rank >= 1 and self.contiguous(v) and v.type.dtype != torch.bool)
        if x is None:
            return False
        rank = x.type.rank
        dims = sorted(self.rng.sample(range(rank), self.rng.randint(1, min(rank, 2))))
        keepdim = self.rng.random() < 0.3
        shape = [1 if i in dims else d for i, d in enumerate(x.type.shape)] if keepdim else [
            d for i, d in enumerate(x.type.shape) if i not in dims
        ]
        aten = self.rng.random() < 0.7
        dtype = self.rng.choice([None, torch.float64]) if aten and not x.type.dtype.is_complex else None
        t = self.ttype(shape, dtype or (torch.int64 if x.type.dtype in _INTS else x.type.dtype))
        if aten:
            out = self.op("aten.sum.dim_IntList", x, dims, keepdim, out_type=t, dtype=dtype)
        else:
            dim_arg = tuple(dims) if len(dims) > 1 else dims[0]
            out = self.op("torch.sum", x, out_type=t, dim=dim_arg, keepdim=keepdim)
        self.add_tensor(out)
        return True

    def max_dim(self) -> bool:
        x = self.pick(lambda v: v.type.rank >= 1 and self.contiguous(v) and not v.type.dtype.is_complex)
        if x is None:
            return False
        d = self.rng.randrange(x.type.rank)
        keepdim = self.rng.random() < 0.3
        shape = list(x.type.shape)
        if keepdim:
            shape[d] = 1
        else:
            del shape[d]
        types = [self.ttype(shape, x.type.dtype), self.ttype(shape, torch.int64)]
        values, indices = self.op("aten.max.dim", x, d, keepdim, out_type=types)
        self.add_tensor(values)
        self.add_tensor(indices)
        return True

    def permute(self) -> bool:
        x = self.pick(lambda v: v.type.rank >= 2)
        if x is None:
            return False
        order = list(range(x.type.rank))
        self.rng.shuffle(order)
        shape = tuple(x.type.shape[i] for i in order)
        strides = tuple(x.type.strides[i] for i in order)
        perm, dense = self.layout[x.name]
        new_perm = tuple(order.index(d) for d in perm)
        t = self.ttype(shape, x.type.dtype, strides=strides)
        kind = self.rng.randrange(3)
        if kind == 0:
            out = self.op("aten.permute.default", x, order, out_type=t)
        elif kind == 1:
            out = self.op("torch.permute", x, tuple(order), out_type=t)
        else:
            out = self.op("torch.Tensor.permute", x, *order, out_type=t)
        self.add_tensor(out, new_perm, dense)
        return True

    def view(self) -> bool:
        x = self.pick(lambda v: v.type.rank >= 2 and self.contiguous(v))
        if x is None:
            return False
        shape = list(x.type.shape)
        i = self.rng.randrange(len(shape) - 1)
        merged = normalize_dim(shape[i] * shape[i + 1])
        new_shape = shape[:i] + [merged] + shape[i + 2:]
        size_arg = list(new_shape)
        sym = self.syms_by_expr.get(new_shape[0])
        if sym is not None and self.rng.random() < 0.7:
            size_arg[0] = sym  # a symbolic int computed in the graph, as capture records them
        t = self.ttype(new_shape, x.type.dtype)
        self.add_tensor(self.op("aten.view.default", x, size_arg, out_type=t))
        return True

    def transpose(self) -> bool:
        x = self.pick(lambda v: v.type.rank == 2)
        if x is None:
            return False
        perm, dense = self.layout[x.name]
        t = self.ttype(x.type.shape[::-1], x.type.dtype, strides=x.type.strides[::-1])
        self.add_tensor(self.op("aten.t.default", x, out_type=t), (perm[0] ^ 1, perm[1] ^ 1), dense)
        return True

    def mm(self) -> bool:
        x = self.pick(lambda v: v.type.rank == 2 and (v.type.dtype in _FLOATS or v.type.dtype.is_complex))
        if x is None:
            return False
        partners = self.matrices.get((x.type.dtype, x.type.shape[1]))
        if not partners:
            return False
        y = self.rng.choice(partners)
        shape = (x.type.shape[0], y.type.shape[1])
        if self.numel_bound(shape) > _MAX_NUMEL:
            return False
        self.add_tensor(self.op("aten.mm.default", x, y, out_type=self.ttype(shape, x.type.dtype)))
        return True

    def cat(self) -> bool:
        x = self.pick(lambda v: v.type.rank >= 1 and self.contiguous(v))
        if x is None:
            return False
        same = [v for v in self.by_type[x.type] if self.contiguous(v)]
        parts = [x] + [self.rng.choice(same) for _ in range(self.rng.randint(1, 2))]
        stack = self.rng.random() < 0.3 and x.type.rank < _MAX_RANK
        d = self.rng.randrange(x.type.rank + (1 if stack else 0))
        shape = list(x.type.shape)
        if stack:
            shape.insert(d, len(parts))
        else:
            shape[d] = normalize_dim(sum((p.type.shape[d] for p in parts[1:]), parts[0].type.shape[d]))
        if self.numel_bound(shape) > _MAX_NUMEL:
            return False
        t = self.ttype(shape, x.type.dtype)
        if stack:
            out = self.op("torch.stack", tuple(parts), out_type=t, dim=d)
        else:
            out = self.op("aten.cat.default", parts, d, out_type=t)
        self.add_tensor(out)
        return True

    def getitem(self) -> bool:
        x = self.pick(lambda v: v.type.rank >= 1 and self.contiguous(v))
        if x is None:
            return False
        shape, strides = list(x.type.shape), list(x.type.strides)
        # x[::2] only on a plain leading size (sympy is slow to simplify floor divisions of sums);
        # x[..., 1:] only where the last size stays >= 1 (symbols stand for sizes >= 2).
        can_step = isinstance(shape[0], (int, sympy.Symbol))
        can_offset = isinstance(shape[-1], sympy.Symbol) or (isinstance(shape[-1], int) and shape[-1] >= 3)
        if not (can_step or can_offset):
            return False
        if can_step and (not can_offset or self.rng.random() < 0.5):
            index = (Slice(None, None, 2), Ellipsis)
            shape[0] = floordiv(shape[0] + 1, 2)
            strides[0] = normalize_dim(strides[0] * 2)
        else:
            index = (Ellipsis, Slice(1, None, None))
            shape[-1] = normalize_dim(shape[-1] - 1)
        t = self.ttype(shape, x.type.dtype, strides=strides)
        self.add_tensor(self.op("torch.Tensor.__getitem__", x, index, out_type=t), dense=False)
        return True

    def convert(self) -> bool:
        x = self.pick(lambda v: not v.type.dtype.is_complex)
        if x is None:
            return False
        dtype = self.rng.choice([torch.float32, torch.float64, torch.int64, torch.int32])
        choice = self.rng.randrange(3)
        if choice == 0:
            # Every constant kind a factory-style call carries: dtype, layout, device, bool, memory format.
            out = self.op("aten._to_copy.default", x, out_type=self.ttype(x.type.shape, dtype), dtype=dtype,
                          layout=torch.strided, device=torch.device("cpu"), pin_memory=False,
                          memory_format=torch.contiguous_format)
            self.add_tensor(out)
        elif choice == 1:
            out = self.op("aten.clone.default", x, out_type=self.ttype(x.type.shape, x.type.dtype),
                          memory_format=torch.contiguous_format)
            self.add_tensor(out)
        else:
            out = self.op("torch.Tensor.contiguous", x, out_type=self.ttype(x.type.shape, x.type.dtype))
            self.add_tensor(out)
        return True

    def factory(self) -> bool:
        shape = [self.dim() for _ in range(self.rng.randint(1, 3))]
        if self.symbolic:
            # Only symbols that appear in input shapes can be bound when the graph runs.
            shape = [d if isinstance(d, int) or d.name in self.live_symbols else 3 for d in shape]
        dtype = self.rng.choice(_FLOATS + _INTS)
        fill = self.rng.randint(-2, 2) if dtype in _INTS else self.rng.choice([1.5, -0.0, math.inf])
        t = self.ttype(shape, dtype)
        out = self.op("aten.full.default", shape, fill, out_type=t, dtype=dtype, layout=torch.strided,
                      device=torch.device("cpu"), pin_memory=False)
        self.add_tensor(out)
        return True

    def sym_size(self) -> bool:
        x = self.pick(lambda v: v.type.rank >= 1)
        if x is None:
            return False
        d = self.rng.randrange(x.type.rank)
        size = x.type.shape[d]
        s = self.op("aten.sym_size.int", x, d, out_type=SymIntType(size))
        self.add_sym(s)
        return True

    def sym_arith(self) -> bool:
        if not self.syms:
            return False
        s = self.rng.choice(self.syms)
        k = self.rng.randint(2, 3)
        name = self.rng.choice(["operator.mul", "operator.add"])
        expr = s.type.expr * k if name == "operator.mul" else s.type.expr + k
        self.add_sym(self.op(name, s, k, out_type=SymIntType(normalize_dim(expr))))
        return True

    def item(self) -> bool:
        x = self.pick(lambda v: v.type.rank == 0 and v.type.dtype in _FLOATS + _INTS)
        if x is None:
            return False
        kind = "float" if x.type.dtype in _FLOATS else "int"
        value = self.op("torch.Tensor.item", x, out_type=ScalarType(kind))
        if kind == "float":
            self.floats.append(value)
        return True


_OPS = (
    (_Generator.unary, 5), (_Generator.binary, 5), (_Generator.scalar, 4), (_Generator.reduce, 2),
    (_Generator.max_dim, 1), (_Generator.permute, 2), (_Generator.view, 2), (_Generator.transpose, 1),
    (_Generator.mm, 2), (_Generator.cat, 2), (_Generator.getitem, 2), (_Generator.convert, 2),
    (_Generator.factory, 1), (_Generator.sym_size, 1), (_Generator.sym_arith, 1), (_Generator.item, 1),
)
_OP_FUNCS = [f for f, _ in _OPS]
_OP_WEIGHTS = [w for _, w in _OPS]


def random_graph(seed: int, num_nodes: int = 20, symbolic: bool = True) -> Graph:
    """A random valid graph of exactly `num_nodes` nodes, the same for the same arguments.

    Inputs are 2-4 float and int tensors whose dims are the symbols s0..s2 (when `symbolic`)
    or small constants. Outputs are the values no node reads.
    """
    with paused_gc():
        return _random_graph(seed, num_nodes, symbolic)


def _random_graph(seed: int, num_nodes: int, symbolic: bool) -> Graph:
    gen = _Generator(seed, symbolic)
    rng = gen.rng
    for i in range(rng.randint(2, 4)):
        rank = rng.randint(1, 3)
        shape = [gen.dim() for _ in range(rank)]
        dtype = torch.int64 if i == 1 and rng.random() < 0.5 else rng.choice(_FLOATS)
        gen.inputs.append(gen.add_tensor(Value(f"x{i}", gen.ttype(shape, dtype))))
    gen.live_symbols = frozenset().union(*(v.type.free_symbols for v in gen.inputs))
    while len(gen.nodes) < num_nodes:
        op = rng.choices(_OP_FUNCS, _OP_WEIGHTS)[0]
        op(gen)
    values = [v for node in gen.nodes for v in node.outputs]
    outputs = [v for v in values if v.name not in gen.used] or values[-1:] or gen.inputs[:1]
    return Graph(gen.name, tuple(gen.inputs), tuple(gen.nodes), tuple(outputs))
