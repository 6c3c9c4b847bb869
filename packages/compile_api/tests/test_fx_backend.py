"""Backends written for torch.compile (fx backends) through torchsmith.fx_backend."""

import pytest
import torch

import torchsmith


class NodeCounter:
    """An fx backend that counts the call nodes of each GraphModule and runs it as is."""

    def __init__(self):
        self.graphs = []

    def __call__(self, gm, example_inputs):
        assert isinstance(gm, torch.fx.GraphModule)
        assert all(isinstance(x, torch.Tensor) for x in example_inputs)
        self.graphs.append([n for n in gm.graph.nodes if n.op.startswith("call_")])
        return gm.forward


def run_through_interpreter(gm, example_inputs):
    """An fx backend that executes the GraphModule node by node with torch.fx.Interpreter."""
    interpreter = torch.fx.Interpreter(gm)
    return lambda *args: interpreter.run(*args)


class Mlp(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(8, 16)
        self.fc2 = torch.nn.Linear(16, 4)
        self.register_buffer("offset", torch.randn(4))

    def forward(self, x):
        return self.fc2(torch.nn.functional.gelu(self.fc1(x))) + self.offset


def attention(q, k, v):
    scores = q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5
    return torch.softmax(scores, dim=-1) @ v, scores.amax(dim=-1)


def with_break(x):
    y = x.cos() * 2
    print("graph break", end="\r")
    return y.sum(0) + x.mean()


PROGRAMS = [
    ("mlp", Mlp, lambda: (torch.randn(3, 8),)),
    ("attention", lambda: attention, lambda: tuple(torch.randn(2, 5, 8) for _ in range(3))),
    ("with_break", lambda: with_break, lambda: (torch.randn(4, 3),)),
]


@pytest.mark.parametrize("name, make, inputs", PROGRAMS, ids=[p[0] for p in PROGRAMS])
@pytest.mark.parametrize("aot", [False, True])
def test_outputs_equal_eager_with_a_counting_fx_backend(name, make, inputs, aot):
    fn, args = make(), inputs()
    counter = NodeCounter()
    compiled = torchsmith.compile(fn, backend=torchsmith.fx_backend(counter, aot=aot))
    torch.testing.assert_close(compiled(*args), fn(*args))
    assert len(counter.graphs) == (2 if name == "with_break" else 1)
    assert all(counter.graphs)
    targets = {str(n.target) for nodes in counter.graphs for n in nodes}
    if aot:  # ATen-level graphs
        assert any(t.startswith("aten.") for t in targets), targets
    else:  # the captured torch-level graph
        assert not any(t.startswith("aten.") for t in targets), targets


@pytest.mark.parametrize("name, make, inputs", PROGRAMS, ids=[p[0] for p in PROGRAMS])
def test_outputs_equal_eager_with_an_fx_interpreter_backend(name, make, inputs):
    fn, args = make(), inputs()
    compiled = torchsmith.compile(fn, backend=torchsmith.fx_backend(run_through_interpreter))
    torch.testing.assert_close(compiled(*args), fn(*args))


@pytest.mark.parametrize("aot", [False, True])
def test_training_gradients_equal_eager(aot):
    torch.manual_seed(0)
    model = Mlp()
    reference = Mlp()
    reference.load_state_dict(model.state_dict())
    counter = NodeCounter()
    compiled = torchsmith.compile(model, backend=torchsmith.fx_backend(counter, aot=aot))
    x = torch.randn(5, 8, requires_grad=True)
    x_ref = x.detach().clone().requires_grad_()
    compiled(x).pow(2).sum().backward()
    reference(x_ref).pow(2).sum().backward()
    torch.testing.assert_close(x.grad, x_ref.grad)
    for p, q in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(p.grad, q.grad)
    # aot: the forward graph, then the backward graph at the first backward
    assert len(counter.graphs) == (2 if aot else 1)


def test_a_registered_name_finds_the_adapter():
    counter = NodeCounter()
    torchsmith.register_fx_backend("test_fx_counter", counter)
    assert "test_fx_counter" in torchsmith.list_backends()
    f = torchsmith.compile(lambda x: torch.relu(x) + 1, backend="test_fx_counter")
    x = torch.randn(6)
    torch.testing.assert_close(f(x), torch.relu(x) + 1)
    assert len(counter.graphs) == 1 and len(counter.graphs[0]) == 2  # relu, then the add


def test_an_fx_backend_rewriting_the_graph_is_honoured():
    def swap_add_for_sub(gm, example_inputs):
        for node in gm.graph.nodes:
            if node.op == "call_method" and node.target == "__add__":
                node.target = "__sub__"
        gm.recompile()
        return gm.forward

    f = torchsmith.compile(lambda x, y: x + y, backend=torchsmith.fx_backend(swap_add_for_sub))
    x, y = torch.randn(3), torch.randn(3)
    torch.testing.assert_close(f(x, y), x - y)


def test_a_backend_returning_no_callable_is_a_clear_error():
    def broken(gm, example_inputs):
        return None

    f = torchsmith.compile(
        lambda x: x * 2, backend=torchsmith.fx_backend(broken), options={"fallback": "raise"}
    )
    with pytest.raises(torchsmith.TorchsmithError, match="not a callable"):
        f(torch.randn(2))


def test_a_non_callable_fx_compiler_is_refused():
    with pytest.raises(torchsmith.BackendError, match="callable"):
        torchsmith.fx_backend("inductor")
