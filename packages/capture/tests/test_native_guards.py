"""The C++ tensor checks (`native_guards`) against the Python guard they replace."""

import functools

import pytest
import torch

from torchsmith.capture import native_guards
from torchsmith.capture.guards import NATIVE_MIN_TENSORS, tensor_spec


def _native_module():
    """The loaded extension, built now if needed (a few dozen seconds, once per machine)."""
    if not native_guards.enabled():
        pytest.skip("TORCHSMITH_NATIVE_GUARDS=0 in this environment")
    native_guards.request()
    if not native_guards.wait(600):
        pytest.fail("the C++ tensor checks did not build or load; the log of "
                    "torchsmith.native says why")
    return native_guards.loaded()


class _Subclass(torch.Tensor):
    pass


def _tensors() -> list:
    base = torch.randn(4, 6)
    return [
        base,
        base.t(),  # other strides
        base[:, :3],  # a view: same strides, other sizes
        base.reshape(6, 4),
        base.double(),
        base.to(torch.bfloat16),
        base.clone().requires_grad_(),
        torch.nn.Parameter(base.clone()),
        torch.nn.Parameter(base.clone(), requires_grad=False),
        torch.empty(4, 6, device="meta"),
        torch.empty(4, 6).as_strided((4, 6), (1, 0)),  # a broadcast stride
        torch.randn(4, 1, 6),
        torch.randn(4, 6, 1),
        torch.tensor(3.0),  # no dims
        torch.empty(0, 6),
        base.as_subclass(_Subclass),
        base.to_sparse(),  # no strides: the Python spec raises, the check says False
        None,
        3,
        [base],
    ]


def _python_check(value, spec: tuple) -> bool:
    try:
        return tensor_spec(value) == spec
    except Exception:
        return False


def test_the_cpp_check_agrees_with_the_python_spec_on_every_pair():
    module = _native_module()
    tensors = _tensors()
    specs = [tensor_spec(t) for t in tensors
             if type(t) in native_guards.NATIVE_TYPES and t.layout == torch.strided]
    assert len(specs) >= 14
    for spec in specs:
        native = module.make_spec(*spec[:4], tuple(spec[4]), tuple(spec[5]))
        for value in tensors:
            assert module.check(value, native) is _python_check(value, spec), (value, spec)
    with pytest.raises(TypeError):
        module.check(tensors[0], specs[0])  # a Python tuple is not a native spec
    with pytest.raises(ValueError):
        module.make_spec(torch.Tensor, torch.float32, torch.device("cpu"), False, (2, 3), (3,))


def _model(layers: int) -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(*[torch.nn.Linear(5, 5) for _ in range(layers)])


def test_a_model_guard_checks_its_tensors_in_cpp_and_still_recompiles_on_each_change(compile_with, backend):
    _native_module()
    model = _model(NATIVE_MIN_TENSORS)
    compiled = compile_with(model)
    x = torch.randn(3, 5)
    torch.testing.assert_close(compiled(x), model(x))
    (entry,) = [e for cache in compiled._session.caches.values() for e in cache.entries]
    assert entry.guard_set.uses_native() and "___native_spec((" in entry.guard_set.source_text()
    torch.testing.assert_close(compiled(x), model(x))
    assert len(backend.graphs) == 1
    changes = [
        lambda: setattr(model[0].weight, "data", torch.randn(5, 5).t()),  # strides, in place of the data
        lambda: model[1].weight.requires_grad_(False),
        lambda: setattr(model[2], "bias", torch.nn.Parameter(torch.randn(5).double())),
        lambda: setattr(model[3].weight, "data", torch.randn(5, 5)[:, :5]),  # same layout: no recompile
    ]
    for count, change in zip((2, 3, None, None), changes):
        change()
        if count is None:  # float64 bias: eager raises, and so does the recompiled graph
            continue
        torch.testing.assert_close(compiled(x), model(x))
        assert len(backend.graphs) == count
    model[2].bias = torch.nn.Parameter(torch.randn(5))
    torch.testing.assert_close(compiled(x), model(x))
    torch.testing.assert_close(compiled(x.t().contiguous().t()), model(x))  # an input's strides


def test_the_cpp_hook_check_agrees_with_the_python_checks():
    module = _native_module()
    plain = torch.nn.Linear(2, 2)
    assert module.without_hooks(plain) is True
    for hooked in (
        lambda m: m.register_forward_pre_hook(lambda *a: None),
        lambda m: m.register_forward_hook(lambda *a: None),
        lambda m: m.register_full_backward_hook(lambda *a: None),
        lambda m: m.register_full_backward_pre_hook(lambda *a: None),
        lambda m: setattr(m, "forward", lambda x: x),  # an instance's own forward
    ):
        m = torch.nn.Linear(2, 2)
        hooked(m)
        assert module.without_hooks(m) is False
    missing = torch.nn.Linear(2, 2)
    del missing.__dict__["_forward_hooks"]
    assert module.without_hooks(missing) is False
    assert module.without_hooks(3) is False and module.without_hooks(object()) is False


def _scaled(factor=2.0, *, shift=0.0):
    return lambda x: x * factor + shift


def test_the_cpp_function_check_agrees_with_the_python_checks():
    module = _native_module()
    fn = _scaled()

    def python_check(other, fields) -> bool:
        t, code, defaults, kwdefaults, globals_ = fields
        try:
            return (type(other) is t and other.__code__ is code and other.__defaults__ == defaults
                    and other.__kwdefaults__ == kwdefaults and other.__globals__ is globals_)
        except Exception:
            return False

    def plain(x, y=1):
        return x

    def keyword_only(x, *, y=1):
        return x

    changed = _scaled()
    changed.__defaults__ = (3.0,)  # a default changed after the capture
    candidates = [fn, _scaled(), _scaled(5.0), changed, plain, keyword_only, _scaled, len, 3, None,
                  functools.partial(fn, 1)]
    for reference in (fn, plain, keyword_only):
        fields = (type(reference), reference.__code__, reference.__defaults__, reference.__kwdefaults__,
                  reference.__globals__)
        for other in candidates:
            assert module.same_function(other, *fields) is python_check(other, fields), (reference, other)
    assert module.same_function(_scaled(), *(type(fn), fn.__code__, None, None, fn.__globals__)) is True
    with pytest.raises(TypeError):
        module.same_function(fn)


def test_a_function_the_program_reads_is_one_cpp_check_and_recompiles_on_a_new_default(compile_with, backend):
    _native_module()
    model = _model(NATIVE_MIN_TENSORS)
    x = torch.randn(3, 5)

    def run(fn):
        return fn(model(x))

    holder = {"fn": _scaled()}
    compiled = compile_with(lambda x: holder["fn"](model(x)))
    torch.testing.assert_close(compiled(x), run(holder["fn"]))
    holder["fn"] = _scaled()  # a new closure of the same code and defaults: the same entry
    torch.testing.assert_close(compiled(x), run(holder["fn"]))
    assert len(backend.graphs) == 1
    (entry,) = [e for cache in compiled._session.caches.values() for e in cache.entries]
    assert "___same_function(" in entry.guard_set.source_text()
    holder["fn"].__defaults__ = (3.0,)
    torch.testing.assert_close(compiled(x), run(holder["fn"]))
    assert len(backend.graphs) == 2


def test_a_hook_added_after_compiling_recompiles_under_the_cpp_check(compile_with, backend):
    _native_module()
    model = _model(NATIVE_MIN_TENSORS)
    compiled = compile_with(model)
    x = torch.randn(3, 5)
    torch.testing.assert_close(compiled(x), model(x))
    (entry,) = [e for cache in compiled._session.caches.values() for e in cache.entries]
    assert "___without_hooks(" in entry.guard_set.source_text()
    calls = []
    model[3].register_forward_hook(lambda m, args, out: calls.append(1) or out * 2)
    torch.testing.assert_close(compiled(x), model(x))
    assert len(backend.graphs) == 2 and len(calls) == 2


def test_a_small_guard_keeps_the_python_form(compile_with):
    model = _model(1)
    compiled = compile_with(model)
    compiled(torch.randn(3, 5))
    (entry,) = [e for cache in compiled._session.caches.values() for e in cache.entries]
    assert not entry.guard_set.wants_native()
    assert "___native_spec" not in entry.guard_set.source_text()


def test_guards_compiled_before_the_extension_loads_are_recompiled(compile_with, backend, monkeypatch):
    module = _native_module()
    extension = native_guards.EXTENSION
    monkeypatch.setattr(extension, "_module", None)  # as while the build still runs
    monkeypatch.setattr(extension, "_building", True)
    monkeypatch.setattr(extension, "_callbacks", [])
    model = _model(NATIVE_MIN_TENSORS)
    compiled = compile_with(model)
    x = torch.randn(3, 5)
    torch.testing.assert_close(compiled(x), model(x))
    (entry,) = [e for cache in compiled._session.caches.values() for e in cache.entries]
    assert not entry.guard_set.uses_native() and "___native_spec" not in entry.guard_set.source_text()
    before = entry.guard
    extension.publish(module)  # what the build thread does once the library loads
    assert entry.guard is not before and entry.guard_set.uses_native()
    torch.testing.assert_close(compiled(x), model(x))
    model[0].weight.requires_grad_(False)
    torch.testing.assert_close(compiled(x), model(x))
    assert len(backend.graphs) == 2
