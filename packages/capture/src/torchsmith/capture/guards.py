"""Guards: the conditions under which a captured graph may be reused.

Each guard is one Python boolean expression over `L` (the frame's arguments by name) and `G` (its
globals). All of them are joined into one generated function

    def guard(L, G):
        try:
            return (type(L['x']) is K0 and L['x'].dtype is K1 and ... and ___grad() is True)
        except Exception:
            return False

so a call pays for one Python function and no interpretation. A failed check is explained (for the
recompile log) by evaluating the expressions one by one, which only happens on a miss.
"""

import torch

from torchsmith.capture.errors import CaptureError

_LITERAL_TYPES = (bool, int, str, type(None), bytes)


def tensor_spec(t) -> tuple:
    """What a tensor guard compares: class, dtype, device, requires_grad, sizes, strides."""
    return (type(t), t.dtype, t.device, t.requires_grad, t.size(), t.stride())


class Namespace:
    """Objects that generated code refers to by name (`K0`, `K1`, ...)."""

    def __init__(self):
        self.values: dict[str, object] = {"___grad": torch.is_grad_enabled, "___tensor_spec": tensor_spec}
        self._ids: dict[int, str] = {}

    def name_of(self, obj) -> str:
        """The name bound to `obj` (by identity), bound now if new."""
        key = id(obj)
        name = self._ids.get(key)
        if name is None:
            name = f"K{len(self._ids)}"
            self._ids[key] = name
            self.values[name] = obj
        return name

    def literal(self, value) -> str:
        """A source expression evaluating to `value` (a literal for simple constants)."""
        if isinstance(value, _LITERAL_TYPES) or (
            type(value) is float and value == value and value not in (float("inf"), float("-inf"))
        ):
            return repr(value)
        return self.name_of(value)


class GuardSet:
    """The guards of one cache entry, collected while capturing."""

    def __init__(self, namespace: Namespace):
        self.ns = namespace
        self.exprs: list[str] = []
        self._seen: set[str] = set()

    def add(self, expr: str) -> None:
        """Add one boolean expression (duplicates are dropped)."""
        if expr not in self._seen:
            self._seen.add(expr)
            self.exprs.append(expr)

    def type_is(self, source: str, obj) -> None:
        self.add(f"type({source}) is {self.ns.name_of(type(obj))}")

    def identity(self, source: str, obj) -> None:
        self.add(f"{source} is {self.ns.name_of(obj)}")

    def equals(self, source: str, value) -> None:
        """Guard a constant's type and value (bools and None by identity)."""
        if value is None or isinstance(value, bool):
            self.add(f"{source} is {value!r}")
            return
        self.type_is(source, value)
        self.add(f"{source} == {self.ns.literal(value)}")

    def tensor(self, source: str, tensor: torch.Tensor, dynamic_dims: frozenset[int] = frozenset()) -> None:
        """Type, dtype, device, rank, static sizes and strides, requires_grad of a tensor."""
        if not dynamic_dims:
            # one source evaluation and one tuple comparison per tensor (guards run on every call)
            spec = (
                type(tensor),
                tensor.dtype,
                tensor.device,
                tensor.requires_grad,
                tuple(tensor.shape),
                tuple(tensor.stride()),
            )
            self.add(f"___tensor_spec({source}) == {self.ns.name_of(spec)}")
            return
        self.type_is(source, tensor)
        self.add(f"{source}.dtype is {self.ns.name_of(tensor.dtype)}")
        self.add(f"{source}.device == {self.ns.name_of(tensor.device)}")
        self.add(f"{source}.requires_grad is {tensor.requires_grad!r}")
        self.add(f"{source}.dim() == {tensor.dim()}")
        for d, size in enumerate(tensor.shape):
            if d not in dynamic_dims:
                self.add(f"{source}.size({d}) == {size}")
        self.add(f"{source}.is_contiguous() is {tensor.is_contiguous()!r}")

    def grad_mode(self, enabled: bool) -> None:
        self.add(f"___grad() is {enabled!r}")

    def source_text(self) -> str:
        body = " and\n                ".join(self.exprs) or "True"
        return (
            "def guard(L, G):\n"
            "    try:\n"
            f"        return ({body})\n"
            "    except Exception:\n"
            "        return False\n"
        )

    def compile(self):
        """The guard function `guard(L, G) -> bool`."""
        return compile_function(self.source_text(), "guard", self.ns.values, "<torchsmith guard>")

    def first_failure(self, L, G) -> str | None:
        """The first expression that is false (or raises) for these arguments; None if all hold."""
        scope = dict(self.ns.values)
        for expr in self.exprs:
            try:
                ok = eval(expr, scope, {"L": L, "G": G})  # noqa: S307 - our own generated text
            except Exception:
                ok = False
            if not ok:
                return expr
        return None


def compile_function(source: str, name: str, namespace: dict, filename: str):
    """exec `source` in a copy of `namespace` and return the function called `name`."""
    scope = dict(namespace)
    try:
        exec(compile(source, filename, "exec"), scope)  # noqa: S102 - generated by us
    except SyntaxError as e:
        raise CaptureError(f"internal error: generated code does not compile: {e}\n{source}") from e
    return scope[name]
