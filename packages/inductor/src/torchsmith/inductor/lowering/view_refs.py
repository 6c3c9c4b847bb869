"""Views as index remapping: a `ViewRef` reads a buffer's storage through an index expression over
the canonical variables `i0..i<rank-1>`, so reshape, permute, broadcast, slice, squeeze and
expand_dims are substitutions into that expression and never copy.
"""

from dataclasses import dataclass

import sympy
import torch

from torchsmith.inductor.loop_ir.program import Load, TensorView, index_vars
from torchsmith.ir.symbolic import Dim, compare, floordiv, mod, normalize_dim


@dataclass(frozen=True, slots=True)
class ViewRef:
    """A tensor of `shape` whose element `(i0, ...)` is storage element `index` of `buffer`."""

    buffer: str
    shape: tuple[Dim, ...]
    dtype: torch.dtype
    index: sympy.Expr

    def load(self, indices) -> Load:
        """The load of element `indices` (index expressions, one per dim)."""
        mapping = dict(zip(index_vars(len(self.shape)), indices))
        return Load(self.buffer, sympy.sympify(self.index).xreplace(mapping), self.dtype)

    def remap(self, shape, indices) -> "ViewRef":
        """A view of `shape` whose element (i0, ...) is this view's element `indices(i0, ...)`."""
        mapping = dict(zip(index_vars(len(self.shape)), indices))
        return ViewRef(self.buffer, tuple(shape), self.dtype, sympy.sympify(self.index).xreplace(mapping))


def strided_ref(buffer: str, shape, strides, dtype, offset: Dim = 0) -> ViewRef:
    index = sympy.sympify(offset) + sum((v * s for v, s in zip(index_vars(len(shape)), strides)), 0)
    return ViewRef(buffer, tuple(shape), dtype, sympy.sympify(index))


def as_tensor_view(ref: ViewRef) -> TensorView | None:
    """The (shape, strides, offset) form of `ref` if its index is linear in the loop variables."""
    variables = index_vars(len(ref.shape))
    index = sympy.expand(ref.index)
    strides = []
    for v in variables:
        c = index.coeff(v, 1)
        if c.free_symbols & set(variables):
            return None
        strides.append(normalize_dim(c))
    offset = sympy.expand(index - sum((v * s for v, s in zip(variables, strides)), 0))
    if offset.free_symbols & set(variables):
        return None  # a floordiv/mod of a loop variable: not a stride (`coeff` does not see into it)
    return TensorView(ref.buffer, ref.shape, tuple(strides), normalize_dim(offset), ref.dtype)


def _same(a: Dim, b: Dim) -> bool:
    return compare("==", sympy.expand(a), sympy.expand(b)) is True


def _product(dims) -> Dim:
    total: Dim = 1
    for d in dims:
        total = normalize_dim(total * d)
    return total


def reshape_groups(old, new) -> list[tuple[list[int], list[int]]] | None:
    """Split two shapes of equal size into runs of dims with equal products (`[6, 4] -> [2, 3, 4]`
    gives `([0], [0, 1]), ([1], [2])`), or None when symbolic sizes hide the boundaries."""
    groups, i, j = [], 0, 0
    while i < len(old) or j < len(new):
        og, ng = [], []
        while True:
            if _same(_product(old[k] for k in og), _product(new[k] for k in ng)) and (og or ng):
                # Swallow trailing size-1 dims into this group so no group is empty on one side.
                while i < len(old) and old[i] == 1 and (j >= len(new) or new[j] != 1):
                    og.append(i)
                    i += 1
                while j < len(new) and new[j] == 1 and (i >= len(old) or old[i] != 1):
                    ng.append(j)
                    j += 1
                break
            po, pn = _product(old[k] for k in og), _product(new[k] for k in ng)
            less = compare("<", po, pn)
            if (less is True or j >= len(new)) and i < len(old):
                og.append(i)
                i += 1
            elif (less is False or i >= len(old)) and j < len(new):
                ng.append(j)
                j += 1
            else:
                return None
        groups.append((og, ng))
    return groups


def reshape_view(ref: ViewRef, shape) -> ViewRef:
    """`ref` read in the row-major order of `shape` (a reshape, without a copy)."""
    shape = tuple(normalize_dim(d) for d in shape)
    old, new_vars = ref.shape, index_vars(len(shape))
    groups = reshape_groups(old, shape) or [(list(range(len(old))), list(range(len(shape))))]
    view = as_tensor_view(ref)
    old_indices: list = [0] * len(old)
    linear_terms = []
    for og, ng in groups:
        flat: Dim = 0
        for k in ng:
            flat = flat + new_vars[k] * _product(shape[m] for m in ng if m > k)
        flat = sympy.expand(flat)
        real = [k for k in og if old[k] != 1]
        contiguous = view is not None and all(
            _same(view.strides[a], view.strides[b] * old[b]) for a, b in zip(real, real[1:])
        )
        if view is not None and real and contiguous:
            # The group is one run of memory: its storage offset is the flat index times the last stride.
            linear_terms.append(flat * view.strides[real[-1]])
            continue
        for pos, k in enumerate(og):
            inner = _product(old[m] for m in og if m > k)
            value = flat if inner == 1 else floordiv(flat, inner)
            old_indices[k] = value if pos == 0 else mod(value, old[k])
            if view is not None:
                linear_terms.append(old_indices[k] * view.strides[k])
    if view is not None:
        index = sympy.sympify(view.offset) + sum(linear_terms, 0)
        return ViewRef(ref.buffer, shape, ref.dtype, sympy.sympify(index))
    return ref.remap(shape, old_indices)
