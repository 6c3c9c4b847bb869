"""Stage failures: messages name the stage, the op and the source line; fallback="eager" runs the graph
eagerly with ONE warning per compiled function, fallback="raise" raises StageError; never a wrong answer."""

import inspect
import warnings

import pytest
import torch

import torchsmith
from torchsmith.fallback import GuardedBackend, locate, stage_of
from torchsmith.inductor import InductorError, LoweringError
from torchsmith.inductor.lowering.lower import LOWERINGS
from torchsmith.ir import events


def refused_program(x):
    y = x * 2
    return y.cosh() + 1  # `refuse_cosh` makes the inductor's lowering refuse prims.cosh


@pytest.fixture
def refuse_cosh(monkeypatch):
    """The inductor refuses prims.cosh for this test, as it refuses an op it cannot lower."""
    import torchsmith.inductor.lowering.pointwise  # noqa: F401  (registers the lowering replaced here)

    def refuse(ctx, node):
        raise LoweringError(f"{ctx.origin}: this test's inductor has no lowering for prims.cosh")

    monkeypatch.setitem(LOWERINGS, "prims.cosh", refuse)


def broken_backend(graph, example_inputs):
    raise RuntimeError("my code generator cannot do this")


def two_graphs(x):
    y = x.sin()
    print("a graph break")  # noqa: T201
    return y.cos()


def test_inductor_failure_falls_back_with_one_warning_naming_stage_op_and_line(refuse_cosh):
    compiled = torchsmith.compile(refused_program)
    x = torch.randn(4)
    with warnings.catch_warnings(record=True) as caught, events.observe() as seen:
        warnings.simplefilter("always")
        first = compiled(x)
        second = compiled(x + 1)
    (event,) = [e for e in seen if e.kind == "fallback"]
    assert event.stage == "compile_api" and event.payload["stage"] == "inductor"
    assert event.payload["action"] == "eager" and event.payload["graph"].name == "refused_program"
    torch.testing.assert_close(first, refused_program(x))
    torch.testing.assert_close(second, refused_program(x + 1))
    fallbacks = [w for w in caught if issubclass(w.category, torchsmith.FallbackWarning)]
    assert len(fallbacks) == 1
    message = str(fallbacks[0].message)
    line = refused_program.__code__.co_firstlineno + 2
    assert "stage inductor failed while compiling graph refused_program" in message
    assert "op: prims.cosh" in message and f"at: {__file__}:{line}" in message
    assert "no lowering for prims.cosh" in message and "runs this graph eagerly" in message
    assert "options={'fallback': 'raise'}" in message


def test_fallback_raise_raises_stage_error_with_what_would_run_it(refuse_cosh):
    compiled = torchsmith.compile(refused_program, options={"fallback": "raise"})
    with pytest.raises(torchsmith.StageError) as info:
        compiled(torch.randn(4))
    error = info.value
    assert error.stage == "inductor" and error.op == "prims.cosh"
    assert error.source == f"{__file__}:{refused_program.__code__.co_firstlineno + 2}"
    assert isinstance(error.__cause__, InductorError)
    message = str(error)
    assert "backend='aot_eager' compiles it (checked): only the inductor stage fails" in message
    assert "backend='eager' always runs it" in message and "fullgraph=False would not help" in message


def test_custom_backend_failure_names_the_backend_and_the_graph_lines():
    compiled = torchsmith.compile(two_graphs, backend=broken_backend, options={"fallback": "raise"})
    with pytest.raises(torchsmith.StageError) as info:
        compiled(torch.ones(2))
    error = info.value
    first = two_graphs.__code__.co_firstlineno
    assert error.stage == "backend 'broken_backend'"
    assert "RuntimeError: my code generator cannot do this" in str(error)
    assert error.source == f"graph captured from {__file__}:{first + 1}"


def test_one_warning_per_compiled_function_even_for_several_graphs(caplog):
    compiled = torchsmith.compile(two_graphs, backend=broken_backend)
    x = torch.randn(3)
    with warnings.catch_warnings(record=True) as caught, caplog.at_level("INFO", "torchsmith.fallback"):
        warnings.simplefilter("always")
        torch.testing.assert_close(compiled(x), x.sin().cos())
    assert len([w for w in caught if issubclass(w.category, torchsmith.FallbackWarning)]) == 1
    # the second graph's fallback (after the break) is logged, not warned
    assert [r for r in caplog.records if r.name == "torchsmith.fallback" and "broken_backend" in r.message]
    # a second compiled function warns again, once
    again = torchsmith.compile(two_graphs, backend=broken_backend)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        again(x)
    assert len([w for w in caught if issubclass(w.category, torchsmith.FallbackWarning)]) == 1


def test_a_failing_eager_backend_is_not_retried_eagerly():
    def eager_but_broken(graph, example_inputs):
        raise RuntimeError("broken")

    guarded = GuardedBackend(eager_but_broken, "eager", {"fallback": "eager"}, "f")
    with pytest.raises(RuntimeError, match="broken"):
        guarded(None, [])


def _graph_of(fn, *args):
    graphs = []
    eager = torchsmith.lookup_backend("eager")

    def keep(graph, example_inputs):
        graphs.append(graph)
        return eager(graph, example_inputs)

    torchsmith.compile(fn, backend=keep)(*args)
    return graphs[0]


def test_run_time_stage_failures_of_builtin_backends_rerun_eagerly():
    graph = _graph_of(lambda x: x.exp() + 1, torch.ones(2))

    def compiles_then_fails(graph, example_inputs):
        def run(*args):
            raise LoweringError(f"no lowering for prims.exp in %exp = prims.exp (from {__file__}:7)")

        return run

    guarded = GuardedBackend(compiles_then_fails, "inductor", {"fallback": "eager"}, "f")
    compiled = guarded(graph, [torch.ones(2)])
    x = torch.randn(2)
    with pytest.warns(torchsmith.FallbackWarning, match=r"(?s)while running graph.*op: prims.exp"):
        (out,) = compiled(x)
    torch.testing.assert_close(out, x.exp() + 1)
    (out,) = compiled(x)  # stays eager, no second warning
    torch.testing.assert_close(out, x.exp() + 1)


def test_run_time_errors_of_the_program_itself_propagate_unchanged():
    graph = _graph_of(lambda x: x.exp() + 1, torch.ones(2))

    def user_error(graph, example_inputs):
        def run(*args):
            raise RuntimeError("The size of tensor a (2) must match the size of tensor b (3)")

        return run

    compiled = GuardedBackend(user_error, "inductor", {"fallback": "eager"}, "f")(graph, [torch.ones(2)])
    with pytest.raises(RuntimeError, match="must match"):
        compiled(torch.ones(2))


def test_locate_prefers_attributes_then_the_message():
    error = InductorError("while lowering %y = aten.mul.Tensor (from model.py:12): bad")
    assert locate(error, None) == ("aten.mul.Tensor", "model.py:12")
    error.op, error.source = "prims.mul", "other.py:3"
    assert locate(error, None) == ("prims.mul", "other.py:3")
    assert stage_of(error, None) == "inductor"
    assert stage_of(RuntimeError("x"), "backend 'mine'") == "backend 'mine'"


def test_a_custom_backend_failing_inside_a_torchsmith_stage_names_that_stage():
    from torchsmith.autograd_aot import aot_eager

    def aot_with_wrong_inputs(graph, example_inputs):
        return aot_eager(graph, example_inputs[:-1])  # autograd_aot refuses the input count

    compiled = torchsmith.compile(lambda x, y: x * y, backend=aot_with_wrong_inputs,
                                  options={"fallback": "raise"})
    with pytest.raises(torchsmith.StageError) as info:
        compiled(torch.ones(2), torch.ones(2))
    assert info.value.stage == "autograd_aot" and "TraceError" in str(info.value)
    assert "takes 2 inputs, got 1" in str(info.value)


def test_an_internal_capture_error_runs_eagerly_or_says_to_drop_fullgraph(monkeypatch, caplog):
    from torchsmith.capture import dispatch

    def broken_run(self):
        raise KeyError("a capture bug")

    monkeypatch.setattr(dispatch.Tracer, "run", broken_run)
    strict = torchsmith.compile(lambda x: x + 1, backend="eager", fullgraph=True)
    with pytest.raises(torchsmith.CaptureError) as info:
        strict(torch.ones(1))
    message = str(info.value)
    assert "internal error while capturing" in message and "KeyError" in message
    assert "Compile with fullgraph=False to run it eagerly" in message
    lenient = torchsmith.compile(lambda x: x + 1, backend="eager")
    with caplog.at_level("WARNING", "torchsmith.capture"):
        torch.testing.assert_close(lenient(torch.ones(1)), torch.full((1,), 2.0))
    assert any("internal error while capturing" in r.message for r in caplog.records)


def test_an_index_error_of_the_program_is_eagers_error_without_a_fallback_warning():
    compiled = torchsmith.compile(lambda x, i: torch.gather(x, 0, i) * 2)
    x = torch.randn(4)
    index = torch.tensor([1, 3])
    torch.testing.assert_close(compiled(x, index), torch.gather(x, 0, index) * 2)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(RuntimeError, match="out of bounds"):
            compiled(x, torch.tensor([1, 9]))
    assert not [w for w in caught if issubclass(w.category, torchsmith.FallbackWarning)]


def test_an_internal_error_inside_a_stage_at_run_time_reruns_eagerly_with_a_warning():
    graph = _graph_of(lambda x: x.exp() + 1, torch.ones(2))
    namespace = {"__name__": "torchsmith.inductor.wrapper_under_test"}  # a frame of the inductor's code
    exec("def run(*args):\n    raise KeyError('buf3')\n", namespace)
    compiled = GuardedBackend(lambda g, ex: namespace["run"], "inductor", {"fallback": "eager"}, "f")(
        graph, [torch.ones(2)]
    )
    x = torch.randn(2)
    with pytest.warns(torchsmith.FallbackWarning, match=r"(?s)stage inductor failed while running.*KeyError"):
        (out,) = compiled(x)
    torch.testing.assert_close(out, x.exp() + 1)


def test_the_fallback_warning_points_at_the_users_call():
    compiled = torchsmith.compile(lambda x: x * 2, backend=broken_backend)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        line = inspect.currentframe().f_lineno + 1
        compiled(torch.ones(1))
    (warning,) = [w for w in caught if issubclass(w.category, torchsmith.FallbackWarning)]
    assert (warning.filename, warning.lineno) == (__file__, line)
