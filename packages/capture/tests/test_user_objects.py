"""Instances of plain user classes created, mutated and returned inside captured code, and existing
instances mutated in place, each compared with eager (see user_objects.py)."""

import abc
import collections.abc

import pytest
import torch

from torchsmith.capture import FullGraphError


class Layer:
    """A cache layer in the shape of transformers' DynamicLayer: lazily initialized, grows by cat."""

    is_sliding = False

    def __init__(self):
        self.keys = None
        self.values = None
        self.is_initialized = False

    def lazy_init(self, k):
        self.keys = torch.zeros(k.shape[0], 0, k.shape[2], dtype=k.dtype)
        self.values = torch.zeros(k.shape[0], 0, k.shape[2], dtype=k.dtype)
        self.is_initialized = True

    def update(self, k, v):
        if not self.is_initialized:
            self.lazy_init(k)
        self.keys = torch.cat([self.keys, k], dim=1)
        self.values = torch.cat([self.values, v], dim=1)
        return self.keys, self.values

    def get_seq_length(self):
        if not self.is_initialized:
            return 0
        return self.keys.shape[1]


class Cache(abc.ABC):  # noqa: B024 - an ABC without abstract methods, as transformers' Cache base
    def __init__(self, layer_class=None):
        self.layers = []
        self.layer_class = layer_class

    def __len__(self):
        return len(self.layers)

    def __getitem__(self, i):
        return self.layers[i].keys, self.layers[i].values

    @property
    def seen(self):
        return self.get_seq_length()

    def get_seq_length(self, idx=0):
        if idx >= len(self.layers):
            return 0
        return self.layers[idx].get_seq_length()

    def update(self, k, v, idx):
        while len(self.layers) <= idx:
            self.layers.append(self.layer_class())
        return self.layers[idx].update(k, v)


class GrowingCache(Cache):
    def __init__(self):
        super().__init__(layer_class=Layer)


def attend(x, cache, n_layers=2):
    """A toy decoder: every layer stores its keys/values in the cache and attends over them."""
    start = cache.get_seq_length() if cache is not None else 0
    h = x + start
    for i in range(n_layers):
        k, v = cache.update(h * (i + 1), h - i, i)
        h = h + (k.sum(1, keepdim=True) * v.mean(1, keepdim=True))
    return h


def _state(cache):
    return [(layer.keys, layer.values, layer.is_initialized) for layer in cache.layers]


def _assert_same_cache(expected, actual):
    assert type(actual) is type(expected)
    assert vars(actual).keys() == vars(expected).keys()
    assert len(actual.layers) == len(expected.layers)
    for (ke, ve, ie), (ka, va, ia) in zip(_state(expected), _state(actual)):
        assert ie == ia
        torch.testing.assert_close(ka, ke)
        torch.testing.assert_close(va, ve)
    for a, e in zip(actual.layers, expected.layers):
        assert type(a) is type(e) and vars(a).keys() == vars(e).keys()


def test_new_object_is_built_returned_and_rebuilt_without_a_break(compile_with, backend):
    def f(x):
        cache = GrowingCache()
        h = attend(x, cache)
        return h, cache

    compiled = compile_with(f, fullgraph=True)
    x = torch.randn(2, 3, 4)
    (h1, c1), (h2, c2) = f(x), compiled(x)
    torch.testing.assert_close(h2, h1)
    _assert_same_cache(c1, c2)
    assert len(backend.graphs) == 1
    # the rebuilt cache is a working object: eager code can go on using it
    torch.testing.assert_close(attend(x, c2), attend(x, c1))


def test_new_object_methods_properties_len_isinstance_and_indexing(compile_with):
    def f(x):
        cache = GrowingCache()
        attend(x, cache)
        k0, v0 = cache[0]
        sized = isinstance(cache, collections.abc.Sized)
        flags = (isinstance(cache, Cache), sized, type(cache) is GrowingCache)
        return k0 + v0, len(cache), cache.seen, hasattr(cache, "layers"), hasattr(cache, "missing"), flags

    compiled = compile_with(f, fullgraph=True)
    x = torch.randn(2, 3, 4)
    expected, actual = f(x), compiled(x)
    torch.testing.assert_close(actual[0], expected[0])
    assert actual[1:] == expected[1:]


def test_new_object_that_does_not_escape_leaves_no_code(compile_with, backend):
    def f(x):
        cache = GrowingCache()
        return attend(x, cache)

    compiled = compile_with(f, fullgraph=True)
    x = torch.randn(2, 3, 4)
    torch.testing.assert_close(compiled(x), f(x))
    source = compiled.session.records[0].source
    assert "__o0" not in source


def test_nested_new_objects_share_identity_after_rebuild(compile_with):
    class Node:
        def __init__(self, value, parent=None):
            self.value = value
            self.parent = parent
            self.children = []
            if parent is not None:
                parent.children.append(self)

    def f(x):
        root = Node(x)
        a = Node(x + 1, root)
        Node(x * 2, a)
        return root, a

    compiled = compile_with(f, fullgraph=True)
    x = torch.randn(3)
    root, a = compiled(x)
    assert root.children[0] is a and a.parent is root and a.children[0].parent is a
    torch.testing.assert_close(a.children[0].value, x * 2)
    torch.testing.assert_close(a.value, x + 1)


def test_passed_in_object_is_mutated_in_place_and_guarded(compile_with, backend):
    x = torch.randn(2, 3, 4)
    eager_cache, compiled_cache = GrowingCache(), GrowingCache()
    compiled = compile_with(attend)
    for size in (3, 1, 1, 1):
        xs = torch.randn(2, size, 4)
        torch.testing.assert_close(compiled(xs, compiled_cache), attend(xs, eager_cache))
        _assert_same_cache(eager_cache, compiled_cache)
    # empty cache, then initialized, then a growing length made symbolic: three graphs, no more
    assert len(backend.graphs) <= 3
    # a cache with another number of layers is a different structure: recompiled, still right
    short = GrowingCache()
    short.update(x, x, 0)
    eager_short = GrowingCache()
    eager_short.update(x, x, 0)
    torch.testing.assert_close(compiled(x, short), attend(x, eager_short))
    _assert_same_cache(eager_short, short)


def test_new_object_stored_on_an_existing_object(compile_with):
    class Holder:
        pass

    def f(holder, x):
        holder.cache = GrowingCache()
        holder.caches.append(holder.cache)
        return attend(x, holder.cache)

    x = torch.randn(2, 3, 4)
    eager, captured = Holder(), Holder()
    eager.caches, captured.caches = [], []
    compiled = compile_with(f, fullgraph=True)
    torch.testing.assert_close(compiled(captured, x), f(eager, x))
    _assert_same_cache(eager.cache, captured.cache)
    assert captured.caches[0] is captured.cache


def test_new_object_crosses_a_graph_break(compile_with, backend):
    def f(x):
        cache = GrowingCache()
        h = attend(x, cache)
        print("", end="")  # a graph break: the cache goes on into the resume function
        return attend(h, cache), cache

    compiled = compile_with(f)
    x = torch.randn(2, 3, 4)
    (h1, c1), (h2, c2) = f(x), compiled(x)
    torch.testing.assert_close(h2, h1)
    _assert_same_cache(c1, c2)


def test_property_setter_and_class_attributes(compile_with):
    class Scaled:
        factor = 3

        def __init__(self, x):
            self._x = x

        @property
        def x(self):
            return self._x * self.factor

        @x.setter
        def x(self, value):
            self._x = value + 1

    def f(t):
        s = Scaled(t)
        s.x = s.x * 2
        return s.x, s

    compiled = compile_with(f, fullgraph=True)
    t = torch.randn(3)
    (y1, s1), (y2, s2) = f(t), compiled(t)
    torch.testing.assert_close(y2, y1)
    torch.testing.assert_close(s2._x, s1._x)
    assert "x" not in vars(s2)


def test_sequence_subclass_iterates_by_length(compile_with):
    class View(collections.abc.Sequence):
        def __init__(self, items):
            self._items = items

        def __len__(self):
            return len(self._items)

        def __getitem__(self, i):
            if i >= len(self._items):
                raise IndexError(i)
            return self._items[i]

    def f(x):
        view = View([x, x * 2, x + 3])
        return [t.sum() for t in view], list(reversed(view))[0]

    compiled = compile_with(f, fullgraph=True)
    x = torch.randn(3)
    expected, actual = f(x), compiled(x)
    torch.testing.assert_close(actual, expected)


class _Slotted:
    __slots__ = ("x",)

    def __init__(self, x):
        self.x = x


class _WithNew:
    def __new__(cls, x):
        obj = super().__new__(cls)
        obj.made_by_new = True
        return obj

    def __init__(self, x):
        self.x = x


class _Meta(type):
    def __call__(cls, *args):
        return super().__call__(*args)


class _WithMeta(metaclass=_Meta):
    def __init__(self, x):
        self.x = x


class _FromList(list):
    pass


class _Hooked:
    def __init__(self, x):
        self.x = x

    def __setattr__(self, name, value):
        object.__setattr__(self, name, value * 2)


@pytest.mark.parametrize(
    "cls, reason",
    [
        (_Slotted, "declares __slots__"),
        (_WithNew, "defines its own __new__"),
        (_WithMeta, "metaclass"),
        (_FromList, "implemented in C"),
        (_Hooked, "defines __setattr__"),
    ],
)
def test_unsupported_classes_break_with_a_reason_naming_the_class(compile_with, cls, reason):
    def f(x):
        obj = cls(x + 1)
        return obj, x * 2

    compiled = compile_with(f)
    x = torch.randn(3)
    obj, y = compiled(x)
    torch.testing.assert_close(y, x * 2)
    assert type(obj) is cls
    (record, *_) = compiled.session.records
    text = str(record.break_reason)
    assert cls.__qualname__ in text and reason in text
    with pytest.raises(FullGraphError, match=cls.__qualname__):
        compile_with(f, fullgraph=True)(x)


def test_abstract_class_breaks_and_raises_as_eager(compile_with):
    class Abstract(abc.ABC):
        @abc.abstractmethod
        def run(self): ...

    def f(x):
        return Abstract(), x

    with pytest.raises(TypeError):
        compile_with(f)(torch.randn(2))


def test_aliasing_of_passed_in_objects_is_guarded(compile_with, backend):
    class Box:
        def __init__(self, v):
            self.v = v

    def f(a, b, x):
        a.v = a.v + x
        return b.v * 2

    compiled = compile_with(f)
    x = torch.randn(3)
    for same in (True, False, True):
        a1 = Box(torch.ones(3))
        b1 = a1 if same else Box(torch.zeros(3))
        a2 = Box(torch.ones(3))
        b2 = a2 if same else Box(torch.zeros(3))
        torch.testing.assert_close(compiled(a2, b2, x), f(a1, b1, x))
        torch.testing.assert_close(a2.v, a1.v)
    assert len(backend.graphs) == 2


class _WithDel:
    def __init__(self, x):
        self.x = x

    def __del__(self):
        pass


def test_class_with_a_finalizer_breaks(compile_with):
    def f(x):
        return _WithDel(x).x + 1

    compiled = compile_with(f)
    x = torch.randn(3)
    torch.testing.assert_close(compiled(x), x + 1)
    assert "__del__" in str(compiled.session.records[0].break_reason)


def test_containers_held_by_new_objects_keep_their_identity(compile_with):
    class Bag:
        def __init__(self, items, table):
            self.items = items
            self.table = table

    def f(x):
        items = [x + 1]
        table = {"a": x * 2}
        bag = Bag(items, table)
        items.append(x - 1)
        return items, bag, table

    compiled = compile_with(f, fullgraph=True)
    x = torch.randn(3)
    items, bag, table = compiled(x)
    assert bag.items is items and bag.table is table
    expected_items, _, _ = f(x)
    torch.testing.assert_close(items, expected_items)
