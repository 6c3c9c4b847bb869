"""`NameGenerator`: fresh, readable names (`add`, `add_1`, `add_2`, ...) that are never handed out
twice. Every pass that invents value or buffer names takes them from one of these.

    >>> names = NameGenerator(taken={"x"})
    >>> names.fresh("x"), names.fresh("x"), names.fresh("y")
    ('x_1', 'x_2', 'y')
"""

from collections.abc import Iterable


class NameGenerator:
    """Names taken so far, and the next free name for a hint."""

    __slots__ = ("_counts", "_taken")

    def __init__(self, taken: Iterable[str] = ()):
        self._taken: set[str] = set(taken)
        # the last suffix tried per hint: every `hint_k` up to it is taken, so the search resumes there
        self._counts: dict[str, int] = {}

    def __contains__(self, name: str) -> bool:
        return name in self._taken

    def unused(self, hint: str) -> str:
        """`hint`, or `hint_1`, `hint_2`, ... whichever is free now; not taken yet (see `take`)."""
        name = hint
        while name in self._taken:
            self._counts[hint] = self._counts.get(hint, 0) + 1
            name = f"{hint}_{self._counts[hint]}"
        return name

    def take(self, name: str) -> str:
        """Mark `name` as used; returns it."""
        self._taken.add(name)
        return name

    def fresh(self, hint: str) -> str:
        """A name no one has yet, from `hint` (see `unused`), now taken."""
        return self.take(self.unused(hint))
