"""Opcode handlers for operators, subscripts and attributes, and the Python-value helpers they share."""

import collections
import operator
import types

import sympy
import torch

from torchsmith.capture.errors import Unsupported
from torchsmith.capture.numpy_values import NumpyVar
from torchsmith.capture.variables import (
    BuiltinMethodVar,
    ConstVar,
    DataclassVar,
    DictVar,
    FunctionVar,
    IteratorVar,
    ListVar,
    MethodVar,
    ObjectVar,
    PartialVar,
    SetVar,
    SymVar,
    TensorVar,
    TupleVar,
    VariableTracker,
    make_tuple,
)
from torchsmith.ir.symbolic import floordiv, mod

BINARY = {
    "+": ("add", operator.add),
    "-": ("sub", operator.sub),
    "*": ("mul", operator.mul),
    "/": ("truediv", operator.truediv),
    "//": ("floordiv", operator.floordiv),
    "%": ("mod", operator.mod),
    "**": ("pow", operator.pow),
    "@": ("matmul", operator.matmul),
    "&": ("and", operator.and_),
    "|": ("or", operator.or_),
    "^": ("xor", operator.xor),
    "<<": ("lshift", operator.lshift),
    ">>": ("rshift", operator.rshift),
}
COMPARE = {
    "<": ("lt", operator.lt),
    "<=": ("le", operator.le),
    ">": ("gt", operator.gt),
    ">=": ("ge", operator.ge),
    "==": ("eq", operator.eq),
    "!=": ("ne", operator.ne),
}
_REFLECTED_COMPARE = {"lt": "gt", "le": "ge", "gt": "lt", "ge": "le", "eq": "eq", "ne": "ne"}


_READ_ONLY_VIEWS = (
    types.MappingProxyType,
    type({}.keys()),
    type({}.values()),
    type({}.items()),
    type(collections.OrderedDict().keys()),
    type(collections.OrderedDict().values()),
    type(collections.OrderedDict().items()),
)


class PythonOps:
    """Mixin of the Tracer."""

    # ----------------------------------------------------------------- helpers
    def as_python(self, tracker: VariableTracker):
        """The plain Python value of a tracker made only of constants; raises otherwise."""
        if isinstance(tracker, ConstVar):
            value = tracker.value
            if isinstance(value, slice) and any(isinstance(p, sympy.Expr) for p in (value.start, value.stop,
                                                                                    value.step)):
                return slice(*[self.shape_env.specialize(p) if isinstance(p, sympy.Expr) else p
                               for p in (value.start, value.stop, value.step)])
            return value
        if isinstance(tracker, SymVar):
            return self.shape_env.specialize(tracker.expr)
        if isinstance(tracker, ListVar):
            return [self.as_python(t) for t in tracker.items]
        if isinstance(tracker, TupleVar):
            return make_tuple(tracker.cls, [self.as_python(t) for t in tracker.items])
        if isinstance(tracker, DictVar):
            return {k: self.as_python(v) for k, v in tracker.items.items()}
        if isinstance(tracker, SetVar):
            return {t.value for t in tracker.items}
        raise Unsupported(f"{tracker.describe()} is not a Python constant here")

    def is_pythonic(self, tracker) -> bool:
        try:
            self.as_python(tracker)
        except Unsupported:
            return False
        return True

    def truth(self, tracker) -> bool:
        if isinstance(tracker, ObjectVar):
            return self.user_object_truth(tracker)
        if isinstance(tracker, DataclassVar):
            if tracker.dict_like:
                return bool(self.dataclass_items(tracker))
            if hasattr(tracker.cls, "__bool__") or hasattr(tracker.cls, "__len__"):
                raise Unsupported(f"truth value of {tracker.describe()}")
            return True
        if isinstance(tracker, ConstVar):
            try:
                return bool(tracker.value)
            except Exception as e:
                raise Unsupported(f"truth value of {tracker.describe()}: {e}") from e
        if isinstance(tracker, SymVar):
            return self.shape_env.decide(sympy.Ne(tracker.expr, 0))
        if isinstance(tracker, (ListVar, TupleVar, SetVar)):
            return bool(tracker.items)
        if isinstance(tracker, DictVar):
            return bool(tracker.items)
        if isinstance(tracker, TensorVar):
            raise Unsupported("truth value of a tensor (data-dependent control flow)")
        if isinstance(tracker, (FunctionVar, MethodVar, BuiltinMethodVar, PartialVar)):
            return True
        raise Unsupported(f"truth value of {tracker.describe()}")

    def sequence_items(self, tracker) -> list:
        """The items iterating `tracker` yields."""
        if isinstance(tracker, (ListVar, TupleVar)):
            return list(tracker.items)
        if isinstance(tracker, IteratorVar):
            items = tracker.remaining()
            tracker.position = len(tracker.items)
            return items
        if isinstance(tracker, DictVar):
            return [ConstVar(k) for k in tracker.items]
        if isinstance(tracker, SetVar):
            return list(tracker.items)
        if isinstance(tracker, DataclassVar) and tracker.dict_like:
            return [ConstVar(k) for k in self.dataclass_items(tracker)]
        if isinstance(tracker, ObjectVar):
            return self.sequence_items(self.user_object_dunder(tracker, "__iter__", []))
        if isinstance(tracker, TensorVar):
            shape = tracker.type.shape
            if not shape:
                raise Unsupported("iteration over a 0-d tensor")
            return [
                self.call_tensor_method(tracker, "__getitem__", [ConstVar(i)], {})
                for i in range(self.shape_env.specialize(shape[0]))
            ]
        if isinstance(tracker, ConstVar):
            value = tracker.value
            if isinstance(value, torch.nn.Module):
                return self.module_items(tracker)
            if isinstance(value, (tuple, list, range, str, bytes, frozenset, set, dict)):
                return [self.wrap_unguarded(v) for v in value]
            if isinstance(value, (type(iter(())), type(iter([])))):
                raise Unsupported("iterating over a Python iterator object passed in")
            if tracker.source is None and isinstance(value, _READ_ONLY_VIEWS):
                # made at capture time (a signature's parameters): fixed, so iterate it now
                return [self.wrap_unguarded(v) for v in value]
        raise Unsupported(f"iteration over {tracker.describe()}")

    def module_items(self, tracker: ConstVar) -> list:
        module = tracker.value
        src = tracker.source
        if src and isinstance(
            module, (torch.nn.Sequential, torch.nn.ModuleList, torch.nn.ModuleDict, torch.nn.ParameterList)
        ):
            self.guards.add(
                f"len({src}._modules) == {len(module._modules)}"
                if not isinstance(module, torch.nn.ParameterList)
                else f"len({src}) == {len(module)}"
            )
        if isinstance(module, (torch.nn.Sequential, torch.nn.ModuleList)):
            # `_modules[key]` is a dict lookup; `module[i]` walks the container on every guard check
            return [
                self.wrap(m, f"{src}._modules[{self.ns.literal(k)}]" if src else None)
                for k, m in module._modules.items()
            ]
        if isinstance(module, torch.nn.ModuleDict):
            if src:
                self.guards.add(f"list({src}._modules) == {self.ns.name_of(list(module._modules))}")
            return [ConstVar(k) for k in module.keys()]
        if isinstance(module, (torch.nn.ParameterList,)):
            return [self.wrap(p, f"{src}[{i}]" if src else None) for i, p in enumerate(module)]
        raise Unsupported(f"iteration over module {type(module).__name__}")

    # ----------------------------------------------------------------- operators
    def op_BINARY_OP(self, frame, ins):
        right = frame.pop()
        left = frame.pop()
        frame.push(self.binary(ins.argval, left, right))

    def binary(self, symbol: str, left, right):
        inplace = symbol.endswith("=") and symbol not in ("==", "!=", "<=", ">=")
        name, fn = BINARY[symbol[:-1] if inplace else symbol]
        if isinstance(left, TensorVar):
            dunder = f"__i{name}__" if inplace else f"__{name}__"
            return self.call_tensor_method(left, dunder, [right], {})
        if isinstance(right, TensorVar):
            return self.call_tensor_method(right, f"__r{name}__", [left], {})
        if isinstance(left, SymVar) or isinstance(right, SymVar):
            symbolic = self.symbolic_binary(name, left, right)
            if symbolic is not None:
                return symbolic
        if isinstance(left, ListVar) and inplace and name == "add":
            left.items.extend(self.sequence_items(right))
            left.mutated = True
            return left
        if isinstance(left, (ListVar, TupleVar)) and isinstance(right, (ListVar, TupleVar)) and name == "add":
            if type(left) is not type(right):
                raise Unsupported("adding a list and a tuple")
            return type(left)(list(left.items) + list(right.items))
        if name == "mul" and isinstance(left, (ListVar, TupleVar)) and isinstance(right, ConstVar):
            return type(left)(list(left.items) * right.value)
        if isinstance(left, ConstVar) and isinstance(right, ConstVar):
            return self.fold(fn, left.value, right.value)
        if self.is_pythonic(left) and self.is_pythonic(right):
            return self.wrap_unguarded(self.fold(fn, self.as_python(left), self.as_python(right)).value)
        raise Unsupported(f"operator {symbol} on {left.describe()} and {right.describe()}")

    def symbolic_binary(self, name: str, left, right):
        """`left <op> right` on sizes, kept symbolic for + - * // %; None for anything else."""
        operands = []
        for side in (left, right):
            if isinstance(side, SymVar):
                operands.append(side.expr)
            elif isinstance(side, ConstVar) and type(side.value) is int:
                operands.append(side.value)
            else:
                return None
        a, b = operands
        rules = {
            "add": lambda: a + b,
            "sub": lambda: a - b,
            "mul": lambda: a * b,
            "floordiv": lambda: floordiv(a, b),
            "mod": lambda: mod(a, b),
        }
        if name not in rules:
            return None
        return self.size_var(sympy.sympify(rules[name]()))

    @staticmethod
    def is_size_list(items) -> bool:
        """Whether `items` are ints with at least one symbolic size among them."""
        return any(isinstance(i, SymVar) for i in items) and all(
            isinstance(i, SymVar) or (isinstance(i, ConstVar) and type(i.value) is int) for i in items
        )

    def symbolic_min_max(self, largest: bool, items):
        """`max(items)` (`min`) of sizes: the winner stays symbolic, the order that picked it is guarded."""
        best = items[0]
        for item in items[1:]:
            a, b = (v.expr if isinstance(v, SymVar) else v.value for v in (item, best))
            if self.shape_env.decide(sympy.Gt(a, b) if largest else sympy.Lt(a, b)):
                best = item
        return best

    def fold(self, fn, *args):
        try:
            return ConstVar(fn(*args))
        except Exception as e:
            raise Unsupported(f"{getattr(fn, '__name__', fn)} raised {type(e).__name__}: {e}") from e

    def op_UNARY_NEGATIVE(self, frame, ins):
        frame.push(self.unary(frame.pop(), "__neg__", operator.neg))

    def op_UNARY_POSITIVE(self, frame, ins):
        frame.push(self.unary(frame.pop(), "__pos__", operator.pos))

    def op_UNARY_INVERT(self, frame, ins):
        frame.push(self.unary(frame.pop(), "__invert__", operator.invert))

    def unary(self, value, dunder, fn):
        if isinstance(value, TensorVar):
            return self.call_tensor_method(value, dunder, [], {})
        if isinstance(value, SymVar) and dunder == "__neg__":
            return SymVar(-value.expr)
        if isinstance(value, ConstVar):
            return self.fold(fn, value.value)
        raise Unsupported(f"{dunder} on {value.describe()}")

    def op_UNARY_NOT(self, frame, ins):
        frame.push(ConstVar(not self.truth(frame.pop())))

    def op_COMPARE_OP(self, frame, ins):
        right = frame.pop()
        left = frame.pop()
        name, fn = COMPARE[ins.argval]
        if isinstance(left, TensorVar):
            frame.push(self.call_tensor_method(left, f"__{name}__", [right], {}))
        elif isinstance(right, TensorVar):
            frame.push(self.call_tensor_method(right, f"__{_REFLECTED_COMPARE[name]}__", [left], {}))
        elif (isinstance(left, SymVar) or isinstance(right, SymVar)) and all(
            isinstance(v, SymVar) or (isinstance(v, ConstVar) and type(v.value) is int) for v in (left, right)
        ):
            a, b = (v.expr if isinstance(v, SymVar) else v.value for v in (left, right))
            relation = {
                "lt": sympy.Lt,
                "le": sympy.Le,
                "gt": sympy.Gt,
                "ge": sympy.Ge,
                "eq": sympy.Eq,
                "ne": sympy.Ne,
            }[name](a, b)
            frame.push(ConstVar(self.shape_env.decide(relation)))
        elif self.is_pythonic(left) and self.is_pythonic(right):
            frame.push(self.fold(fn, self.as_python(left), self.as_python(right)))
        elif name in ("eq", "ne"):
            same = self.same_object(left, right)
            frame.push(ConstVar(same if name == "eq" else not same))
        else:
            raise Unsupported(f"comparison {ins.argval} of {left.describe()} and {right.describe()}")

    def same_object(self, left, right) -> bool:
        if isinstance(left, ConstVar) and isinstance(right, ConstVar):
            same = left.value is right.value
            modules = isinstance(left.value, torch.nn.Module) or isinstance(right.value, torch.nn.Module)
            if modules and (left.source or right.source) and not (same and left.source and right.source):
                # modules are guarded by class, not identity (Tracer.wrap), so the answer is
                # guarded here (one module read through two paths already is, by Tracer.wrap)
                sides = [t.source or self.ns.name_of(t.value) for t in (left, right)]
                self.guards.add(f"{sides[0]} {'is' if same else 'is not'} {sides[1]}")
            return same
        if isinstance(left, TensorVar) and isinstance(right, TensorVar):
            return left.value == right.value
        if left is not right and isinstance(left, NumpyVar) and isinstance(right, NumpyVar):
            # two arrays read through different sources may be one object on a later call
            raise Unsupported(f"`is` between {left.describe()} and {right.describe()}")
        return left is right

    def op_IS_OP(self, frame, ins):
        right = frame.pop()
        left = frame.pop()
        frame.push(ConstVar(self.same_object(left, right) != bool(ins.arg)))

    def op_CONTAINS_OP(self, frame, ins):
        container = frame.pop()
        item = frame.pop()
        if isinstance(container, ObjectVar) and self.class_member(container.cls, "__contains__"):
            found = self.truth(self.user_object_dunder(container, "__contains__", [item]))
        elif isinstance(container, DictVar):
            found = self.as_python(item) in container.items
        elif isinstance(container, ConstVar) and not isinstance(container.value, torch.nn.Module):
            found = self.as_python(item) in container.value
        elif isinstance(item, ConstVar) and not isinstance(item.value, torch.nn.Module):
            found = any(
                isinstance(t, ConstVar) and t.value == item.value for t in self.sequence_items(container)
            )
        else:
            found = any(self.same_object(item, t) for t in self.sequence_items(container))
        frame.push(ConstVar(found != bool(ins.arg)))

    # ----------------------------------------------------------------- subscripts
    def op_BINARY_SUBSCR(self, frame, ins):
        key = frame.pop()
        container = frame.pop()
        frame.push(self.subscript(container, key))

    def subscript(self, container, key):
        if isinstance(container, TensorVar):
            return self.call_tensor_method(container, "__getitem__", [key], {})
        if isinstance(container, ObjectVar):
            return self.user_object_dunder(container, "__getitem__", [key])
        if isinstance(key, TensorVar):
            raise Unsupported("indexing a Python container with a tensor")
        k = self.as_python(key)
        if isinstance(container, (ListVar, TupleVar)):
            try:
                picked = container.items[k]
            except (IndexError, TypeError) as e:
                raise Unsupported(f"indexing raised {type(e).__name__}: {e}") from e
            if isinstance(k, slice):
                return type(container)(picked) if isinstance(container, ListVar) else TupleVar(picked)
            return picked
        if isinstance(container, DataclassVar):
            return self.dataclass_subscript(container, key)
        if isinstance(container, DictVar):
            if k not in container.items:
                raise Unsupported(f"KeyError: {k!r}")
            return container.items[k]
        if isinstance(container, ConstVar):
            value = container.value
            if isinstance(
                value,
                (
                    torch.nn.ModuleList,
                    torch.nn.Sequential,
                    torch.nn.ModuleDict,
                    torch.nn.ParameterList,
                    torch.nn.ParameterDict,
                ),
            ):
                if isinstance(k, slice):
                    # a new container of the members found now: pinned to this instance
                    self.specialize_module(container)
                    return self.wrap(value[k], None)
                src = f"{container.source}[{self.ns.literal(k)}]" if container.source else None
                if src and _plain_module_list(value) and type(k) is int and -len(value) <= k < len(value):
                    # a member by its key, as ModuleList.__getitem__ finds it (`_modules[str(i)]`
                    # for 0 <= i < len): a dict lookup instead of that method's Python on every
                    # guard check and call. A negative index depends on the length.
                    length = f"len({container.source}._modules)"
                    self.guards.add(f"{length} == {len(value)}" if k < 0 else f"{length} > {k}")
                    src = f"{container.source}._modules[{self.ns.literal(str(k % len(value)))}]"
                return self.wrap(value[k], src)
            try:
                result = value[k]
            except Exception as e:
                raise Unsupported(f"indexing raised {type(e).__name__}: {e}") from e
            source = (
                f"{container.source}[{self.ns.literal(k)}]"
                if container.source and not isinstance(k, slice)
                else None
            )
            return self.wrap(result, source) if source else self.wrap_unguarded(result)
        raise Unsupported(f"indexing {container.describe()}")

    def op_STORE_SUBSCR(self, frame, ins):
        key = frame.pop()
        container = frame.pop()
        value = frame.pop()
        if isinstance(container, TensorVar):
            self.call_tensor_method(container, "__setitem__", [key, value], {})
        elif isinstance(container, ListVar):
            container.items[self.as_python(key)] = value
            container.mutated = True
        elif isinstance(container, DictVar):
            container.items[self.dict_key(key)] = value
            container.mutated = True
        elif isinstance(container, ObjectVar):
            self.user_object_dunder(container, "__setitem__", [key, value])
        else:
            raise Unsupported(f"item assignment on {container.describe()}")

    def op_DELETE_SUBSCR(self, frame, ins):
        key = frame.pop()
        container = frame.pop()
        if isinstance(container, (ListVar, DictVar)):
            k = self.as_python(key)
            if isinstance(container, DictVar) and k not in container.items:
                raise Unsupported(f"KeyError: {k!r}")
            del container.items[k]
            container.mutated = True
        else:
            raise Unsupported(f"item deletion on {container.describe()}")


def _plain_module_list(value) -> bool:
    """A ModuleList whose indexing and length are ModuleList's own: `value[i]` is
    `value._modules[str(i)]` for `0 <= i < len(value._modules)`."""
    cls = type(value)
    return (
        isinstance(value, torch.nn.ModuleList)
        and cls.__getitem__ is torch.nn.ModuleList.__getitem__
        and cls.__len__ is torch.nn.ModuleList.__len__
    )
