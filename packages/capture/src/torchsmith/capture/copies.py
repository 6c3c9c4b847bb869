"""`copy.deepcopy` inside compiled code (transformers copies its config in `forward`).

Tracing `deepcopy` line by line would walk `copy`'s dispatch tables, `__reduce_ex__` and
`object.__new__`, each a graph break. A copy of plain Python data needs no graph at all, so capture
makes it at capture time:

- the argument's whole object graph is read once into a state (nested tuples of types and values);
  an argument that holds a tensor, a module or anything else whose state is not plain data is a
  graph break naming what it holds and where;
- the argument is guarded on that state (one guard, `state_of(source) == recorded`), so a
  config changed between calls recompiles;
- the copy is a *private* object: nobody outside the capture sees it, so what is read from it needs
  no guards and attribute stores on it run natively at capture time;
- a private copy that escapes the graph (returned, stored, passed to a resume function) is copied
  again after the graph, from its state at the end of the capture, so every call gets a new object
  as in eager.

Lists, tuples and dicts the capture tracks item by item are copied tracker by tracker.
"""

import copy
import enum
import functools
import types

import torch

from torchsmith.capture.errors import Unsupported
from torchsmith.capture.variables import ConstVar, DictVar, ListVar, TensorVar, TupleVar

# What deepcopy returns as is (copy's atomic types, plus torch's immutable scalars)
_ATOMIC = (
    type(None), bool, int, float, complex, str, bytes, type, range, types.FunctionType,
    types.BuiltinFunctionType, types.CodeType, type(Ellipsis), type(NotImplemented), property,
    torch.dtype, torch.device, enum.Enum,
)
_CONTAINERS = (list, tuple, dict, set, frozenset)
_HEAP_TYPE = 1 << 9  # Py_TPFLAGS_HEAPTYPE: the class was made by a class statement


# Types whose values are compared as they are (the common leaves of a config), without a call each
_LEAVES = frozenset({type(None), bool, int, str, bytes, complex, torch.dtype})


def state_of(value, _path=()):
    """The plain-data state of `value` as nested tuples, equal for objects deepcopy would copy
    alike; raises `Unsupported` naming what `value` holds that is not plain data.

    >>> state_of({"a": [1, 2.0]}) == state_of({"a": [1, 2.0]})
    True
    """
    kind = type(value)
    if kind in _LEAVES:
        return (kind, value)
    if issubclass(kind, _ATOMIC):
        if kind is float and value != value:
            return (float, "nan")
        return (kind, value)
    if id(value) in _path:
        raise Unsupported(f"copy.deepcopy of an object that holds itself ({kind.__qualname__})")
    path = (*_path, id(value))
    if issubclass(kind, dict):
        return (kind, tuple((_leaf_or_state(k, path), _leaf_or_state(v, path)) for k, v in value.items()))
    if issubclass(kind, (set, frozenset)):
        return (kind, frozenset(state_of(v, path) for v in value))
    if issubclass(kind, (list, tuple)):
        return (kind, tuple(_leaf_or_state(v, path) for v in value))
    if issubclass(kind, (torch.Tensor, torch.nn.Module)):
        raise Unsupported(
            f"copy.deepcopy of an object that holds a {kind.__qualname__}: capture copies "
            "plain Python data only (copy the tensors outside the compiled function)"
        )
    if not _plain_class(kind):
        raise Unsupported(f"copy.deepcopy of a {kind.__qualname__}, whose state is not a plain __dict__")
    # read past the class's own __getattribute__ (transformers' configs have one): the state is the dict
    attrs = object.__getattribute__(value, "__dict__")
    return (kind, tuple((k, _leaf_or_state(v, path)) for k, v in attrs.items()))


def state_check(value, state):
    """`x -> state_of(x) == state` for `state = state_of(value)`, run by a guard on every call. For
    an object of a plain class (a config) `same_state` answers first, at C speed; only where it
    does not hold (a changed value, another NaN object) is the whole state rebuilt and compared."""

    def exact(x) -> bool:
        return state_of(x) == state

    kind = type(value)
    if kind in _LEAVES or issubclass(kind, _ATOMIC) or issubclass(kind, _CONTAINERS):
        return exact
    quick = same_state(value)
    return lambda x: quick(x) or exact(x)


def same_state(value):
    """`x -> bool`: True only where `x`'s state equals `value`'s now (`state_of`), compared at C
    speed: the same class, the same attribute names in order, the same value types, values equal
    (`==`) and the state of each attribute that is neither a leaf nor atomic (a dict, a nested
    object) equal, a dict of leaves by its items and their types. False where any of that
    differs, even if the states are equal (another NaN object). `value` is an object of a plain
    class; raises `Unsupported` where its state is not plain data."""
    kind = type(value)
    # read past the class's own __getattribute__ (transformers' configs have one): the state is the dict
    attrs = _instance_dict(value)
    if not _plain_class(kind) or attrs is None:
        raise Unsupported(f"the state of a {kind.__qualname__} is not a plain __dict__")
    snapshot = dict(attrs)  # the leaves are immutable; the other values are checked by their state
    names, kinds = list(attrs), [type(v) for v in attrs.values()]
    # values compared as they are in the state (leaves, atomics) need no more than `==` and their type
    nested = [
        (k, leaf_dict_check(v) or _state_equals(state_of(v)))
        for k, v in attrs.items()
        if not (type(v) in _LEAVES or isinstance(v, _ATOMIC))
    ]

    def check(x) -> bool:
        if type(x) is not kind:
            return False
        d = object.__getattribute__(x, "__dict__")
        return (
            list(d) == names
            and list(map(type, d.values())) == kinds
            and d == snapshot
            and all(same(d[k]) for k, same in nested)
        )

    return check


def _instance_dict(value) -> dict | None:
    """`value`'s own `__dict__`, None where it has none (objects of C++ bindings: pybind11 classes
    are heap types too)."""
    try:
        attrs = object.__getattribute__(value, "__dict__")
    except AttributeError:
        return None
    return attrs if type(attrs) is dict else None


def _state_equals(state):
    return lambda x: state_of(x) == state


def leaf_dict_check(value):
    """For a dict of leaves and floats (`{0: "a", "theta": 1e4}`), `x -> bool` at C speed, True
    only where `state_of(x) == state_of(value)` (by its items and their types; a NaN value makes
    it False, and the callers then compare the whole state); None for anything else."""
    if type(value) is not dict:
        return None
    if not all(type(k) in _LEAVES and (type(v) in _LEAVES or type(v) is float) for k, v in value.items()):
        return None
    items = list(value.items())
    key_types, value_types = list(map(type, value)), list(map(type, value.values()))
    return lambda x: (
        type(x) is dict
        and list(x.items()) == items
        and list(map(type, x)) == key_types
        and list(map(type, x.values())) == value_types
    )


def _leaf_or_state(value, path):
    kind = type(value)
    return (kind, value) if kind in _LEAVES else state_of(value, path)


def object_ids(value, found: set) -> set:
    """The ids of the mutable objects reachable from `value` (the ones `state_of` reads)."""
    if isinstance(value, _ATOMIC) or id(value) in found:
        return found
    found.add(id(value))
    if isinstance(value, dict):
        for k, v in value.items():
            object_ids(k, found)
            object_ids(v, found)
    elif isinstance(value, (list, tuple, set, frozenset)):
        for v in value:
            object_ids(v, found)
    elif type(getattr(value, "__dict__", None)) is dict:
        for v in vars(value).values():
            object_ids(v, found)
    return found


@functools.cache
def _plain_class(cls: type) -> bool:
    """A class made by a class statement whose instances keep their state in a `__dict__` (C types
    and slots keep state deepcopy reaches through other means)."""
    bases = cls.__mro__[:-1]
    return all(klass.__flags__ & _HEAP_TYPE and "__slots__" not in klass.__dict__ for klass in bases)


class CopyOps:
    """Mixin of the Tracer: `copy.deepcopy` and the private objects it makes."""

    def deep_copy(self, args, kwargs):
        if len(args) != 1 or kwargs:
            raise Unsupported("copy.deepcopy with a memo argument (capture copies one object whole)")
        return self.copy_tracker(args[0], {})

    def copy_tracker(self, tracker, memo: dict):
        """A new tracker holding what `copy.deepcopy` of `tracker`'s value would be."""
        if id(tracker) in memo:
            return memo[id(tracker)]
        if isinstance(tracker, TensorVar):
            raise Unsupported("copy.deepcopy of a tensor (capture copies plain Python data only)")
        if isinstance(tracker, (ListVar, TupleVar)):
            items = [self.copy_tracker(item, memo) for item in tracker.items]
            copied = ListVar(items) if isinstance(tracker, ListVar) else TupleVar(items, cls=tracker.cls)
        elif isinstance(tracker, DictVar):
            items = {k: self.copy_tracker(v, memo) for k, v in tracker.items.items()}
            copied = DictVar(items, cls=tracker.cls)
        elif isinstance(tracker, ConstVar):
            copied = self.copy_constant(tracker)
        else:
            raise Unsupported(f"copy.deepcopy of {tracker.describe()}")
        memo[id(tracker)] = copied
        return copied

    def copy_constant(self, tracker: ConstVar):
        value = tracker.value
        if isinstance(value, _ATOMIC):
            return tracker
        recorded = state_of(value)
        written = {id(obj.value) for obj, _, _ in self.attr_writes.values()}
        if written & object_ids(value, set()):
            raise Unsupported(
                f"copy.deepcopy of a {type(value).__qualname__} whose attributes the compiled code "
                "set before the copy (the copy would miss them)"
            )
        self.check_private_containers(value, "copied again")
        if not self.is_private(value):
            root = tracker.source or self.ns.name_of(value)
            # copied again unchanged (T5 copies its config twice): the same expression, checked once
            seen = self.copied_states.setdefault(root, [])
            same = next((r for r in seen if r == recorded), None)
            if same is None:
                seen.append(recorded)
                same = recorded
            expr = f"{self.ns.name_of(state_of)}({root}) == {self.ns.name_of(same)}"
            self.guards.add(expr, fast=f"{self.ns.name_of(state_check(value, same))}({root})")
        return self.private(copy.deepcopy(value))

    # ----------------------------------------------------------------- private objects
    def private(self, value) -> ConstVar:
        """A tracker of an object only this capture can see (its reads need no guards)."""
        if not isinstance(value, _ATOMIC):
            self.private_objects[id(value)] = value
        return ConstVar(value)

    def check_private_containers(self, value, what: str) -> None:
        """Refuse to use a private object natively (copy it, rebuild it after the graph) when a list
        or dict read from it was changed through its tracker: the object itself does not hold the
        change."""
        reached = object_ids(value, set())
        for (owner, name), (_, tracker) in self.private_reads.items():
            if owner in reached and _changed(tracker):
                raise Unsupported(
                    f"attribute {name!r} of a copy made by copy.deepcopy was changed in place, and the "
                    f"copy is {what} (capture changes such copies by attribute stores only)"
                )

    def is_private(self, value) -> bool:
        return self.private_objects.get(id(value)) is value

    def private_setattr(self, obj: ConstVar, name: str, value) -> None:
        """Store on a private object natively: capture owns it, so the store is the object's state."""
        if isinstance(value, TensorVar):
            raise Unsupported(
                f"storing a tensor as attribute {name!r} of a {type(obj.value).__qualname__} made by "
                "copy.deepcopy in the compiled code"
            )
        if isinstance(value, ConstVar):
            python = value.value
        elif isinstance(value, (ListVar, TupleVar, DictVar)):
            python = self.as_python(value)
        else:
            raise Unsupported(
                f"storing {value.describe()} as attribute {name!r} of a copy made by copy.deepcopy"
            )
        setattr(obj.value, name, python)

    def private_attribute(self, owner, name: str, value):
        """What is read from a private object is private too (the copy owns its parts). A list or
        dict is tracked item by item, one tracker per attribute, so a change made through one read
        is seen by the next."""
        if isinstance(value, _CONTAINERS):
            key = (id(owner), name)
            seen = self.private_reads.get(key)
            if seen is None or seen[0] is not value:
                seen = self.private_reads[key] = (value, self.wrap_unguarded(value))
            return seen[1]
        if isinstance(value, types.MethodType) or callable(value) and not hasattr(value, "__dict__"):
            return self.wrap_unguarded(value)
        if type(getattr(value, "__dict__", None)) is dict and not isinstance(value, (type, types.ModuleType)):
            return self.private(value)
        return self.wrap_unguarded(value)


def _changed(tracker) -> bool:
    """Whether a list or dict tracker, or one nested in it, was changed in place."""
    if getattr(tracker, "mutated", False):
        return True
    items = tracker.items.values() if isinstance(tracker, DictVar) else getattr(tracker, "items", ())
    return any(_changed(item) for item in items if isinstance(item, (ListVar, TupleVar, DictVar)))
