"""Binding a call's runtime arguments to a function's parameters, by its code object.

CPython binds by the code object (`co_varnames`, `co_argcount`, the varargs flags, defaults), never
by `__signature__`: a wrapper may advertise `(x, y)` while its code is `(*args, **kwargs)`, and the
frame the dispatcher captures (and every resume function after it) sees the code's names. So the
dispatcher binds the same way, and a call that CPython would refuse raises the `TypeError` CPython
would raise.
"""

import types
from dataclasses import dataclass

_CO_VARARGS = 0x04
_CO_VARKEYWORDS = 0x08


@dataclass(frozen=True, slots=True)
class _CodeShape:
    """What binding needs of a code object, read once per code (a compiled model's forward is bound
    on every call)."""

    positional: tuple[str, ...]  # co_varnames[:co_argcount]
    keyword: frozenset  # names a keyword may bind: positional-or-keyword and keyword-only
    positional_only: frozenset
    keyword_only: tuple[str, ...]
    varargs: str | None  # the *args name
    varkw: str | None  # the **kwargs name


_SHAPES: dict[types.CodeType, _CodeShape] = {}


def _shape_of(code: types.CodeType) -> _CodeShape:
    shape = _SHAPES.get(code)
    if shape is None:
        names = code.co_varnames
        nargs, nkwonly, nposonly = code.co_argcount, code.co_kwonlyargcount, code.co_posonlyargcount
        position = nargs + nkwonly
        has_varargs = bool(code.co_flags & _CO_VARARGS)
        shape = _SHAPES[code] = _CodeShape(
            positional=names[:nargs],
            keyword=frozenset(names[nposonly:position]),
            positional_only=frozenset(names[:nposonly]),
            keyword_only=names[nargs:position],
            varargs=names[position] if has_varargs else None,
            varkw=names[position + has_varargs] if code.co_flags & _CO_VARKEYWORDS else None,
        )
    return shape


def bind_to_code(fn: types.FunctionType, args: tuple, kwargs: dict) -> dict:
    """The frame's arguments of `fn(*args, **kwargs)` by parameter name, in definition order,
    defaults applied; `*args` becomes a tuple and `**kwargs` a dict under their own names.

    >>> def f(a, *rest, b=2, **extra): pass
    >>> bind_to_code(f, (1, 5), {"z": 3})
    {'a': 1, 'rest': (5,), 'b': 2, 'extra': {'z': 3}}
    """
    code = fn.__code__
    shape = _shape_of(code)
    positional = shape.positional
    nargs = len(positional)
    if len(args) > nargs and shape.varargs is None:
        raise TypeError(f"{code.co_qualname}() takes {nargs} positional arguments but {len(args)} were given")
    bound = dict(zip(positional, args))
    extra: dict = {}
    for key, value in kwargs.items():
        if key in shape.keyword:
            if key in bound:
                raise TypeError(f"{code.co_qualname}() got multiple values for argument {key!r}")
            bound[key] = value
        elif shape.varkw is not None:
            extra[key] = value
        elif key in shape.positional_only:
            raise TypeError(
                f"{code.co_qualname}() got some positional-only arguments passed as keyword "
                f"arguments: {key!r}"
            )
        else:
            raise TypeError(f"{code.co_qualname}() got an unexpected keyword argument {key!r}")
    missing = []
    if len(args) < nargs:
        defaults = fn.__defaults__ or ()
        first_default = nargs - len(defaults)
        for i in range(len(args), nargs):
            name = positional[i]
            if name not in bound:
                if i >= first_default:
                    bound[name] = defaults[i - first_default]
                else:
                    missing.append(name)
    if shape.keyword_only:
        kwdefaults = fn.__kwdefaults__ or {}
        for name in shape.keyword_only:
            if name not in bound:
                if name in kwdefaults:
                    bound[name] = kwdefaults[name]
                else:
                    missing.append(name)
    if missing:
        raise TypeError(f"{code.co_qualname}() missing required arguments: {', '.join(map(repr, missing))}")
    # parameter order, as the function's definition lists them: positional, *args, keyword-only, **kwargs
    if len(args) >= nargs and shape.varargs is None and shape.varkw is None and not shape.keyword_only:
        return bound  # every parameter bound from `args`, in order
    ordered = {name: bound[name] for name in positional}
    if shape.varargs is not None:
        ordered[shape.varargs] = tuple(args[nargs:])
    ordered.update((name, bound[name]) for name in shape.keyword_only)
    if shape.varkw is not None:
        ordered[shape.varkw] = extra
    return ordered
