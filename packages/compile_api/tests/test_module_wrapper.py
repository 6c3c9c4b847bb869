"""A compiled nn.Module behaves as the original: state_dict keys, attributes, train()/eval(), dtype and
device moves, hooks; and mark_static keeps a dim specialized."""

import torch

import torchsmith


def counting():
    eager = torchsmith.lookup_backend("eager")

    def backend(graph, example_inputs):
        backend.graphs.append(graph)
        return eager(graph, example_inputs)

    backend.graphs = []
    return backend


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(3, 3)
        self.scale = 2.0
        self.register_buffer("offset", torch.ones(3))

    def forward(self, x):
        return torch.nn.functional.dropout(self.fc(x), 0.5, self.training) * self.scale + self.offset


def test_state_dict_keys_are_the_originals_without_a_prefix():
    model = Block()
    compiled = torchsmith.compile(model, backend="eager")
    assert list(compiled.state_dict()) == ["offset", "fc.weight", "fc.bias"] == list(model.state_dict())
    compiled.load_state_dict({k: torch.zeros_like(v) for k, v in model.state_dict().items()})
    assert torch.count_nonzero(model.fc.weight) == 0
    assert [n for n, _ in compiled.named_parameters()] == ["fc.weight", "fc.bias"]
    assert compiled._orig_mod is model and isinstance(compiled, torch.nn.Module)


def test_attributes_read_and_write_through_and_guards_see_the_change():
    model = Block().eval()
    backend = counting()
    compiled = torchsmith.compile(model, backend=backend)
    x = torch.randn(2, 3)
    torch.testing.assert_close(compiled(x), model(x))
    assert compiled.scale == 2.0 and compiled.fc is model.fc
    compiled.scale = 3.0
    assert model.scale == 3.0
    torch.testing.assert_close(compiled(x), model(x))  # the constant was guarded: recompiled
    assert len(backend.graphs) == 2


def test_training_flag_follows_the_original_both_ways():
    model = Block()
    compiled = torchsmith.compile(model, backend="eager")
    assert compiled.training and model.training
    assert compiled.eval() is compiled
    assert not compiled.training and not model.training and not model.fc.training
    model.train()
    assert compiled.training
    compiled.training = False
    assert not model.training


def test_eval_mode_output_matches_and_train_mode_recompiles():
    model = Block()
    backend = counting()
    compiled = torchsmith.compile(model, backend=backend).eval()
    x = torch.randn(4, 3)
    torch.testing.assert_close(compiled(x), model(x))
    compiled.train()
    compiled(x)
    assert len(backend.graphs) == 2


def test_dtype_moves_reach_the_originals_own_parameters():
    model = torch.nn.Linear(3, 2)  # parameters directly on the module, no children
    compiled = torchsmith.compile(model, backend="eager")
    assert compiled.double() is compiled
    assert model.weight.dtype == torch.float64 and model.bias.dtype == torch.float64
    x = torch.randn(5, 3, dtype=torch.float64)
    torch.testing.assert_close(compiled(x), model(x))
    compiled.requires_grad_(False)
    assert not model.weight.requires_grad
    seen = []
    compiled.apply(lambda m: seen.append(type(m).__name__))
    assert seen == ["Linear"]


def test_forward_hooks_registered_through_the_wrapper_run():
    model = torch.nn.Linear(2, 2)
    compiled = torchsmith.compile(model, backend="eager")
    compiled.register_forward_hook(lambda module, args, out: out * 0)
    torch.testing.assert_close(compiled(torch.randn(3, 2)), torch.zeros(3, 2))


def test_mark_static_keeps_a_dim_specialized_under_dynamic_true():
    backend = counting()
    f = torchsmith.compile(lambda x: x * 2, backend=backend, dynamic=True)
    x = torch.randn(4, 5)
    torchsmith.mark_static(x, 1)
    f(x)
    (graph,) = backend.graphs
    shape = graph.inputs[0].type.shape
    assert not isinstance(shape[0], int) and shape[1] == 5


def test_mark_static_wins_over_mark_dynamic_and_automatic_dynamic():
    backend = counting()
    f = torchsmith.compile(lambda x: x + 1, backend=backend)
    for n in (3, 4, 5):
        x = torch.randn(n)
        torchsmith.mark_static(x, 0)
        torchsmith.mark_dynamic(x, 0)
        torch.testing.assert_close(f(x), x + 1)
    assert [g.inputs[0].type.shape for g in backend.graphs] == [(3,), (4,), (5,)]


def test_mark_static_checks_the_dim():
    import pytest

    with pytest.raises(torchsmith.CaptureError, match="dim 2 is out of range for a 2-d tensor"):
        torchsmith.mark_static(torch.ones(2, 2), 2)
