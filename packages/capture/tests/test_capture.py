"""Capture end to end: graphs recorded, guards, recompiles, graph breaks, fullgraph."""

import logging

import pytest
import torch

from torchsmith.capture import FullGraphError, capture
from torchsmith.capture.resume import resume_code


def test_records_torch_dialect_nodes_with_full_types(compile_with, backend):
    def f(x, w):
        return torch.nn.functional.relu(x @ w).sum(dim=1) + x.shape[1]

    x, w = torch.randn(3, 4), torch.randn(4, 5, requires_grad=True)
    out = compile_with(f)(x, w)
    torch.testing.assert_close(out, f(x, w))
    (graph,) = backend.graphs
    assert [n.op for n in graph.nodes] == [
        "torch.Tensor.__matmul__",
        "torch.nn.functional.relu",
        "torch.Tensor.sum",
        "torch.Tensor.__add__",
    ]
    assert str(graph.outputs[0].type) == "f32[3] cpu grad"
    assert [str(v.type) for v in graph.inputs] == ["f32[3, 4] cpu", "f32[4, 5] cpu grad"]


def test_module_parameters_become_graph_inputs(compile_with, backend):
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU())
    compiled = compile_with(model)
    x = torch.randn(2, 4)
    torch.testing.assert_close(compiled(x), model(x))
    (graph,) = backend.graphs
    assert len(graph.inputs) == 3
    assert "torch.nn.functional.linear" in graph.ops()
    assert list(compiled.state_dict()) == list(model.state_dict())


def test_same_inputs_hit_the_cache(compile_with, backend):
    f = compile_with(lambda x: x * 2)
    for _ in range(3):
        f(torch.randn(3))
    assert len(backend.graphs) == 1


def test_grad_mode_is_guarded(compile_with, backend):
    w = torch.randn(3, requires_grad=True)
    f = compile_with(lambda x: x * w)
    assert f(torch.randn(3)).requires_grad
    with torch.no_grad():
        assert not f(torch.randn(3)).requires_grad
    assert len(backend.graphs) == 2


def test_global_read_is_guarded(compile_with, backend):
    global SCALE
    SCALE = 2.0

    def f(x):
        return x * SCALE

    compiled = compile_with(f)
    x = torch.ones(2)
    assert compiled(x).tolist() == [2.0, 2.0]
    SCALE = 3.0
    assert compiled(x).tolist() == [3.0, 3.0]
    assert len(backend.graphs) == 2


SCALE = 1.0


def test_module_training_flag_is_guarded(compile_with, backend):
    model = torch.nn.Dropout(0.5)
    compiled = compile_with(model)
    x = torch.ones(100)
    compiled.eval()
    torch.testing.assert_close(compiled(x), x)
    compiled.train()
    out = compiled(x)
    assert (out == 0).any() and len(backend.graphs) == 2


def test_recompile_limit_then_eager_with_one_warning(compile_with, backend, caplog):
    f = compile_with(lambda x, n: x * n)
    with caplog.at_level(logging.WARNING, logger="torchsmith.capture"):
        for n in range(12):
            assert f(torch.ones(1), n).item() == n
    assert len(backend.graphs) == 8
    warnings = [r for r in caplog.records if "recompile limit" in r.getMessage()]
    assert len(warnings) == 1 and "n" in warnings[0].getMessage()


def test_graph_break_splits_and_resumes(compile_with, backend, capsys):
    def f(x):
        y = x + 1
        print("side effect")
        return y * 2

    compiled = compile_with(f)
    x = torch.randn(3)
    torch.testing.assert_close(compiled(x), f(x))
    assert capsys.readouterr().out == "side effect\nside effect\n"
    assert len(backend.graphs) == 2
    assert backend.graphs[1].name.startswith("torchsmith_resume_in_f")


def test_tensor_branch_compiles_each_path_lazily(compile_with, backend):
    def f(x):
        if x.sum() > 0:
            return x + 1
        return x - 1

    compiled = compile_with(f)
    assert compiled(torch.ones(2)).tolist() == [2.0, 2.0]
    assert len(backend.graphs) == 2
    assert compiled(-torch.ones(2)).tolist() == [-2.0, -2.0]
    assert len(backend.graphs) == 3


def test_fullgraph_error_names_construct_file_and_line(compile_with):
    def f(x):
        y = x.sin()
        return y * y.max().item()

    with pytest.raises(FullGraphError) as info:
        compile_with(f, fullgraph=True)(torch.ones(2))
    message = str(info.value)
    assert "item" in message and "test_capture.py" in message
    assert str(f.__code__.co_firstlineno + 2) in message


def test_unresumable_break_runs_the_whole_frame_eagerly(compile_with, backend):
    def f(x):
        scale = lambda t, *, k=2: t * k  # noqa: E731 - keyword defaults: not rebuilt after a break
        print("kwdefaults")
        return scale(x) + 1

    compiled = compile_with(f)
    torch.testing.assert_close(compiled(torch.ones(2)), torch.ones(2) * 2 + 1)
    assert backend.graphs == []
    assert "cannot resume" in str(compiled.session.records[0].break_reason)


def test_resume_code_continues_mid_function():
    def f(a, b):
        c = a + b
        for i in (1, 2):
            c = c * i
        return c

    import dis
    import types

    store = next(ins for ins in dis.get_instructions(f) if ins.opname == "STORE_FAST" and ins.argval == "i")
    code = resume_code(f.__code__, store.offset, ("iter", "value"))
    resumed = types.FunctionType(code, globals(), "resumed")
    # stack: the iterator over what is left, and the item FOR_ITER just pushed
    assert resumed(1, 2, 3, None, [2], 1) == f(1, 2)


def test_break_inside_try_block_keeps_the_handler(compile_with, backend):
    calls = []

    def f(x, d):
        try:
            y = x * 2
            calls.append(len(calls))
            print("in try")
            y = y + d["missing"]
        except KeyError:
            y = y - 1
        return y

    compiled = compile_with(f)
    torch.testing.assert_close(compiled(torch.ones(2), {}), torch.ones(2))
    assert calls == [0]


def test_break_shares_cells_with_inner_functions(compile_with, backend):
    def f(x):
        count = 0

        def bump(t):
            nonlocal count
            count += 1
            return t * count

        y = bump(x)
        print("break")
        y = bump(y)
        return y, count

    out, count = compile_with(f)(torch.ones(2))
    assert count == 2 and out.tolist() == [2.0, 2.0]
    assert len(backend.graphs) == 2


def test_capture_does_not_leave_grad_mode_changed(compile_with):
    def f(x):
        with torch.no_grad():
            y = x * 2
        return y

    compile_with(f)(torch.ones(1, requires_grad=True))
    assert torch.is_grad_enabled()


def test_session_records_guards_and_source(compile_with):
    compiled = capture(lambda x, k: x * k, lambda g, ex: lambda *a: [a[0] * 3])
    compiled(torch.ones(2), 3)
    (record,) = compiled.session.records
    assert any("L['k'] == 3" in g for g in record.guards)
    assert "def run(L, G)" in record.source


@pytest.mark.parametrize(
    ("op", "args", "kwargs", "expected"),
    [
        ("torch.Tensor.to", ("cuda:1", torch.float16), {}, "f16[2, 3] cuda:1"),
        ("torch.Tensor.to", (torch.float64,), {}, "f64[2, 3] cpu"),
        ("torch.Tensor.cuda", (), {}, "f32[2, 3] cuda:0"),
        ("torch.Tensor.cpu", (), {}, "f32[2, 3] cpu"),
    ],
)
def test_device_moves_are_typed_with_the_target_device(op, args, kwargs, expected):
    from torchsmith.capture.tensors import infer_result
    from torchsmith.ir import TensorType, Value

    x = Value("x", TensorType.make((2, 3), torch.float32))
    fn = getattr(torch.Tensor, op.rsplit(".", 1)[-1])
    assert str(infer_result(op, fn, (x, *args), kwargs, True)) == expected


def test_remembered_result_types_tell_int_and_float_constants_apart():
    from torchsmith.capture.tensors import infer_result
    from torchsmith.ir import TensorType, Value

    x = Value("x", TensorType.make((2, 3), torch.int64))
    add = torch.Tensor.add
    assert str(infer_result("torch.Tensor.add", add, (x, 1), {}, True)) == "i64[2, 3] cpu"
    assert str(infer_result("torch.Tensor.add", add, (x, 1.0), {}, True)) == "f32[2, 3] cpu"
    assert str(infer_result("torch.Tensor.add", add, (x, True), {}, True)) == "i64[2, 3] cpu"
    assert str(infer_result("torch.Tensor.add", add, (x, 1), {}, True)) == "i64[2, 3] cpu"


def test_partial_escaping_the_graph_is_rebuilt(compile_with, backend):
    import functools

    def f(x):
        return x + 1, functools.partial(torch.mul, x * 2, other=3)

    x = torch.randn(3)
    out, p = compile_with(f)(x)
    torch.testing.assert_close(out, x + 1)
    assert isinstance(p, functools.partial) and p.func is torch.mul and p.keywords == {"other": 3}
    torch.testing.assert_close(p(), x * 6)
    assert len(backend.graphs) == 1


def test_partial_of_an_unrebuildable_function_breaks_cleanly(compile_with, backend):
    import functools

    def f(x):
        def inner(a, *, k=2):  # a function with keyword defaults made in capture cannot be rebuilt
            return a * k

        y = x + 1
        return y, functools.partial(inner, 3)

    x = torch.randn(3)
    compiled = compile_with(f)
    out, p = compiled(x)
    torch.testing.assert_close(out, x + 1)
    assert isinstance(p, functools.partial) and p() == 6 and p(k=4) == 12
    session = compiled.session if hasattr(compiled, "session") else compiled._session
    reasons = [str(r.break_reason) for r in session.records if r.break_reason is not None]
    assert any("cannot rebuild" in r for r in reasons), reasons


def test_partial_made_outside_is_called_through_its_parts(compile_with, backend):
    import functools

    scale = functools.partial(torch.mul, other=2.5)

    def f(x):
        return scale(x) + 1

    x = torch.randn(3)
    torch.testing.assert_close(compile_with(f)(x), f(x))
    assert len(backend.graphs) == 1


def test_iterated_module_members_are_guarded_through_the_module_dicts(compile_with, backend):
    """`self.parameters()` / `self.modules()` in a forward: guards read each member through the
    modules' own dicts (shared, no string walk per member), and a replaced parameter recompiles."""

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.body = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 2))

        def forward(self, x):
            scale = sum(p.sum() for p in self.parameters())
            return self.body(x) * scale + len(list(self.modules()))

    net = Net()
    compiled = capture(net, backend)
    x = torch.randn(3, 4)
    torch.testing.assert_close(compiled(x), net(x))
    guards = "\n".join(compiled._session.records[0].guards)
    assert "._modules['body']._modules['0']._parameters['weight']" in guards
    assert "get_parameter(" not in guards and "get_submodule(" not in guards
    net.body[1].weight = torch.nn.Parameter(torch.randn(2, 4) * 5)
    torch.testing.assert_close(compiled(x), net(x))


def _maybe_off(enabled: bool):
    """transformers' `maybe_autocast` where autocast is off: a nullcontext made inside the function."""
    import contextlib

    return contextlib.nullcontext() if not enabled else torch.no_grad()


def test_nullcontext_block_is_captured_in_one_graph(compile_with, backend):
    import contextlib

    def f(x):
        with _maybe_off(False):
            y = x.sin() * 2
        with contextlib.nullcontext(x) as same:
            z = same.cos()
        return y + z

    x = torch.randn(5, requires_grad=True)
    out = compile_with(f)(x)
    torch.testing.assert_close(out, f(x))
    assert out.requires_grad  # a nullcontext does not touch grad mode
    assert len(backend.graphs) == 1


def test_graph_break_inside_a_nullcontext_block_resumes_correctly(compile_with, backend):
    import contextlib

    def f(x):
        with contextlib.nullcontext():
            y = x * 2
            if y.sum() > 0:  # a data-dependent branch: a graph break
                y = y + 1
        return y.sum()

    x = torch.randn(4, requires_grad=True)
    out = compile_with(f)(x)
    torch.testing.assert_close(out, f(x))
    assert out.requires_grad and torch.is_grad_enabled()
    assert len(backend.graphs) == 2  # before the branch and after it, inside the block
    with torch.no_grad():
        assert not compile_with(f)(x).requires_grad
