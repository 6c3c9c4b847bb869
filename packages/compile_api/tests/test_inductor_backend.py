"""backend="inductor" (torchsmith.inductor_backend over torchsmith.inductor.device_compilers): torch-level
graphs through autograd_aot to generated kernels, compared with eager PyTorch; device hook, refusals with
stage/op/source, backward fallback."""

import pytest
import torch

from torchsmith.inductor import BACKEND_STATS, LoweringError, UnsupportedGraphError
from torchsmith.inductor import device_compilers as backend_module
from torchsmith.inductor.testing import make_graph
from torchsmith.inductor_backend import inductor_backend
from torchsmith.ir import TensorType, events, interpret


def mlp_graph():
    """y = softmax(gelu(x @ w + b)) * 2, with user source lines on the nodes."""

    def body(b, x, w, bias):
        h = b.op("torch.matmul", x, w, source="model.py:10")
        h = b.op("torch.add", h, bias, source="model.py:10")
        h = b.op("torch.nn.functional.gelu", h, source="model.py:11")
        h = b.op("torch.softmax", h, -1, source="model.py:12")
        return b.op("torch.mul", h, 2.0, source="model.py:13")

    return make_graph("mlp", {"x": ([4, 8], torch.float32), "w": ([8, 16], torch.float32),
                              "bias": ([16], torch.float32)}, body)


def stats():
    return (BACKEND_STATS.graphs, BACKEND_STATS.calls, BACKEND_STATS.kernel_calls)


def test_inference_compiles_one_graph_that_runs_kernels():
    graph = mlp_graph()
    x, w, b = torch.randn(4, 8), torch.randn(8, 16), torch.randn(16)
    graphs, calls, kernel_calls = stats()
    compiled = inductor_backend(graph, [x, w, b])
    assert BACKEND_STATS.graphs == graphs + 1
    (got,) = compiled(x, w, b)
    torch.testing.assert_close(got, interpret(graph, x, w, b)[0])
    assert BACKEND_STATS.calls == calls + 1 and BACKEND_STATS.kernel_calls == kernel_calls + 1
    program = compiled.last_program
    assert not program.is_training
    assert all(n.op.startswith("prims.") for n in program.forward_graph.nodes)
    assert program.forward_fn.has_kernels and program.forward_fn.source  # the generated C++, delegated


def test_training_compiles_backward_lazily_and_matches_eager_gradients():
    graph = mlp_graph()
    x = torch.randn(4, 8)
    w, b = torch.randn(8, 16, requires_grad=True), torch.randn(16, requires_grad=True)
    graphs = BACKEND_STATS.graphs
    compiled = inductor_backend(graph, [x, w, b])
    assert BACKEND_STATS.graphs == graphs + 1  # the forward only
    (got,) = compiled(x, w, b)
    weights = torch.linspace(0.5, 1.5, got.numel()).reshape(got.shape)
    (got * weights).sum().backward()
    assert BACKEND_STATS.graphs == graphs + 2  # the backward, on first use
    compiled_grads = (w.grad.clone(), b.grad.clone())
    w.grad = b.grad = None
    (expected,) = interpret(graph, x, w, b)
    (expected * weights).sum().backward()
    torch.testing.assert_close(got, expected)
    torch.testing.assert_close(compiled_grads, (w.grad, b.grad))


def test_mutated_input_is_written_back():
    def body(b, x, y):
        b.op("torch.Tensor.mul_", x, 3.0, source="model.py:20")
        return b.op("torch.add", x, y, source="model.py:21")

    graph = make_graph("mutate", {"x": ([5], torch.float32), "y": ([5], torch.float32)}, body)
    x, y = torch.randn(5), torch.randn(5)
    x_eager = x.clone()
    (expected,) = interpret(graph, x_eager, y)
    (got,) = inductor_backend(graph, [x.clone(), y])(x, y)
    torch.testing.assert_close(got, expected)
    torch.testing.assert_close(x, x_eager)


def test_complex_values_compile_with_their_ops_as_extern_calls():
    def body(b, x):
        return b.op("torch.mul", b.op("torch.sin", x, source="model.py:30"), 2, source="model.py:31")

    graph = make_graph("cplx", {"x": ([3], torch.complex64)}, body)
    x = torch.randn(3, dtype=torch.complex64)
    with events.observe() as seen:
        compiled = inductor_backend(graph, [x])
    (got,) = compiled(x)
    torch.testing.assert_close(got, interpret(graph, x)[0])
    fallbacks = {e.payload["op"]: e.payload["reason"] for e in seen if e.kind == "fallback"}
    assert set(fallbacks) == {"aten.sin.default", "aten.mul.Tensor"}
    assert all("complex64" in reason for reason in fallbacks.values())


def test_device_without_code_generator_is_refused():
    def body(b, x):
        return b.op("torch.cos", x, source="model.py:40")

    graph = make_graph("gpu", {"x": TensorType.make([3], torch.float32, device="meta")}, body)
    with pytest.raises(UnsupportedGraphError, match="meta.*no code generator"):
        inductor_backend(graph, [torch.empty(3, device="meta")])


def test_device_compilers_are_the_hook_where_the_device_decides(monkeypatch):
    seen = []
    original = backend_module.DEVICE_COMPILERS["cpu"]

    def recording(graph, example_inputs):
        seen.append(graph.name)
        return original(graph, example_inputs)

    monkeypatch.setitem(backend_module.DEVICE_COMPILERS, "cpu", recording)
    graph = mlp_graph()
    inputs = [torch.randn(4, 8), torch.randn(8, 16), torch.randn(16)]
    (got,) = inductor_backend(graph, inputs)(*inputs)
    torch.testing.assert_close(got, interpret(graph, *inputs)[0])
    assert len(seen) == 1


def test_missing_lowering_is_refused_with_op_and_user_source(monkeypatch):
    from torchsmith.inductor.lowering.lower import LOWERINGS, lower

    # lower() fills LOWERINGS on its first call: call it once so that it cannot undo the patch below
    lower(make_graph("identity", {"x": ([2], torch.float32)}, lambda b, x: x))

    def refuse(ctx, node):
        raise LoweringError(f"no lowering for {node.op} in {ctx.origin}")

    monkeypatch.setitem(LOWERINGS, "prims.erf", refuse)
    graph = mlp_graph()  # gelu decomposes through prims.erf
    with pytest.raises(UnsupportedGraphError) as info:
        inductor_backend(graph, [torch.randn(4, 8), torch.randn(8, 16), torch.randn(16)])
    assert info.value.op == "prims.erf"
    assert info.value.source == "model.py:11"
    assert "model.py:11" in str(info.value) and isinstance(info.value.__cause__, LoweringError)


def test_backward_the_inductor_refuses_is_refused_at_compile_time(monkeypatch):
    real_check = backend_module.check_supported

    def refuse_backward(graph):
        if graph.outputs and any("grad" in v.name or "tangent" in v.name for v in graph.inputs):
            raise UnsupportedGraphError("refused for the test", op="prims.mul")
        return real_check(graph)

    monkeypatch.setattr(backend_module, "check_supported", refuse_backward)
    graph = mlp_graph()
    x, w, b = torch.randn(4, 8), torch.randn(8, 16, requires_grad=True), torch.randn(16, requires_grad=True)
    with pytest.raises(UnsupportedGraphError, match="refused for the test"):
        inductor_backend(graph, [x, w, b], options={"fallback": "raise"})
    # the default fallback: the forward compiles; the backward runs as eager ops, with one warning
    (got,) = inductor_backend(graph, [x, w, b])(x, w, b)
    with pytest.warns(UserWarning, match="could not compile the backward"):
        got.sum().backward()
    assert w.grad is not None


@pytest.mark.parametrize("fallback", ["eager", "raise"])
def test_backward_build_failure_falls_back_only_when_asked(monkeypatch, fallback):
    original = backend_module.DEVICE_COMPILERS["cpu"]
    calls = []

    def fail_second(graph, example_inputs):
        calls.append(graph.name)
        if len(calls) == 2:
            raise LoweringError("the test refuses the backward")
        return original(graph, example_inputs)

    monkeypatch.setitem(backend_module.DEVICE_COMPILERS, "cpu", fail_second)
    graph = mlp_graph()
    x, w, b = torch.randn(4, 8), torch.randn(8, 16, requires_grad=True), torch.randn(16, requires_grad=True)
    compiled = inductor_backend(graph, [x, w, b], options={"fallback": fallback})
    (got,) = compiled(x, w, b)
    fallbacks = BACKEND_STATS.backward_fallbacks
    if fallback == "raise":
        with pytest.raises(UnsupportedGraphError, match="the test refuses the backward"):
            got.sum().backward()
        return
    with pytest.warns(UserWarning, match="stage inductor could not compile the backward"):
        got.sum().backward()
    assert BACKEND_STATS.backward_fallbacks == fallbacks + 1
    grads = (w.grad.clone(), b.grad.clone())
    w.grad = b.grad = None
    interpret(graph, x, w, b)[0].sum().backward()
    torch.testing.assert_close(grads, (w.grad, b.grad))


def test_with_input_strides_compiles_for_the_layout_really_passed():
    from torchsmith.inductor import compile_graph

    def body(b, x):
        return b.op("aten.mul.Tensor", x, x)

    transposed = TensorType.make([3, 4], torch.float32, strides=(1, 3))
    graph = make_graph("square", {"x": transposed}, body)
    x = torch.randn(3, 4)  # contiguous: not the layout the graph was traced for
    regraphed = backend_module.with_input_strides(graph, [x])
    assert regraphed.inputs[0].type.strides == (4, 1)
    assert backend_module.with_input_strides(regraphed, [x]) is regraphed
    (got,) = compile_graph(regraphed, [x])(x)
    torch.testing.assert_close(got, x * x)


def test_cuda_graphs_route_to_the_cuda_compiler(monkeypatch):
    seen = []

    def fake_triton(graph, example_inputs, options=None):
        seen.append((graph.name, options))
        return lambda *args: []

    monkeypatch.setitem(backend_module.DEVICE_COMPILERS, "cuda", fake_triton)
    graph = make_graph("on_gpu", {"x": TensorType.make([3], torch.float32, device="cuda:0")},
                       lambda b, x: b.op("aten.cos.default", x))
    assert backend_module.check_supported(graph) == "cuda"
    backend_module.compile_for_device(graph, [], options={"max_autotune": True})
    assert seen == [("on_gpu", {"max_autotune": True})]


def test_one_graph_on_two_devices_is_refused():
    graph = make_graph(
        "mixed",
        {"x": TensorType.make([3], torch.float32), "y": TensorType.make([3], torch.float32, device="cuda")},
        lambda b, x, y: b.op("aten.cos.default", x),
    )
    with pytest.raises(UnsupportedGraphError, match="one compiled graph runs on one device"):
        backend_module.check_supported(graph)


def test_outputs_keep_eager_strides():
    def body(b, x):
        t = b.op("torch.Tensor.t", x)
        return b.op("torch.add", t, 1.0), b.op("torch.sin", b.op("torch.mul", t, 2.0))

    graph = make_graph("transposed_out", {"x": ([4, 6], torch.float32)}, body)
    for requires_grad in (False, True):
        x = torch.randn(4, 6, requires_grad=requires_grad)
        got = inductor_backend(graph, [x])(x)
        for g, e in zip(got, interpret(graph, x)):
            torch.testing.assert_close(g, e)
            assert g.stride() == e.stride() == (1, 6)


def test_backward_takes_gradients_in_any_layout():
    # a strided output (eager's layout, kept): autograd hands the backward expanded, contiguous and
    # transposed gradients; each must reach the compiled backward in the layout it was compiled for
    def body(b, x):
        return b.op("torch.sin", b.op("torch.add", b.op("torch.Tensor.t", x), 1.0))

    graph = make_graph("strided_grad", {"x": ([4, 6], torch.float32)}, body)
    x = torch.randn(4, 6, requires_grad=True)
    compiled = inductor_backend(graph, [x])
    losses = [
        lambda o: o.sum(),
        lambda o: (o * torch.randn(6, 4)).sum(),
        lambda o: (o * torch.randn(4, 6).t()).sum(),
    ]
    for loss in losses:
        torch.manual_seed(1)
        loss(compiled(x)[0]).backward()
        got, x.grad = x.grad, None
        torch.manual_seed(1)
        loss(interpret(graph, x)[0]).backward()
        torch.testing.assert_close(got, x.grad)
        x.grad = None
