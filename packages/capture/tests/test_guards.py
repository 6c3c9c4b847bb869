"""The compiled guard's fast form: inline tensor specs and submodule paths looked up once must
accept and reject exactly what the readable expressions do."""

import enum

import pytest
import torch

from torchsmith.capture.guards import bind_shared_paths, bind_shared_reads


def test_submodule_paths_are_looked_up_once():
    path = "L['self']._modules['layers']._modules['0']"
    exprs = [f"{path} is K1", f"{path}.training is True", f"(x := {path}) or True"]
    exprs.append(f"id({path}._parameters['w'])")
    shared = bind_shared_paths(exprs)
    assert shared[0] == f"(___p0 := {path}) is K1"
    assert shared[1] == "___p0.training is True"
    assert shared[2] == exprs[2]  # inside an `or`: left alone
    assert shared[3] == "id(___p0._parameters['w'])"


def test_paths_from_constants_share_the_steps_where_they_part():
    closure = "K3.__globals__['f'].__closure__[0].cell_contents"
    exprs = [f"type({closure}) is K4", f"{closure}.__code__ is K5", f"{closure}.__defaults__ == K6"]
    exprs.append("K3.__globals__['g'] is K7")
    shared = bind_shared_paths(exprs)
    # K3.__globals__ is used by all four, the closure by three: each looked up once.
    assert shared[0] == "type((___p1 := (___p0 := K3.__globals__)['f'].__closure__[0].cell_contents)) is K4"
    assert shared[1:] == ["___p1.__code__ is K5", "___p1.__defaults__ == K6", "___p0['g'] is K7"]


def _mlp():
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU()), torch.nn.Linear(4, 2)
    )


def test_negative_indices_share_their_paths_too():
    last = "K2._modules['layer'][-1]"
    exprs = [f"{last} is K3", f"{last}.training is False", f"len({last}._forward_hooks) == 0"]
    shared = bind_shared_paths(exprs)
    assert shared == ["(___p0 := K2._modules['layer'][-1]) is K3", "___p0.training is False",
                      "len(___p0._forward_hooks) == 0"]


def test_a_repeated_dict_read_runs_once():
    values = {"K1": dict.get, "K2": str.upper}
    read, other = "K1(L['self'].table, 'sdpa', K4)", "K2(L['self'].name)"
    exprs = [f"type({read}) is K5", f"{read}.__code__ is K6", f"{other} == 'A'", f"{other} == 'A'",
             f"{read} is None or {read}", f"{read}.__globals__['torch'] is K7"]
    reads = bind_shared_reads(exprs, values)
    assert reads[0] == f"type((___c0 := {read})) is K5"
    assert reads[1] == "___c0.__code__ is K6"
    assert reads[2:4] == exprs[2:4]  # not a dict read: called each time
    assert reads[4] == exprs[4]  # inside an `or`: left alone
    assert reads[5] == "___c0.__globals__['torch'] is K7"
    assert bind_shared_paths(reads)[5] == "___c0.__globals__['torch'] is K7"


def _tanh(x):
    return torch.tanh(x)


def _sigmoid(x):
    return torch.sigmoid(x)


class _Registry(dict):
    def get(self, key, default=None):
        return super().get(key, default)


class _OtherLinear(torch.nn.Linear):
    pass


class _Attention(torch.nn.Module):
    def __init__(self, registry):
        super().__init__()
        self.registry = registry
        self.layers = torch.nn.ModuleList([torch.nn.Linear(4, 4), torch.nn.Linear(4, 4)])

    def forward(self, x):
        fn = self.registry.get("act", torch.relu)
        h = fn(self.layers[-1](x)) + self.layers[-1].bias
        return self.registry.get("act", torch.relu)(h) * self.layers[-1].weight[0, 0]


def test_shared_reads_and_negative_paths_still_recompile_on_change(compile_with, backend):
    registry = _Registry(act=_tanh)
    model = _Attention(registry)
    compiled = compile_with(model)
    x = torch.randn(3, 4)
    torch.testing.assert_close(compiled(x), model(x))
    torch.testing.assert_close(compiled(x), model(x))
    assert len(backend.graphs) == 1  # the guard holds on the second call
    (entry,) = [e for cache in compiled._session.caches.values() for e in cache.entries]
    source = entry.guard_set.source_text()
    assert "(___c0 := " in source and "___c0.__code__" in source
    # [-1] of a ModuleList is read as its member's key, under a guard on the list's length
    assert "['1'])) is" in source and "._modules)) == 2" in source and "[-1]" not in source
    registry["act"] = _sigmoid  # what the shared read returns changes
    torch.testing.assert_close(compiled(x), model(x))
    assert len(backend.graphs) == 2
    model.layers[-1] = torch.nn.Linear(4, 4)  # another module of the same class: its weights are inputs
    torch.testing.assert_close(compiled(x), model(x))
    assert len(backend.graphs) == 2
    model.layers[-1] = _OtherLinear(4, 4)  # the module behind the shared [-1] path changes class
    torch.testing.assert_close(compiled(x), model(x))
    assert len(backend.graphs) == 3
    model.layers.append(torch.nn.Linear(4, 4))  # [-1] is now another module, a Linear again
    torch.testing.assert_close(compiled(x), model(x))
    assert len(backend.graphs) == 4  # the length [-1] depends on changed
    model.layers.append(_OtherLinear(4, 4))  # and an _OtherLinear again
    torch.testing.assert_close(compiled(x), model(x))
    assert len(backend.graphs) == 5
    del model.layers[2:]  # back to two layers, [-1] an _OtherLinear: the second entry again
    torch.testing.assert_close(compiled(x), model(x))
    assert len(backend.graphs) == 5


class _Indexed(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = torch.nn.ModuleList([torch.nn.Linear(4, 4), torch.nn.Linear(4, 4)])

    def forward(self, x):
        return self.layers[1](self.layers[0](x)) * 2 + self.layers[-1].bias


def test_module_list_members_are_read_by_key_and_follow_the_list(compile_with, backend):
    model = _Indexed()
    compiled = compile_with(model)
    x = torch.randn(3, 4)
    torch.testing.assert_close(compiled(x), model(x))
    (entry,) = [e for cache in compiled._session.caches.values() for e in cache.entries]
    run_source = entry.output.source
    assert "._modules)['0']" in run_source and "['1']._parameters" in run_source
    guard_source = entry.guard_set.source_text()
    for text in (run_source, guard_source):
        assert "._modules)[0]" not in text and "]._modules[1]" not in text and "[-1]" not in text
        assert "'layers']._modules)[" not in text.replace("._modules)['", "")
    model.layers[0] = torch.nn.Linear(4, 4)  # a new member: the graph reads its weights
    torch.testing.assert_close(compiled(x), model(x))
    model.layers.insert(0, torch.nn.Linear(4, 4))  # every index now names another member
    torch.testing.assert_close(compiled(x), model(x))
    del model.layers[0]
    del model.layers[0]  # one member left: layers[1] raises, as it does eagerly
    with pytest.raises(IndexError):
        model(x)
    with pytest.raises(IndexError):
        compiled(x)
    model.layers.append(torch.nn.Linear(4, 4, bias=False))  # [-1].bias is None: `+ None` raises
    with pytest.raises(TypeError):
        model(x)
    with pytest.raises(TypeError):
        compiled(x)
    model.layers[1] = torch.nn.Linear(4, 4)
    torch.testing.assert_close(compiled(x), model(x))


def test_swapping_a_nested_submodule_recompiles(compile_with, backend):
    model = _mlp()
    compiled = compile_with(model)
    x = torch.randn(3, 4)
    torch.testing.assert_close(compiled(x), model(x))
    torch.testing.assert_close(compiled(x), model(x))
    assert len(backend.graphs) == 1  # the guard holds on the second call
    model[0][0] = torch.nn.Linear(4, 4)  # same class and shapes: the graph reads the new weights
    torch.testing.assert_close(compiled(x), model(x))
    assert len(backend.graphs) == 1
    model[0][0] = _OtherLinear(4, 4)
    torch.testing.assert_close(compiled(x), model(x))
    assert len(backend.graphs) == 2
    model[0][0] = torch.nn.Linear(4, 4, bias=False)
    torch.testing.assert_close(compiled(x), model(x))
    assert len(backend.graphs) == 3


def test_changing_a_nested_parameter_or_flag_recompiles(compile_with, backend):
    model = _mlp()
    compiled = compile_with(model)
    x = torch.randn(3, 4)
    compiled(x)
    with torch.no_grad():
        model[0][0].weight.data = torch.randn(4, 4, dtype=torch.float64)
        model[0][0].bias.data = torch.randn(4, dtype=torch.float64)
    model[1].double()
    torch.testing.assert_close(compiled(x.double()), model(x.double()))
    assert len(backend.graphs) == 2
    model[0][1].eval()
    torch.testing.assert_close(compiled(x.double()), model(x.double()))
    assert len(backend.graphs) == 3


def test_tensor_locals_are_reused_after_their_binding():
    from torchsmith.capture.guards import _reuse_tensor_locals

    spec = "(type(___t0 := L['x']), ___t0.dtype) == K1"
    exprs = ["len({id(L['x'])}) == 1", spec, "len({id(L['x']), id(L['xs'])}) == 2", "L['x'] is None or True"]
    out = _reuse_tensor_locals(exprs, {"L['x']": "___t0"})
    assert out == [exprs[0], spec, "len({id(___t0), id(L['xs'])}) == 2", exprs[3]]


def test_tensor_locals_replace_whole_paths_longest_first():
    from torchsmith.capture.guards import _reuse_tensor_locals

    w, w2 = "L['m']._parameters['w']", "L['m']._parameters['w2']"
    exprs = [f"(___t0 := {w}).dim() == 2", f"(___t1 := {w2}).dim() == 1", f"id({w2}) != id({w}) and {w}.a"]
    out = _reuse_tensor_locals(exprs, {w: "___t0", w2: "___t1"})
    assert out[2] == "id(___t1) != id(___t0) and ___t0.a"


def test_guards_below_a_code_object_follow_from_its_identity():
    from torchsmith.capture.guards import GuardSet, Namespace

    guards = GuardSet(Namespace())
    code = (lambda a, b: a).__code__
    guards.identity("G['f'].__code__", code)
    guards.add("type(G['f'].__code__.co_varnames) is K9")
    guards.add("G['f'].__code__.co_varnames[0] == 'a'")
    kept = ["G['f'].__code__.co_varnames[0] == L['x']", "G['g'].__code__.co_varnames[0] == 'a'"]
    for expr in kept:  # one reads an argument too, one another function's code
        guards.add(expr)
    assert guards.exprs[1:] == kept


def test_aliased_inputs_still_recompile(compile_with, backend):
    def f(x, y):
        return x.add_(1) * y

    compiled = compile_with(f)
    a, b = torch.ones(3), torch.ones(3)
    torch.testing.assert_close(compiled(a, b), torch.full((3,), 2.0))
    c = torch.ones(3)
    torch.testing.assert_close(compiled(c, c), torch.full((3,), 4.0))  # y sees x's update
    assert len(backend.graphs) == 2


def test_call_binding_fills_defaults_and_keywords_as_inspect_does():
    """Guards read a call's arguments by parameter name: the fast binding (no inspect) must agree
    with inspect's on defaults, keywords and errors."""
    import inspect

    from torchsmith.capture.dispatch import bind

    def forward(x, mask=None, padding=None, causal=False):
        return x

    def variadic(x, *rest, scale=1.0):
        return x

    calls = [
        (forward, (1,), {}),
        (forward, (1, 2), {}),
        (forward, (1,), {"causal": True}),
        (forward, (1, 2), {"padding": 3}),
        (variadic, (1, 2, 3), {"scale": 2.0}),
    ]
    for fn, args, kwargs in calls:
        expected = inspect.signature(fn).bind(*args, **kwargs)
        expected.apply_defaults()
        assert list(bind(fn, args, kwargs).items()) == list(expected.arguments.items())
    for args, kwargs in [((), {}), ((1,), {"x": 1}), ((1,), {"unknown": 1})]:
        with pytest.raises(TypeError):
            bind(forward, args, kwargs)


def test_module_flags_hooks_and_patched_forwards_recompile(compile_with, backend):
    model = _mlp()
    compiled = compile_with(model)
    x = torch.randn(3, 4)
    compiled(x)
    steps = [
        lambda: model[0][1].eval(),  # a flag of a nested module
        lambda: model[0][0].register_forward_hook(lambda m, i, o: o * 2),  # a hook added
        lambda: model[1].register_forward_pre_hook(lambda m, i: (i[0] + 1,)),
        lambda: setattr(model[0][1], "forward", lambda t: t - 1),  # forward patched on the instance
    ]
    for graphs, step in enumerate(steps, start=2):
        step()
        torch.testing.assert_close(compiled(x), model(x))
        assert len(backend.graphs) == graphs


class _Mode(enum.IntEnum):
    SCALE = 1
    SHIFT = 2


class _ByMode(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.mode = _Mode.SCALE

    def forward(self, x):
        if self.mode == _Mode.SCALE:
            return x * 2
        return x + self.mode  # the member as a number


def test_an_enum_member_is_guarded_by_identity(compile_with, backend):
    model = _ByMode()
    compiled = compile_with(model)
    x = torch.randn(3)
    torch.testing.assert_close(compiled(x), model(x))
    (entry,) = [e for cache in compiled._session.caches.values() for e in cache.entries]
    mode_guards = [e for e in entry.guard_set.exprs if ".mode" in e and "_Mode" not in e]
    assert len(mode_guards) == 1 and " is K" in mode_guards[0]  # no separate class and value checks
    model.mode = _Mode.SHIFT
    torch.testing.assert_close(compiled(x), model(x))
    assert len(backend.graphs) == 2
    model.mode = 2  # equal to SHIFT, but an int: `x + 2` either way, yet not the member captured
    torch.testing.assert_close(compiled(x), model(x))
    assert len(backend.graphs) == 3
    model.mode = _Mode.SCALE
    torch.testing.assert_close(compiled(x), model(x))
    assert len(backend.graphs) == 3


class _Config:
    """Reads its attributes through Python code, as transformers' configs do (an alias map)."""

    aliases = {"width": "hidden"}

    def __init__(self):
        self.hidden, self.scale, self.use_bias, self.name = 4, 0.5, True, "cfg"
        self.table = {"theta": 2.0}

    def __getattribute__(self, key):
        if key != "aliases" and key in object.__getattribute__(self, "aliases"):
            key = object.__getattribute__(self, "aliases")[key]
        return object.__getattribute__(self, key)


class _Configured(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.config = _Config()

    def forward(self, x):
        c = self.config
        y = x * c.scale + c.width
        if c.use_bias and c.name == "cfg" and not hasattr(c, "dropout"):
            y = y + 1
        return y * c.table["theta"]


def test_reads_through_a_python_getattribute_sit_behind_one_state_check(compile_with, backend):
    model = _Configured()
    compiled = compile_with(model)
    x = torch.randn(3, 4)
    torch.testing.assert_close(compiled(x), model(x))
    torch.testing.assert_close(compiled(x), model(x))
    assert len(backend.graphs) == 1
    (entry,) = [e for cache in compiled._session.caches.values() for e in cache.entries]
    source = entry.guard_set.source_text()
    # one conjunct asks whether the config's state is unchanged; only if not do the reads run
    gathered = [line for line in source.splitlines() if "config) or (" in line]
    assert len(gathered) == 1 and "hasattr(" in gathered[0] and ".use_bias is True" in gathered[0]
    assert source.count("hasattr(") == 1
    # every kind of change still recompiles: a value, its type, an alias's target, an attribute
    # added that was absent, a nested dict changed in place
    changes = [
        lambda c: setattr(c, "scale", 2.0),
        lambda c: setattr(c, "use_bias", 1),
        lambda c: setattr(c, "hidden", 7),
        lambda c: setattr(c, "dropout", 0.1),
        lambda c: c.table.__setitem__("theta", 3.0),
        lambda c: setattr(c, "name", "other"),
    ]
    for graphs, change in enumerate(changes, start=2):
        change(model.config)
        torch.testing.assert_close(compiled(x), model(x))
        assert len(backend.graphs) == graphs
        torch.testing.assert_close(compiled(x), model(x))
        assert len(backend.graphs) == graphs  # and the new entry's guard holds on the next call


def test_the_state_check_covers_the_class_data_its_lookup_reads(compile_with, backend):
    model = _Configured()
    compiled = compile_with(model)
    x = torch.randn(3, 4)
    torch.testing.assert_close(compiled(x), model(x))
    try:
        _Config.aliases["width"] = "scale"  # c.width now reads another attribute
        torch.testing.assert_close(compiled(x), model(x))
        assert len(backend.graphs) == 2
    finally:
        _Config.aliases["width"] = "hidden"


class _Windowed(torch.nn.Module):
    """Reads a tuple of constants (nested, mixed types) as convolutions read their stride."""

    def __init__(self):
        super().__init__()
        self.window = (2, (1, 0.5), "same", None, True)

    def forward(self, x):
        step, (offset, scale), mode, _, flag = self.window
        y = x * step * scale + offset
        return y + 1 if flag and mode == "same" else y


def test_a_tuple_of_constants_is_one_guard_and_any_change_recompiles(compile_with, backend):
    model = _Windowed()
    compiled = compile_with(model)
    x = torch.randn(6)
    torch.testing.assert_close(compiled(x), model(x))
    (entry,) = [e for cache in compiled._session.caches.values() for e in cache.entries]
    window = [e for e in entry.guard_set.exprs if ".window" in e]
    assert window == [window[0]] and "___same_constants(" in window[0]
    model.window = (2, (1, 0.5), "same", None, True)  # a new but equal tuple: the same entry
    torch.testing.assert_close(compiled(x), model(x))
    assert len(backend.graphs) == 1
    changes = [(3, (1, 0.5), "same", None, True), (2, (1, 0.25), "same", None, True),
               (2.0, (1, 0.5), "same", None, True), (2, (1, 0.5), "same", None, False),
               (2, (1, 0.5), "same", 0, True), (2, (True, 0.5), "same", None, True),
               [2, (1, 0.5), "same", None, True]]
    for k, window in enumerate(changes):
        model.window = window
        torch.testing.assert_close(compiled(x), model(x))
        assert len(backend.graphs) == k + 2, window
