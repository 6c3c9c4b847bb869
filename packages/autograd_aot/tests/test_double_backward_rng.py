"""Double backward through graphs with random ops: the re-run draws the compiled forward's numbers,
the caller's generator is left where eager leaves it, and a re-run that draws otherwise is caught."""

import pytest
import torch

from torchsmith.autograd_aot import AotAutogradError, aot_eager
from torchsmith.autograd_aot.double_backward import replay_refusal
from torchsmith.autograd_aot.functionalize import dead_code_elimination
from torchsmith.autograd_aot.rng_replay import random_devices, replay, save_rng_state, unreplayable_random_op
from torchsmith.ir import GraphBuilder, TensorType


def f32(*shape, grad=False):
    return TensorType.make(shape, torch.float32, requires_grad=grad)


def noisy_graph():
    """`dropout(x * x, 0.5) * rand_like(x) + x.sin()`: both orders of gradient depend on the draws."""
    b = GraphBuilder("noisy")
    x = b.input("x", f32(6, grad=True))
    dropped = b.op("torch.nn.functional.dropout", b.op("torch.mul", x, x), 0.5, True)
    noise = b.op("torch.rand_like", x)
    return b.build(b.op("torch.add", b.op("torch.mul", dropped, noise), b.op("torch.sin", x)))


def eager_noisy(x):
    return torch.nn.functional.dropout(x * x, 0.5, True) * torch.rand_like(x) + x.sin()


def penalty_grads(out, x):
    (g,) = torch.autograd.grad(out.sum(), x, create_graph=True)
    (gg,) = torch.autograd.grad((g ** 2).sum(), x)
    return g.detach(), gg


def test_both_orders_match_eager_with_the_same_seed():
    x = torch.randn(6, requires_grad=True)
    fn = aot_eager(noisy_graph(), [x])
    torch.manual_seed(5)
    (out,) = fn(x)
    with pytest.warns(UserWarning, match="differentiable backward"):
        g, gg = penalty_grads(out, x)
    after_compiled = torch.get_rng_state()
    torch.manual_seed(5)
    out_eager = eager_noisy(x)
    g_eager, gg_eager = penalty_grads(out_eager, x)
    torch.testing.assert_close(out, out_eager)
    torch.testing.assert_close(g, g_eager)
    torch.testing.assert_close(gg, gg_eager)
    assert torch.equal(after_compiled, torch.get_rng_state())  # the backward drew nothing of its own


def test_each_call_replays_its_own_numbers():
    # two forwards, then the double backward of each: the second call's state must not reach the first's
    x = torch.randn(6, requires_grad=True)
    fn = aot_eager(noisy_graph(), [x])
    torch.manual_seed(9)
    (first,) = fn(x)
    (second,) = fn(x)
    got = [penalty_grads(second, x), penalty_grads(first, x)]
    torch.manual_seed(9)
    first_eager, second_eager = eager_noisy(x), eager_noisy(x)
    expected = [penalty_grads(second_eager, x), penalty_grads(first_eager, x)]
    for (g, gg), (g_eager, gg_eager) in zip(got, expected):
        torch.testing.assert_close(g, g_eager)
        torch.testing.assert_close(gg, gg_eager)


def test_a_rerun_that_draws_other_numbers_is_an_error_not_a_wrong_gradient():
    x = torch.randn(6, requires_grad=True)
    fn = aot_eager(noisy_graph(), [x])
    (out,) = fn(x)
    program = fn.last_program
    rerun = program.eager_fn()

    def drawing_one_more(*args):
        torch.rand(1)
        return rerun(*args)

    program._eager_fn = drawing_one_more
    with pytest.raises(AotAutogradError, match="other random numbers than the compiled forward"):
        torch.autograd.grad(out.sum(), x, create_graph=True)


def test_programs_without_random_ops_keep_no_generator_state():
    b = GraphBuilder("plain")
    x = b.input("x", f32(3, grad=True))
    graph = b.build(b.op("torch.mul", x, x))
    value = torch.randn(3, requires_grad=True)
    fn = aot_eager(graph, [value])
    assert fn.last_program.rng_devices == ()
    assert aot_eager(noisy_graph(), [torch.randn(6, requires_grad=True)]).last_program.rng_devices == (
        torch.device("cpu"),
    )


def test_replay_restores_the_callers_generator():
    before = save_rng_state((torch.device("cpu"),))
    first = torch.rand(4)
    now = torch.get_rng_state()
    again, left = replay(before, lambda: torch.rand(4))
    assert torch.equal(first, again)
    assert torch.equal(left.states[0], now)
    assert torch.equal(torch.get_rng_state(), now)


def _unused_draw_graph():
    b = GraphBuilder("draw")
    x = b.input("x", "f32[4] cpu")
    b.op("aten.rand.default", [7], dtype=torch.float32, device="cpu")
    return b.build(b.op("aten.sin.default", x))


def test_an_unused_draw_survives_dead_code_elimination():
    # eager's later numbers come after it: dropping it would shift every draw that follows
    graph = dead_code_elimination(_unused_draw_graph())
    assert graph.ops() == ["aten.rand.default", "aten.sin.default"]
    assert random_devices(graph) == (torch.device("cpu"),)


def test_an_unused_draw_stays_in_the_training_forward():
    b = GraphBuilder("draw")
    x = b.input("x", f32(4, grad=True))
    b.op("torch.rand", 7)
    graph = b.build(b.op("torch.nn.functional.dropout", b.op("torch.sin", x), 0.5, True))
    value = torch.randn(4, requires_grad=True)
    fn = aot_eager(graph, [value])
    assert "aten.rand.default" in fn.last_program.forward_graph.ops()
    torch.manual_seed(3)
    (out,) = fn(value)
    torch.manual_seed(3)
    torch.rand(7)
    torch.testing.assert_close(out, torch.nn.functional.dropout(value.sin(), 0.5, True))


def test_counter_based_draws_are_refused_when_compiled():
    from torchsmith.prims import decompose

    b = GraphBuilder("philox")
    x = b.input("x", "f32[8] cpu")
    out, _ = b.op("aten.native_dropout.default", x, 0.25, True)
    decomposed = decompose(b.build(out), philox=True)
    assert unreplayable_random_op([decomposed]).startswith("prims.philox_rand: ")
    error = replay_refusal("philox", [decomposed])
    assert isinstance(error, AotAutogradError) and "random op prims.philox_rand" in str(error)
    assert replay_refusal("plain", [_unused_draw_graph()]) is None


def _dropout_graph(*options):
    b = GraphBuilder("drop")
    x = b.input("x", f32(4, 5, grad=True))
    return b.build(b.op("torch.nn.functional.dropout", b.op("torch.sin", x), *options))


@pytest.mark.parametrize(("options", "fused"), [
    ((0.3, True), True), ((0.3, False), False), ((0.0, True), False), ((0.3, True, True), False),
])
def test_cuda_programs_trace_dropout_as_cudas_fused_kernel(options, fused):
    # eager's torch.dropout calls native_dropout on CUDA and draws a bernoulli_ mask elsewhere: the
    # two draw other numbers, and the compiled forward and a double backward's re-run must agree
    from torchsmith.autograd_aot import trace

    x = torch.randn(4, 5, requires_grad=True)
    ops = trace(_dropout_graph(*options), [x], training=True, device="cuda").graph.ops()
    assert ("aten.native_dropout.default" in ops) == fused
    cpu_ops = trace(_dropout_graph(*options), [x], training=True, device="cpu").graph.ops()
    assert "aten.native_dropout.default" not in cpu_ops
