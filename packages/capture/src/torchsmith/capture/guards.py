"""Guards: the conditions under which a captured graph may be reused.

Each guard is one Python boolean expression over `L` (the frame's arguments by name) and `G` (its
globals). All of them are joined into one generated function

    def guard(L, G):
        try:
            return (type(L['x']) is K0 and L['x'].dtype is K1 and ... and ___grad() is True)
        except Exception:
            return False

so a call pays for one Python function and no interpretation. A failed check is explained (for the
recompile log) by evaluating the expressions one by one, which only happens on a miss. Where a guard
checks many tensors, each tensor's check is one call into C++ once `native_guards` has loaded it.
"""

import collections.abc
import re
import threading
import types

import torch
from torch.utils._device import DeviceContext

from torchsmith.capture import native_guards
from torchsmith.capture.copies import leaf_dict_check, same_state, state_check, state_of
from torchsmith.capture.errors import GeneratedCodeError, Unsupported
from torchsmith.capture.pysource import string_literal

_LITERAL_TYPES = (bool, int, type(None))


def same_constants(x, constants: tuple) -> bool:
    """Whether `x` is a tuple equal to `constants` (plain constants, nested tuples of them) item by
    item in type and value: at once where it is that very tuple (immutable, so it still is)."""
    if x is constants:
        return True
    if type(x) is not tuple or len(x) != len(constants):
        return False
    for a, b in zip(x, constants):
        if type(a) is not type(b) or not (same_constants(a, b) if type(b) is tuple else a == b):
            return False
    return True


def plain_constants(value: tuple) -> bool:
    """Whether the tuple `value` holds only None, bools, ints, floats, strings and such tuples."""
    return all(v is None or type(v) in (bool, int, float, str) or (type(v) is tuple and plain_constants(v))
               for v in value)


def tensor_spec(t) -> tuple:
    """What a tensor guard compares: class, dtype, device, requires_grad, sizes, strides."""
    return (type(t), t.dtype, t.device, t.requires_grad, t.size(), t.stride())


def default_device() -> torch.device | None:
    """The device `torch.set_default_device` or `with torch.device(...)` gives factory calls
    without a device argument; None when none is set. Cheaper than `torch.get_default_device()`
    (which builds tensors to find a device index) when no function mode is active."""
    if not torch._C._len_torch_function_stack():
        return None
    for mode in reversed(torch.overrides._get_current_function_mode_stack()):
        if isinstance(mode, DeviceContext):
            return mode.device
    return None


def autocast_state() -> tuple | None:
    """Whether and how autocast is on for CPU and CUDA; None when it is off everywhere."""
    if not torch._C._is_any_autocast_enabled():
        return None
    return tuple(
        (device, torch.is_autocast_enabled(device), torch.get_autocast_dtype(device))
        for device in ("cpu", "cuda")
    )


def module_lacks(module, name: str) -> bool:
    """`not hasattr(module, name)` for an nn.Module whose class keeps nn.Module's attribute lookup,
    without raising the AttributeError that `Module.__getattr__` formats, which dominates a guard's
    cost when it is raised on every call."""
    d = module.__dict__
    return (
        name not in d
        and name not in d["_parameters"]
        and name not in d["_buffers"]
        and name not in d["_modules"]
        and not hasattr(type(module), name)
    )


def _module_field(source: str, module, name: str) -> str:
    """The fast expression reading attribute `name` of `module` (through `source`): a subscript of its
    instance dict where that is what attribute lookup finds (a plain module whose class has no
    attribute of that name), about twice as fast as the lookup, which searches the class first."""
    if _plain_module(module) and name in module.__dict__ and not hasattr(type(module), name):
        return f"{source}.__dict__[{string_literal(name)}]"
    return f"{source}.{name}"


def _plain_module(obj) -> bool:
    cls = type(obj)
    return (
        isinstance(obj, torch.nn.Module)
        and cls.__getattr__ is torch.nn.Module.__getattr__
        and cls.__getattribute__ is object.__getattribute__
    )


# Global torch state a trace depends on, each checked by one guard on every call: name in the
# guard namespace -> the function reading it.
GLOBAL_STATE = {
    "___grad": torch.is_grad_enabled,
    "___default_dtype": torch.get_default_dtype,
    "___default_device": default_device,
    "___deterministic": torch.are_deterministic_algorithms_enabled,
    "___autocast": autocast_state,
}


class Namespace:
    """Objects that generated code refers to by name (`K0`, `K1`, ...)."""

    def __init__(self):
        self.values: dict[str, object] = {
            **GLOBAL_STATE,
            "___tensor_spec": tensor_spec,
            "___module_lacks": module_lacks,
            "___same_constants": same_constants,
        }
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
        if type(value) is str:
            return string_literal(value)
        # exact types: a subclass (an enum deriving from str) has a repr that is not Python source
        if type(value) in _LITERAL_TYPES or (
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
        # expr -> an equivalent but faster form used in the compiled guard (exprs stay readable)
        self._fast: dict[str, str] = {}
        self._tensor_locals: dict[str, str] = {}  # tensor source -> the local its fast spec binds
        # Sources guarded by identity whose object cannot change (code objects): guards on what
        # lies beneath them (`.co_varnames[3] == 'x'`, read by inspect.signature) always hold.
        self._frozen: list[str] = []
        self._expr_codes: dict[str, types.CodeType] = {}  # first_failure's compiled expressions
        # source of an object whose class reads attributes through Python code -> a check that its
        # state is what it was at capture (None where that state is not plain data)
        self._state_roots: dict[str, object] = {}
        # tensor spec expr -> (local, source, spec tuple) where the C++ check may replace it
        self._native_specs: dict[str, tuple] = {}
        self._native_objects: dict[str, object] = {}  # expr -> its native spec, made once
        self._native_hooks: dict[str, str] = {}  # expr -> the module source `without_hooks` checks
        self._native_functions: dict[str, str] = {}  # expr -> its `same_function` arguments
        # compile and promote run on the capturing thread and on the one loading native checks
        self._lock = threading.RLock()

    def add(self, expr: str, fast: str | None = None) -> None:
        """Add one boolean expression (duplicates and guards implied by an identity guard on an
        immutable object are dropped); `fast`, if given, is what the compiled guard evaluates
        instead."""
        if self._frozen and self._implied(expr):
            return
        if expr not in self._seen:
            self._seen.add(expr)
            self.exprs.append(expr)
        if fast is not None:
            self._fast.setdefault(expr, fast)

    def type_is(self, source: str, obj) -> None:
        self.add(f"type({source}) is {self.ns.name_of(type(obj))}")

    def identity(self, source: str, obj) -> None:
        self.add(f"{source} is {self.ns.name_of(obj)}")
        if isinstance(obj, types.CodeType):
            self._frozen.append(source)

    def module_training(self, source: str, module) -> None:
        """`module.training` (read through `source`) must stay what it is now."""
        flag = module.training
        fast = f"{_module_field(source, module, 'training')} is {flag!r}"
        self.add(f"{source}.training is {flag!r}", fast=fast)

    def module_hooks(self, source: str, module) -> None:
        """The module's forward (pre-)hook counts and whether its instance replaces `forward` must
        stay what they are now (adding or removing a hook, or patching forward, recompiles)."""
        # and the module has no backward hooks (capture does not inline a module that has some)
        tables = ("_forward_pre_hooks", "_forward_hooks", "_backward_hooks", "_backward_pre_hooks")
        counts = [len(getattr(module, table)) for table in tables]
        fields = [_module_field(source, module, table) for table in tables]
        replaced = "forward" in module.__dict__
        if not any(counts) and not replaced and all(".__dict__[" in f for f in fields):
            # the common case as one check, one C++ call (`without_hooks`) once the extension loads
            own_forward = f"'forward' not in {source}.__dict__"
            expr = " and ".join([*(f"not {source}.{t}" for t in tables), own_forward])
            fast = " and ".join([*(f"not {f}" for f in fields), own_forward])
            self._native_hooks[expr] = source
            self.add(expr, fast=fast)
            return
        for table, count, field in zip(tables, counts, fields, strict=True):
            if count:
                self.add(f"len({source}.{table}) == {count}", fast=f"len({field}) == {count}")
            else:
                self.add(f"not {source}.{table}", fast=f"not {field}")
        self.add(f"('forward' in {source}.__dict__) is {replaced}")

    def function_is(self, source: str, fn) -> None:
        """`source` must stay a function of `fn`'s class, code, defaults and globals (not `fn` itself: a
        closure or lambda made anew on every call passes): one expression, one C++ call
        (`same_function`) once the extension loads."""
        fields = (type(fn), fn.__code__, fn.__defaults__, fn.__kwdefaults__, fn.__globals__)
        t, code, defaults, kwdefaults, globals_ = (self.ns.name_of(f) for f in fields)
        expr = (
            f"type({source}) is {t} and {source}.__code__ is {code} and {source}.__defaults__ == {defaults} "
            f"and {source}.__kwdefaults__ == {kwdefaults} and {source}.__globals__ is {globals_}"
        )
        self._native_functions[expr] = f"{source}, {t}, {code}, {defaults}, {kwdefaults}, {globals_}"
        self.add(expr)
        self._frozen.append(f"{source}.__code__")  # what lies below an immutable code object holds too

    def note_attribute_read(self, source: str, obj) -> None:
        """Capture read an attribute of `obj` (through `source`). Where `obj`'s class reads its
        attributes through Python code (a `__getattribute__` or `__getattr__` of its own:
        transformers' configs), each guard on such a read costs a Python call, about a microsecond
        (an absent attribute's exception twice that); `source_text` puts those guards behind one
        check that the object's state is unchanged."""
        if source in self._state_roots or not _python_attribute_lookup(obj):
            return
        try:
            same, class_data = same_state(obj), _lookup_class_data(type(obj))
        except (Unsupported, AttributeError):  # not plain data, or no instance dict (a C++ binding's)
            self._state_roots[source] = None
            return
        self._state_roots[source] = _quiet(lambda x: same(x) and all(check() for check in class_data))

    def _implied(self, expr: str) -> bool:
        """Whether `expr` reads nothing but what lies below an identity-guarded immutable object."""
        for root in self._frozen:
            if root not in expr:
                continue
            rest = re.sub(re.escape(root) + _ACCESSORS, "___root", expr)
            if not _OTHER_OBJECT.search(rest.replace("___root", "")):
                return True
        return False

    def equals(self, source: str, value) -> None:
        """Guard a constant's type and value (bools and None by identity)."""
        if value is None or isinstance(value, bool):
            self.add(f"{source} is {value!r}")
            return
        self.type_is(source, value)
        self.add(f"{source} == {self.ns.literal(value)}")

    def constant_tuple(self, source: str, value: tuple) -> None:
        """A tuple of plain constants (`plain_constants`: a module's `stride`, `padding`) must stay
        equal in types and values: one check, which an attribute left alone (the very tuple read
        now) passes by identity, instead of a type, a length and two per item."""
        self.add(f"___same_constants({source}, {self.ns.name_of(value)})")

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
            spec_name = self.ns.name_of(spec)
            # The fast form builds the spec inline, evaluating `source` once through a local of the
            # guard function: no call of ___tensor_spec, about half the time per tensor.
            t = f"___t{len(self._fast)}"
            fast = (
                f"(type({t} := {source}), {t}.dtype, {t}.device, {t}.requires_grad, {t}.shape, {t}.stride())"
            )
            expr = f"___tensor_spec({source}) == {spec_name}"
            if expr not in self._seen:
                self._tensor_locals.setdefault(source, t)
                if type(tensor) in native_guards.NATIVE_TYPES and tensor.layout == torch.strided:
                    self._native_specs[expr] = (t, source, spec)
            self.add(expr, fast=f"{fast} == {spec_name}")
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

    def global_state(self) -> None:
        """Guards on the global torch state read now (besides grad mode, guarded as it changes):
        default dtype and device, deterministic algorithms, autocast."""
        for name, read in GLOBAL_STATE.items():
            if name == "___grad":
                continue
            value = read()
            if value is None or isinstance(value, bool):
                self.add(f"{name}() is {value!r}")
            elif isinstance(value, torch.dtype):
                self.add(f"{name}() is {self.ns.name_of(value)}")
            else:
                self.add(f"{name}() == {self.ns.name_of(value)}")

    def has_attribute(self, source: str, name: str, present: bool, obj=None) -> None:
        """`hasattr(source, name)` must stay `present` (an attribute added or deleted recompiles);
        `obj` is the object `source` reads now."""
        if obj is not None:
            self.note_attribute_read(source, obj)
        if not present and _plain_module(obj) and module_lacks(obj, name):
            self.add(f"___module_lacks({source}, {string_literal(name)})")
            return
        self.add(f"hasattr({source}, {string_literal(name)}) is {present!r}")

    def wants_native(self) -> bool:
        """Whether enough tensors are guarded for checks in C++ to pay (`native_guards`)."""
        return len(self._native_specs) >= NATIVE_MIN_TENSORS

    def uses_native(self) -> bool:
        """Whether the guard compiled now checks tensors in C++."""
        return self.wants_native() and native_guards.loaded() is not None

    def _compiled_form(self, expr: str, native: bool) -> str:
        """What the compiled guard evaluates for `expr`: with `native`, a C++ check where one serves."""
        if not native:
            return self._fast.get(expr, expr)
        module = native_guards.loaded()
        hooks_of = self._native_hooks.get(expr)
        if hooks_of is not None:
            self.ns.values["___without_hooks"] = module.without_hooks
            return f"___without_hooks({hooks_of})"
        function_args = self._native_functions.get(expr)
        if function_args is not None:
            self.ns.values["___same_function"] = module.same_function
            return f"___same_function({function_args})"
        native = self._native_specs.get(expr)
        if native is None:
            return self._fast.get(expr, expr)
        local, source, spec = native
        made = self._native_objects.get(expr)
        if made is None:
            made = self._native_objects[expr] = module.make_spec(*spec[:4], tuple(spec[4]), tuple(spec[5]))
        self.ns.values["___native_spec"] = module.check
        return f"___native_spec(({local} := {source}), {self.ns.name_of(made)})"

    def source_text(self, share_paths: bool = True) -> str:
        """The guard function's source; with `share_paths`, each submodule path is looked up once."""
        with self._lock:
            return self._source_text(share_paths)

    def _source_text(self, share_paths: bool) -> str:
        native = self.uses_native()
        exprs = [self._compiled_form(e, native) for e in self._behind_state_checks(self.exprs)]
        if share_paths:
            exprs = bind_shared_reads(exprs, self.ns.values)
            exprs = bind_shared_paths(_reuse_tensor_locals(exprs, self._tensor_locals))
        body = " and\n                ".join(exprs) or "True"
        return (
            "def guard(L, G):\n"
            "    try:\n"
            f"        return ({body})\n"
            "    except Exception:\n"
            "        return False\n"
        )

    def _behind_state_checks(self, exprs: list[str]) -> list[str]:
        """`exprs` with the guards on attribute reads of each object in `_state_roots` (its
        attribute's value, type or presence compared with a constant) gathered into one conjunct,
        where the first of them stood:

            (K7(L['self'].config) or (L['self'].config.use_cache is False and ...))

        `K7` is True where the object's state equals its state at capture: the same class and the
        same plain data, so reads through its class's code (a function of the two) give what they
        gave then, when every gathered guard held. Only where the state changed do the reads run."""
        gathered: dict[str, list[str]] = {}
        place: dict[int, str] = {}
        for i, expr in enumerate(exprs):
            root = _state_read_root(expr, self._state_roots)
            if root is not None:
                if root not in gathered:
                    place[i] = root
                gathered.setdefault(root, []).append(expr)
        # a state check costs about what three or four reads do
        gathered = {root: reads for root, reads in gathered.items() if len(reads) >= _MIN_GATHERED}
        place = {i: root for i, root in place.items() if root in gathered}
        if not gathered:
            return exprs
        out = []
        for i, expr in enumerate(exprs):
            root = place.get(i)
            if root is not None:
                reads = " and ".join(self._fast.get(e, e) for e in gathered[root])
                out.append(f"({self.ns.name_of(self._state_roots[root])}({root}) or ({reads}))")
            elif _state_read_root(expr, self._state_roots) not in gathered:
                out.append(expr)
        return out

    def compile(self):
        """The guard function `guard(L, G) -> bool`."""
        if self.wants_native():
            native_guards.request()
        with self._lock:
            try:
                return compile_function(self.source_text(), "guard", self.ns.values, "<torchsmith guard>")
            except GeneratedCodeError:  # a path shared where Python forbids `:=`: the plain form always works
                return compile_function(
                    self.source_text(share_paths=False), "guard", self.ns.values, "<torchsmith guard>"
                )

    def first_failure(self, L, G) -> str | None:
        """The first expression that is false (or raises) for these arguments; None if all hold."""
        scope = dict(self.ns.values)
        codes = self._expr_codes
        for expr in self.exprs:
            code = codes.get(expr)
            if code is None:
                code = codes[expr] = compile(expr, "<torchsmith guard>", "eval")
            try:
                ok = eval(code, scope, {"L": L, "G": G})  # noqa: S307 - our own generated text
            except Exception:
                ok = False
            if not ok:
                return expr
        return None

    def promote(self, expr: str) -> bool:
        """Move `expr` to the front, so the compiled guard checks it first; whether it moved. The
        dispatcher moves the check that told entries apart on a miss: the entries of the blocks
        of a model, each specialized on its own index, then fail on their first check."""
        with self._lock:
            if not self.exprs or self.exprs[0] == expr or expr not in self._seen:
                return False
            self.exprs.remove(expr)
            self.exprs.insert(0, expr)
            return True


def _python_attribute_lookup(obj) -> bool:
    """Whether reading `obj`'s attributes runs Python code of its class (not a module's)."""
    cls = type(obj)
    if isinstance(obj, torch.nn.Module) or isinstance(obj, type):
        return False
    lookup = (getattr(cls, "__getattribute__", None), getattr(cls, "__getattr__", None))
    return any(isinstance(f, types.FunctionType) for f in lookup)


# A guard that compares one attribute read of a source (its value, its type, its presence) with a
# literal or a constant: `S.name is False`, `S.name == K3`, `type(S.name) is K4`, `hasattr(S, 'n') is True`.
_ATTRIBUTE_GUARD = re.compile(
    r"(?:(?P<a>.+)\.\w+ (?:is (?:True|False|None)|== (?:K\d+|-?[\d.e+-]+|'[^'\\]*'|\"[^\"\\]*\"))"
    r"|type\((?P<b>.+)\.\w+\) is K\d+"
    r"|hasattr\((?P<c>.+), '\w+'\) is (?:True|False))"
)


_MIN_GATHERED = 4

# Tensors a guard checks before it asks for the C++ checks (and their one-time build).
NATIVE_MIN_TENSORS = 8


def _state_read_root(expr: str, roots: dict) -> str | None:
    """The root in `roots` (with a state check) whose attribute read `expr` guards, if any."""
    m = _ATTRIBUTE_GUARD.fullmatch(expr)
    if m is None:
        return None
    root = m.group("a") or m.group("b") or m.group("c")
    return root if roots.get(root) is not None else None


_IMMUTABLE_DATA = (type(None), bool, int, float, str, bytes)


def _lookup_class_data(cls: type) -> list:
    """Checks (no arguments) that the class data the class's own attribute lookup code may read
    is unchanged: each name that code holds (as a string constant or a name) which the class
    resolves to plain data (transformers' `attribute_map`), the same object with the same state.
    Raises `Unsupported` where such data is not plain."""
    names: set[str] = set()
    for klass in cls.__mro__:
        for hook in ("__getattribute__", "__getattr__"):
            fn = klass.__dict__.get(hook)
            if isinstance(fn, types.FunctionType):
                code = fn.__code__
                names.update(c for c in code.co_consts if type(c) is str)
                names.update(code.co_names)
    checks = []
    for name in sorted(names):
        owner = next((k for k in cls.__mro__ if name in k.__dict__), None)
        value = owner.__dict__[name] if owner is not None else None
        if owner is None or callable(value) or hasattr(type(value), "__get__"):
            continue  # not class data: methods and descriptors are code, guarded where capture reads them
        if type(value) in _IMMUTABLE_DATA:  # the same object: nothing in it can change
            checks.append(lambda d=owner.__dict__, n=name, v=value: d.get(n) is v)
            continue
        same = leaf_dict_check(value) or state_check(value, state_of(value))
        checks.append(lambda d=owner.__dict__, n=name, v=value, same=same: d.get(n) is v and same(v))
    return checks


def _quiet(check):
    """`check` answering False where it raises (the gathered guards then run and decide)."""

    def quiet(x) -> bool:
        try:
            return check(x)
        except Exception:
            return False

    return quiet


_NOT_ALWAYS_EVALUATED = re.compile(r"\b(or|if|for|lambda)\b")


_ACCESSORS = r"(?:\.\w+|\[[^\]]*\])*"
# Anything that reads another object: an argument, a global, a path from a constant, a local.
_OTHER_OBJECT = re.compile(r"\b[LG]\[|\bK\d+\s*[.\[]|___")


def _reuse_tensor_locals(exprs: list[str], tensor_locals: dict[str, str]) -> list[str]:
    """After the conjunct that binds a tensor's local (`___t3 := source`), later conjuncts read
    the local instead of evaluating `source` again (e.g. the aliasing check over all inputs)."""
    source_of = {local: source for source, local in tensor_locals.items()}
    bound: dict[str, str] = {}
    out = []
    for expr in exprs:
        if bound and not _NOT_ALWAYS_EVALUATED.search(expr):
            expr = _SOURCE.sub(lambda m: _longest_bound(m.group(0), bound), expr)
        out.append(expr)
        # A guard over a model with hundreds of parameters has thousands of conjuncts: look up
        # the locals a conjunct binds instead of testing every local against every conjunct.
        for local in _BINDING.findall(expr):
            source = source_of.get(local)
            if source is not None and source not in bound and f"({local} := {source})" in expr:
                bound[source] = local
    return out


# A source path (`L['self']._modules['fc']._parameters['weight']`, `G['x'][0]`) and its segments.
_SOURCE = re.compile(r"\b[LG]\['[^'\\]*'\](?:\.\w+|\['[^'\\]*'\]|\[-?\d+\])*")
_SEGMENT = re.compile(r"\.\w+|\['[^'\\]*'\]|\[-?\d+\]")
_BINDING = re.compile(r"\((___t\d+) := ")


def _longest_bound(path: str, bound: dict[str, str]) -> str:
    """`path` with its longest prefix that ends at a segment boundary and has a local read from it."""
    for end in reversed([m.end() for m in _SEGMENT.finditer(path)]):
        local = bound.get(path[:end])
        if local is not None:
            return local + path[end:]
    return path


def bind_shared_paths(exprs: list[str]) -> list[str]:
    """Rewrite the conjuncts so that each shared part of a source path (a submodule,
    `L['self']._modules['layers']._modules['0']`, or a chain from a constant through globals and
    closures, `K3.__globals__['f'].__closure__[0].cell_contents`) is evaluated once, into a local
    `___pN`, at its first use; later uses read the local. A prefix is shared where at least two
    uses part ways after it (binding a prefix always followed by the same step would save nothing).

    The conjuncts run left to right and the guard fails at the first false one, so a later use
    never runs without the first one having run, as long as the first use is not inside an `or`,
    conditional, comprehension or lambda (such conjuncts are left alone).
    """
    eligible = [not _NOT_ALWAYS_EVALUATED.search(e) for e in exprs]
    uses: dict[str, int] = {}  # prefix text -> how many paths start with it
    for expr, ok in zip(exprs, eligible):
        if ok:
            for match in _PATH.finditer(expr):
                for prefix in _prefixes(match.group(0)):
                    uses[prefix] = uses.get(prefix, 0) + 1
    step_uses: dict[str, int] = {}  # prefix -> the most paths that continue it with one same step
    for prefix, count in uses.items():
        chain = _prefixes(prefix)
        if len(chain) >= 2:
            step_uses[chain[-2]] = max(step_uses.get(chain[-2], 0), count)
    shared = {p for p, count in uses.items() if count >= 2 and step_uses.get(p, 0) < count}
    local_of: dict[str, str] = {}

    def replace(match: re.Match) -> str:
        path = match.group(0)
        text, done = _ROOT.match(path).group(0), len(_ROOT.match(path).group(0))
        for prefix in _prefixes(path):
            step = prefix[done:]
            done = len(prefix)
            if prefix in local_of:
                text = local_of[prefix]
            elif prefix in shared:
                local_of[prefix] = f"___p{len(local_of)}"
                text = f"({local_of[prefix]} := {text}{step})"
            else:
                text += step
        return text

    return [_PATH.sub(replace, e) if ok else e for e, ok in zip(exprs, eligible)]


# A source path from an argument, a global, a constant or a shared read, with at least one step.
_ROOT = re.compile(r"[LG]\['[^'\\]*'\]|K\d+|___c\d+")
_PATH = re.compile(r"\b(?:[LG]\['[^'\\]*'\]|K\d+|___c\d+)(?:\.\w+|\['[^'\\]*'\]|\[-?\d+\])+")


# Read-only methods of dicts and mappings that capture calls while tracing (a dict subclass's
# `get`, reached as `super().get(key)`); its guards repeat the read as a source, `K3(path, 'key')`.
DICT_READS = (
    dict.get,
    dict.__getitem__,
    dict.__contains__,
    collections.abc.Mapping.get,
    collections.abc.Mapping.__contains__,
)
# A call of a constant with arguments that hold no call: paths, literals and constants.
_READ_CALL = re.compile(r"(?<![\w.])(K\d+)\(([^()]*)\)")


def bind_shared_reads(exprs: list[str], values: dict) -> list[str]:
    """Rewrite the conjuncts so that a dict read (`DICT_READS`) that several of them make with
    the same arguments runs once, into a local `___cN`, at its first use; later uses read the local
    (and `bind_shared_paths` shares paths from it). A mapping's `get` is Python code of its class
    (transformers' attention registry): T5's guard repeated one such read 17 times. The guard reads
    and changes nothing, so one read answers for all of them; the conjuncts about its result
    (identity, code, globals) still all run. Only conjuncts that always run bind or read a local,
    as in `bind_shared_paths`."""

    def is_read(name: str) -> bool:
        value = values.get(name)
        return any(value is read for read in DICT_READS)

    eligible = [not _NOT_ALWAYS_EVALUATED.search(e) for e in exprs]
    uses: dict[str, int] = {}
    for expr, ok in zip(exprs, eligible):
        if ok:
            for match in _READ_CALL.finditer(expr):
                if is_read(match.group(1)):
                    uses[match.group(0)] = uses.get(match.group(0), 0) + 1
    local_of: dict[str, str] = {}

    def replace(match: re.Match) -> str:
        call = match.group(0)
        if uses.get(call, 0) < 2:
            return call
        if call in local_of:
            return local_of[call]
        local_of[call] = f"___c{len(local_of)}"
        return f"({local_of[call]} := {call})"

    return [_READ_CALL.sub(replace, e) if ok else e for e, ok in zip(exprs, eligible)]


def _prefixes(path: str) -> list[str]:
    """The prefixes of `path` that end at a step boundary, shortest (root and one step) first."""
    root = _ROOT.match(path).group(0)
    return [path[: len(root) + m.end()] for m in _SEGMENT.finditer(path[len(root) :])]


def compile_function(source: str, name: str, namespace: dict, filename: str):
    """exec `source` in a copy of `namespace` and return the function called `name`."""
    scope = dict(namespace)
    try:
        exec(compile(source, filename, "exec"), scope)  # noqa: S102 - generated by us
    except SyntaxError as e:
        raise GeneratedCodeError(f"internal error: generated code does not compile: {e}\n{source}") from e
    return scope[name]
