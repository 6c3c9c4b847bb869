"""copy.deepcopy of plain Python data inside compiled code is made at capture time (copies.py)."""

import copy

import torch


class Config:
    """Like transformers' PretrainedConfig: attribute hooks, nested plain data."""

    def __init__(self, layers=2, scale=0.5):
        self.encoder_layers = layers
        self.decoder_layers = layers + 1
        self.scale = scale
        self.labels = {0: "a", 1: "b"}

    def __setattr__(self, name, value):
        super().__setattr__(name, value)


def _decoder_view(config):
    out = copy.deepcopy(config)
    for key in list(copy.deepcopy(out.__dict__)):
        if key.startswith("decoder_"):
            value = getattr(out, key)
            delattr(out, key)
            setattr(out, key[len("decoder_"):], value)
    return out


def test_deepcopy_of_a_config_is_one_graph_guarded_on_the_config(compile_with, backend):
    config = Config()

    def f(x):
        view = _decoder_view(config)
        return x * view.layers * view.scale + len(view.labels)

    compiled = compile_with(f, fullgraph=True)
    x = torch.randn(3)
    torch.testing.assert_close(compiled(x), f(x))
    torch.testing.assert_close(compiled(x), f(x))
    assert len(backend.graphs) == 1
    assert "decoder_layers" in vars(config) and not hasattr(config, "layers")  # the original is untouched
    config.decoder_layers = 7  # read by the copy: recompiles
    torch.testing.assert_close(compiled(x), f(x))
    assert len(backend.graphs) == 2


def test_a_copy_that_escapes_is_a_new_object_on_every_call(compile_with):
    config = Config(layers=3)

    def f(x):
        view = _decoder_view(config)
        view.scale = 2.0
        return x + view.layers, view

    compiled = compile_with(f, fullgraph=True)
    x = torch.randn(2)
    (y1, view1), (_, view2) = compiled(x), compiled(x)
    expected, eager_view = f(x)
    torch.testing.assert_close(y1, expected)
    assert view1 is not view2 and view1 is not config
    assert vars(view1) == vars(eager_view) == vars(view2)
    view1.scale = 9.0  # the user owns the returned copy
    assert compiled(x)[1].scale == 2.0


def test_deepcopy_of_an_object_holding_a_tensor_is_a_break_that_runs_correctly(compile_with):
    config = Config()
    config.weights = torch.ones(3)

    def f(x):
        return x + copy.deepcopy(config).weights

    compiled = compile_with(f)
    x = torch.randn(3)
    torch.testing.assert_close(compiled(x), f(x))
    reasons = [str(r.break_reason) for r in compiled.session.records if r.break_reason is not None]
    assert any("holds a Tensor" in r for r in reasons), reasons


def test_a_list_changed_in_place_on_a_copy_is_read_back_and_never_lost(compile_with):
    config = Config()
    config.sizes = [1, 2]

    def read_back(x):
        view = copy.deepcopy(config)
        view.sizes.append(3)
        return x * sum(view.sizes)

    def escapes(x):
        view = copy.deepcopy(config)
        view.sizes.append(3)
        return x + 1, view

    x = torch.randn(2)
    torch.testing.assert_close(compile_with(read_back, fullgraph=True)(x), read_back(x))
    got, view = compile_with(escapes)(x)
    torch.testing.assert_close(got, x + 1)
    assert view.sizes == [1, 2, 3] and config.sizes == [1, 2]


def test_the_state_guard_sees_every_change_a_copy_would_see(compile_with, backend):
    config = Config()
    config.nested = Config(layers=5)
    config.ratio = float("nan")

    def f(x):
        view = copy.deepcopy(config)
        return x * view.decoder_layers + len(view.labels) + view.nested.encoder_layers + view.scale

    compiled = compile_with(f, fullgraph=True)
    x = torch.randn(3)
    graphs = 1

    def same(changes_graph: bool):
        nonlocal graphs
        torch.testing.assert_close(compiled(x), f(x))
        graphs += changes_graph
        assert len(backend.graphs) == graphs

    same(False)
    same(False)  # the guard holds on its own state (the NaN included)
    config.ratio = float("nan")  # another NaN object: the same state, no recompile
    same(False)
    config.labels[2] = "c"  # a nested dict changed in place
    same(True)
    del config.labels[1], config.labels[2]
    config.labels[True] = "b"  # a key equal to the old 1, of another type
    same(True)
    config.nested.encoder_layers = 6  # a nested object's attribute
    same(True)
    config.scale = 1  # an equal value of another type (0.5 -> 1 is not equal; 1.0 -> 1 below is)
    same(True)
    config.scale = 1.0  # 1.0 == 1: only the type differs
    same(True)
    config.scale = 1  # back to an int: the entry captured for it
    same(False)
    del config.scale
    config.scale = 1  # the same names and values, in another order
    same(True)
