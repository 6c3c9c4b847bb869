"""User objects: instances of plain Python classes created inside compiled code (a KV cache built in
`forward`, filled layer by layer and returned), existing instances mutated in place across calls,
nested instances, and classes capture refuses (a graph break naming the class)."""

import collections.abc

import torch
from cf_harness import program

T = lambda *shape: torch.randn(*shape)
U = "user_objects"


class KVLayer:
    def __init__(self):
        self.keys = None
        self.values = None
        self.is_initialized = False

    def update(self, k, v):
        if not self.is_initialized:
            self.keys = torch.zeros(k.shape[0], 0, k.shape[2])
            self.values = torch.zeros(k.shape[0], 0, k.shape[2])
            self.is_initialized = True
        self.keys = torch.cat([self.keys, k], dim=1)
        self.values = torch.cat([self.values, v], dim=1)
        return self.keys, self.values

    def get_seq_length(self):
        return self.keys.shape[1] if self.is_initialized else 0


class KVCache:
    def __init__(self, layer_class=KVLayer):
        self.layers = []
        self.layer_class = layer_class

    def __len__(self):
        return len(self.layers)

    def get_seq_length(self, idx=0):
        return self.layers[idx].get_seq_length() if idx < len(self.layers) else 0

    def update(self, k, v, idx):
        while len(self.layers) <= idx:
            self.layers.append(self.layer_class())
        return self.layers[idx].update(k, v)


class Decoder(torch.nn.Module):
    """Two attention-like layers writing to a cache they create when none is given."""

    def __init__(self):
        super().__init__()
        self.proj = torch.nn.ModuleList([torch.nn.Linear(4, 4) for _ in range(2)])

    def forward(self, x, cache=None, use_cache=True):
        if use_cache and cache is None:
            cache = KVCache()
        start = cache.get_seq_length() if cache is not None else 0
        h = x + start
        for i, proj in enumerate(self.proj):
            k, v = proj(h), h * 0.5
            if cache is not None:
                k, v = cache.update(k, v, i)
            h = h + torch.softmax(h @ k.transpose(1, 2), dim=-1) @ v
        return h, cache


@program(U, graphs=1, breaks=0, fullgraph=True)
def cache_created_in_forward_is_returned():
    torch.manual_seed(0)
    return Decoder(), [(T(2, 3, 4),), (T(2, 3, 4),)]


@program(U, graphs=3, breaks=0)
def passed_in_cache_grows_in_place_over_decoding_steps():
    torch.manual_seed(0)
    model, cache = Decoder(), KVCache()
    # prefill, then one token at a time: empty cache, initialized, then a symbolic length
    return model, [(T(2, 3, 4), cache), (T(2, 1, 4), cache), (T(2, 1, 4), cache), (T(2, 1, 4), cache)]


@program(U, graphs=1, breaks=0, train=True)
def cache_built_in_training_holds_tensors_that_need_grad():
    torch.manual_seed(0)
    return Decoder(), [(T(2, 3, 4),)]


@program(U, graphs=1, breaks=0, fullgraph=True)
def nested_objects_with_back_references_are_one_graph():
    class Node:
        def __init__(self, value, parent=None):
            self.value = value
            self.children = []
            self.level = 0
            if parent is not None:
                self.level = parent.level + 1
                parent.children.append(self)

        @property
        def depth(self):
            return self.level

    def f(x):
        root = Node(x)
        child = Node(x.sin(), root)
        leaf = Node(child.value * 2 + leaf_depth(child), child)
        shared = [leaf, leaf]
        return {"root": root, "same": root.children[0] is child, "depth": leaf.depth, "shared": shared}

    def leaf_depth(node):
        return node.depth

    return f, [(T(3),)]


@program(U, graphs=1, breaks=0)
def new_object_stored_on_an_existing_object_and_list():
    class Holder:
        def __init__(self):
            self.history = []
            self.last = None

    def f(holder, x):
        cache = KVCache()
        cache.update(x, x * 2, 0)
        holder.last = cache
        holder.history.append(cache)
        return cache.get_seq_length() + x

    return f, [(Holder(), T(2, 3, 4))]


@program(U, graphs=2, breaks=1)
def new_object_lives_across_a_graph_break():
    def f(x):
        cache = KVCache()
        k, _ = cache.update(x, x + 1, 0)
        print(end="")  # the cache goes on into the resume function
        k2, v2 = cache.update(k * 2, x, 0)
        return k2.sum(1), v2, cache

    return f, [(T(2, 3, 4),)]


@program(U, graphs=1, breaks=0, fullgraph=True)
def sequence_subclass_property_setter_and_class_attribute():
    class Window(collections.abc.Sequence):
        scale = 2.0

        def __init__(self, items):
            self._items = list(items)
            self._offset = 0

        def __len__(self):
            return len(self._items)

        def __getitem__(self, i):
            if i >= len(self._items):
                raise IndexError(i)
            return self._items[i] * self.scale + self._offset

        @property
        def offset(self):
            return self._offset

        @offset.setter
        def offset(self, value):
            self._offset = value * 10

    def f(x):
        w = Window([x, x.cos()])
        w.offset = 1
        total = sum(t.sum() for t in w)
        return total, [t for t in reversed(w)], len(w), w.offset, isinstance(w, collections.abc.Sized)

    return f, [(T(3),)]


class Slotted:
    __slots__ = ("x",)

    def __init__(self, x):
        self.x = x


@program(U, graphs=2, breaks=1)
def slotted_class_is_a_graph_break_that_stays_correct():
    def f(x):
        y = x * 2
        obj = Slotted(y)  # __slots__: capture breaks here and the constructor runs eagerly
        return obj.x + 1, type(obj).__name__

    return f, [(T(3),), (T(3),)]
