"""Binding a call's runtime arguments to a function's parameters, by its code object.

CPython binds by the code object (`co_varnames`, `co_argcount`, the varargs flags, defaults), never
by `__signature__`: a wrapper may advertise `(x, y)` while its code is `(*args, **kwargs)`, and the
frame the dispatcher captures (and every resume function after it) sees the code's names. So the
dispatcher binds the same way, and a call that CPython would refuse raises the `TypeError` CPython
would raise.
"""

import types

_CO_VARARGS = 0x04
_CO_VARKEYWORDS = 0x08


def bind_to_code(fn: types.FunctionType, args: tuple, kwargs: dict) -> dict:
    """The frame's arguments of `fn(*args, **kwargs)` by parameter name, in definition order,
    defaults applied; `*args` becomes a tuple and `**kwargs` a dict under their own names.

    >>> def f(a, *rest, b=2, **extra): pass
    >>> bind_to_code(f, (1, 5), {"z": 3})
    {'a': 1, 'rest': (5,), 'b': 2, 'extra': {'z': 3}}
    """
    code = fn.__code__
    names = code.co_varnames
    nargs, nkwonly, nposonly = code.co_argcount, code.co_kwonlyargcount, code.co_posonlyargcount
    has_varargs = bool(code.co_flags & _CO_VARARGS)
    has_varkw = bool(code.co_flags & _CO_VARKEYWORDS)
    qualname = f"{code.co_qualname}()"
    if len(args) > nargs and not has_varargs:
        raise TypeError(f"{qualname} takes {nargs} positional arguments but {len(args)} were given")
    bound = dict(zip(names[:nargs], args))
    keyword_names = names[nposonly : nargs + nkwonly]
    extra: dict = {}
    for key, value in kwargs.items():
        if key in keyword_names:
            if key in bound:
                raise TypeError(f"{qualname} got multiple values for argument {key!r}")
            bound[key] = value
        elif has_varkw:
            extra[key] = value
        elif key in names[:nposonly]:
            raise TypeError(
                f"{qualname} got some positional-only arguments passed as keyword arguments: {key!r}"
            )
        else:
            raise TypeError(f"{qualname} got an unexpected keyword argument {key!r}")
    defaults = fn.__defaults__ or ()
    first_default = nargs - len(defaults)
    missing = []
    for i, name in enumerate(names[:nargs]):
        if name not in bound:
            if i >= first_default:
                bound[name] = defaults[i - first_default]
            else:
                missing.append(name)
    kwdefaults = fn.__kwdefaults__ or {}
    for name in names[nargs : nargs + nkwonly]:
        if name not in bound:
            if name in kwdefaults:
                bound[name] = kwdefaults[name]
            else:
                missing.append(name)
    if missing:
        raise TypeError(f"{qualname} missing required arguments: {', '.join(map(repr, missing))}")
    # parameter order, as the function's definition lists them: positional, *args, keyword-only, **kwargs
    ordered = {name: bound[name] for name in names[:nargs]}
    position = nargs + nkwonly
    if has_varargs:
        ordered[names[position]] = tuple(args[nargs:])
    ordered.update((name, bound[name]) for name in names[nargs : nargs + nkwonly])
    if has_varkw:
        ordered[names[position + has_varargs]] = extra
    return ordered
