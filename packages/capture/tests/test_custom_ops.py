"""torch.library custom ops are recorded as one graph op each (custom_ops.py)."""

import torch


@torch.library.custom_op("torchsmith_capture_test::row_scale", mutates_args=())
def row_scale(x: torch.Tensor, offs: torch.Tensor) -> torch.Tensor:
    out = x.clone()
    for i, end in enumerate(offs.tolist()):  # data-dependent: opaque to capture by design
        out[:end] *= i + 2
    return out


@row_scale.register_fake
def _(x, offs):
    return torch.empty_like(x)


@torch.library.custom_op("torchsmith_capture_test::no_fake", mutates_args=())
def no_fake(x: torch.Tensor) -> torch.Tensor:
    return x * 3


def test_a_custom_op_with_a_fake_is_one_graph_op(compile_with, backend):
    def f(x, offs):
        return torch.ops.torchsmith_capture_test.row_scale(x.relu(), offs) + 1

    compiled = compile_with(f, fullgraph=True)
    x, offs = torch.randn(5, 3), torch.tensor([1, 4])
    torch.testing.assert_close(compiled(x, offs), f(x, offs))
    (graph,) = backend.graphs
    assert "torchsmith_capture_test.row_scale.default" in [n.op for n in graph.nodes]


def test_a_custom_op_overload_called_directly_is_recorded_too(compile_with, backend):
    def f(x, offs):
        return torch.ops.torchsmith_capture_test.row_scale.default(x, offs).sum()

    x, offs = torch.randn(4, 2), torch.tensor([3])
    torch.testing.assert_close(compile_with(f, fullgraph=True)(x, offs), f(x, offs))
    assert len(backend.graphs) == 1


def test_a_custom_op_without_a_fake_is_a_break_saying_what_to_register(compile_with):
    def f(x):
        return torch.ops.torchsmith_capture_test.no_fake(x + 1) * 2

    compiled = compile_with(f)
    x = torch.randn(3)
    torch.testing.assert_close(compiled(x), f(x))
    reasons = [str(r.break_reason) for r in compiled.session.records if r.break_reason is not None]
    assert any("register_fake" in r and "no_fake" in r for r in reasons), reasons
