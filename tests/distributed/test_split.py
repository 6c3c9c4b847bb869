"""The graph split behind the DDP bucket cut, in one process: pieces run equal to the whole graph,
unsafe cuts are refused, and the plan follows DDP's bucket limits."""

import pathlib
import sys

import pytest
import torch

import torchsmith
from torchsmith.distributed import PiecewiseCall, safe_cuts, split_graph
from torchsmith.distributed.plan import plan_split
from torchsmith.ir import compile_to_python

sys.path.insert(0, str(pathlib.Path(__file__).parent))

from models import MLP, GeluMLP  # noqa: E402


def captured_graph(fn, *args):
    graphs = []

    def keep(graph, example_inputs):
        graphs.append((graph, list(example_inputs)))
        return torchsmith.lookup_backend("eager")(graph, example_inputs)

    torchsmith.compile(fn, backend=keep)(*args)
    (found,) = graphs
    return found


def test_pieces_compute_the_whole_graph_with_its_gradients():
    torch.manual_seed(0)
    model = MLP()
    x = torch.randn(4, 8)
    graph, inputs = captured_graph(model, x)
    cuts = safe_cuts(graph)
    assert cuts == list(range(1, len(graph.nodes)))  # nothing in an MLP refuses a cut
    runner = PiecewiseCall(torchsmith.lookup_backend("aot_eager"), graph, split_graph(graph, cuts))
    (out,) = runner(*inputs)
    out.sum().backward()
    got = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    expected = model(x)
    expected.sum().backward()
    torch.testing.assert_close(out, expected)
    for a, b in zip(got, (p.grad for p in model.parameters())):
        torch.testing.assert_close(a, b)


def saved_activation_bytes(graph, inputs) -> int:
    """Bytes of the values `graph`'s training lowering (decomposed to prims, as the inductor backend
    lowers it) saves for its backward, beside its own inputs."""
    from torchsmith.autograd_aot.partition import nbytes
    from torchsmith.autograd_aot.pipeline import lower
    from torchsmith.inductor.device_compilers import to_prims_keep

    lowered = lower(graph, inputs, training=True, decompose=to_prims_keep, emit_events=False)
    outputs = lowered.forward.outputs
    inputs_of = {v.name for v in lowered.forward.inputs}
    return sum(nbytes(v) for v in outputs[len(outputs) - lowered.num_saved:] if v.name not in inputs_of)


def test_pieces_save_no_more_than_the_whole_graph():
    # Cut at every GELU block, the pieces keep one activation per block (their linear's output or
    # the GELU's derivative, the same bytes), and the whole graph keeps as much, plus at most the
    # values at the cuts (the blocks' outputs, which the pieces get as inputs).
    from torchsmith.ir import compile_to_python

    torch.manual_seed(0)
    model = GeluMLP(width=16, depth=3)
    graph, inputs = captured_graph(model, torch.randn(4, 16))
    whole_bytes = saved_activation_bytes(graph, inputs)
    cuts = [i for i, n in enumerate(graph.nodes) if n.op.endswith("linear")][1:]
    env = dict(zip((v.name for v in graph.inputs), inputs))
    graph_inputs = {v.name for v in graph.inputs}
    piece_bytes = boundary_bytes = 0
    for piece in split_graph(graph, cuts):
        args = [env[name] for name in piece.reads]
        piece_bytes += saved_activation_bytes(piece.graph, args)
        boundary_bytes += sum(x.numel() * x.element_size() for name, x in zip(piece.reads, args)
                              if name not in graph_inputs)
        env.update(zip(piece.writes, compile_to_python(piece.graph)(*args)))
    block_bytes = 4 * 16 * 4  # one [4, 16] float32 activation
    assert piece_bytes == 3 * block_bytes, piece_bytes
    assert piece_bytes <= whole_bytes <= piece_bytes + boundary_bytes, (piece_bytes, whole_bytes)


def test_no_cut_between_a_value_and_an_in_place_write_to_it():
    def f(x, w):
        h = x @ w
        g = h * 2
        h.add_(1)  # written after g was computed from it
        return g + h

    x, w = torch.randn(3, 3), torch.randn(3, 3, requires_grad=True)
    graph, inputs = captured_graph(f, x, w)
    write = next(i for i, n in enumerate(graph.nodes) if n.op.endswith("add_"))
    matmul = next(i for i, n in enumerate(graph.nodes) if "matmul" in n.op)
    cuts = safe_cuts(graph)
    assert not any(matmul < p <= write for p in cuts), (cuts, str(graph))
    pieces = split_graph(graph, cuts)
    got = PiecewiseCall(torchsmith.lookup_backend("eager"), graph, pieces)(*inputs)
    torch.testing.assert_close(got, list(compile_to_python(graph)(*inputs)))


def test_no_cut_inside_a_no_grad_region():
    def f(x, w):
        y = x @ w
        with torch.no_grad():
            s = y.abs()
            s = s + 1
        return y * s

    graph, _ = captured_graph(f, torch.randn(3, 3), torch.randn(3, 3, requires_grad=True))
    modes = [i for i, n in enumerate(graph.nodes) if n.op == "torch._C._set_grad_enabled"]
    assert len(modes) >= 2
    assert not any(modes[0] < p <= modes[-1] for p in safe_cuts(graph))


class FakeDDP:
    """What plan_split reads from a DistributedDataParallel: its module and bucket limits."""

    def __init__(self, module, cap_bytes):
        self.module = module
        self.parameters_to_ignore = ()
        limits = {"per_bucket_bytes_caps": (), "first_bucket_bytes_cap": cap_bytes,
                  "bucket_bytes_cap": cap_bytes}
        self._bucket_config = type("Config", (), limits)()


@pytest.mark.skipif(not torch.distributed.is_available(), reason="torch.distributed is not available")
@pytest.mark.parametrize(("cap", "pieces"), [(10**9, 1), (520, 3)])
def test_the_plan_cuts_where_each_bucket_completes(cap, pieces):
    torch.manual_seed(0)
    model = MLP()
    graph, inputs = captured_graph(model, torch.randn(4, 8))
    plan = plan_split(graph, inputs, FakeDDP(model, cap))
    assert len(plan.cuts) + 1 == pieces, plan
    # bucket 0 holds the head, whose gradients are ready first; every parameter is in one bucket
    assert "head" in plan.buckets[0][0]
    assert sorted(n for b in plan.buckets for n in b) == sorted(
        v.name for v, x in zip(graph.inputs, inputs) if isinstance(x, torch.nn.Parameter))


class RebuiltDDP(FakeDDP):
    """A FakeDDP after its reducer rebuilt the buckets (`buckets`: parameter lists, bucket 0 first)."""

    def __init__(self, module, buckets):
        super().__init__(module, 1)
        self._has_rebuilt_buckets = True
        grad_buckets = [type("Bucket", (), {"parameters": lambda self, b=b: b})() for b in buckets]
        self.reducer = type("Reducer", (), {"_get_zeros_like_grad_buckets": lambda self: grad_buckets})()


@pytest.mark.skipif(not torch.distributed.is_available(), reason="torch.distributed is not available")
def test_rebuilt_buckets_cut_the_graph_again(monkeypatch):
    from torchsmith.distributed import ddp_backend

    torch.manual_seed(0)
    model = MLP()
    x = torch.randn(4, 8)
    graph, inputs = captured_graph(model, x)
    predicted = plan_split(graph, inputs, FakeDDP(model, 520))
    blocks, head = model.blocks, model.head
    # The rebuilt buckets DDP launches in order: block 2's and the head's parameters, then blocks 0
    # and 1 together, then a bucket of block 1's bias alone, which waits for the one before it.
    rebuilt = [[head.bias, head.weight, blocks[2].lin.bias, blocks[2].lin.weight],
               [blocks[1].lin.weight, blocks[0].lin.bias, blocks[0].lin.weight], [blocks[1].lin.bias]]
    ddp = RebuiltDDP(model, rebuilt)
    plan = plan_split(graph, inputs, ddp)
    linear = [i for i, n in enumerate(graph.nodes) if n.op.endswith("linear")]
    assert plan.cuts == (linear[2],) and predicted.cuts != plan.cuts, (predicted, plan)

    runner = PiecewiseCall(torchsmith.lookup_backend("aot_eager"), graph,
                           split_graph(graph, list(predicted.cuts)), planned_final=False)
    monkeypatch.setattr(ddp_backend, "active_ddp_module", lambda: None)
    runner(*inputs)  # outside a DDP forward: nothing to re-plan against
    assert len(runner.pieces) == len(predicted.cuts) + 1
    monkeypatch.setattr(ddp_backend, "active_ddp_module", lambda: ddp)
    (out,) = runner(*inputs)
    assert len(runner.pieces) == 2 and runner.planned_final
    out.sum().backward()
    got = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    expected = model(x)
    expected.sum().backward()
    torch.testing.assert_close(out, expected)
    for a, b in zip(got, (p.grad for p in model.parameters())):
        torch.testing.assert_close(a, b)


def guarded_runner(graph, cuts, backend="aot_eager"):
    from torchsmith.fallback import GuardedBackend
    from torchsmith.options import resolve_options

    backend = GuardedBackend(torchsmith.lookup_backend(backend), backend, resolve_options(None, None), "MLP")
    runner = PiecewiseCall(backend, graph, split_graph(graph, cuts))
    runner.assume_example_signature()  # as capture's guarded call promises
    return runner


def signature_lookups(monkeypatch):
    """A list that gets the graph name of each AotFunction call that looks its program up."""
    from torchsmith.autograd_aot.runtime import AotFunction

    looked_up, original = [], AotFunction.program_for

    def program_for(self, args):
        looked_up.append(self.graph.name)
        return original(self, args)

    monkeypatch.setattr(AotFunction, "program_for", program_for)
    return looked_up


def test_guarded_pieces_run_their_program_without_a_signature_lookup(monkeypatch):
    torch.manual_seed(0)
    model = MLP()
    x = torch.randn(4, 8)
    graph, inputs = captured_graph(model, x)
    runner = guarded_runner(graph, safe_cuts(graph)[::3])
    runner(*inputs)  # compiles each piece
    looked_up = signature_lookups(monkeypatch)
    (out,) = runner(*inputs)
    assert looked_up == [] and len(runner.pieces) > 2
    out.sum().backward()
    got = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    expected = model(x)
    expected.sum().backward()
    torch.testing.assert_close(out, expected)
    for a, b in zip(got, (p.grad for p in model.parameters())):
        torch.testing.assert_close(a, b)


def test_a_piece_after_one_run_eagerly_looks_its_program_up(monkeypatch):
    # outputs of a piece that fell back to eager may have other strides than its compiled program's
    torch.manual_seed(0)
    model = MLP()
    x = torch.randn(4, 8)
    graph, inputs = captured_graph(model, x)
    runner = guarded_runner(graph, safe_cuts(graph)[::3])
    runner(*inputs)
    runner.compiled[0].eager = compile_to_python(runner.pieces[0].graph)  # as after a stage failure
    looked_up = signature_lookups(monkeypatch)
    (out,) = runner(*inputs)
    readers_of_piece0 = [p.graph.name for k, p in enumerate(runner.pieces) if 0 in runner.producers[k]]
    assert readers_of_piece0 and set(readers_of_piece0) <= set(looked_up), looked_up
    torch.testing.assert_close(out, model(x))


def test_guarded_pieces_compiled_forwards_and_backwards_skip_their_input_checks(monkeypatch):
    from torchsmith.inductor.runtime.wrapper import CompiledGraph

    torch.manual_seed(0)
    model = MLP()
    x = torch.randn(4, 8)
    graph, inputs = captured_graph(model, x)
    runner = guarded_runner(graph, [len(graph.nodes) // 2], backend="inductor")
    runner(*inputs)[0].sum().backward()  # compiles each piece's forward and backward
    checked, original = [], CompiledGraph._bind

    def bind(self, args):
        checked.append(self.program.name)
        return original(self, args)

    monkeypatch.setattr(CompiledGraph, "_bind", bind)
    model.zero_grad()
    (out,) = runner(*inputs)
    out.sum().backward()
    assert checked == []
    got = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    expected = model(x)
    expected.sum().backward()
    torch.testing.assert_close(out, expected)
    for a, b in zip(got, (p.grad for p in model.parameters())):
        torch.testing.assert_close(a, b)


def accumulation_order(params) -> tuple[list, list]:
    """A list that gets, in order, each of `params` whose gradient autograd accumulates (as DDP's
    reducer records them to rebuild its buckets); and the hook handles."""
    order = []
    handles = [p.register_post_accumulate_grad_hook(lambda p: order.append(p)) for p in params]
    return order, handles


@pytest.mark.skipif(not torch.distributed.is_available(), reason="torch.distributed is not available")
@pytest.mark.parametrize("make", [MLP, lambda: GeluMLP(width=16, depth=4)])
def test_pieces_hand_gradients_over_in_the_planned_order_until_the_buckets_are_final(monkeypatch, make):
    # A piece's backward returns its parameters' gradients at once; autograd's own order among
    # them split the rebuilt buckets across pieces. Until DDP's buckets are final the pieces hand
    # them over in the order the plan assumed (eager's), so DDP rebuilds the planned buckets.
    from torchsmith.distributed import ddp_backend

    torch.manual_seed(0)
    model = make()
    x = torch.randn(4, model.blocks[0].lin.in_features)
    graph, inputs = captured_graph(model, x)
    plan = plan_split(graph, inputs, FakeDDP(model, 520))
    assert plan.cuts
    monkeypatch.setattr(ddp_backend, "active_ddp_module", lambda: None)  # buckets not final yet
    runner = PiecewiseCall(torchsmith.lookup_backend("aot_eager"), graph, split_graph(graph, list(plan.cuts)),
                           planned_final=False, ready_order=plan.ready_order)
    by_name = dict(zip((v.name for v in graph.inputs), inputs))
    planned = [by_name[name] for name in plan.ready_order]
    for _ in range(2):  # the first call compiles the pieces, the second runs them as compiled
        model.zero_grad()
        order, handles = accumulation_order(model.parameters())
        (out,) = runner(*inputs)
        out.sum().backward()
        for handle in handles:
            handle.remove()
        assert [id(p) for p in order] == [id(p) for p in planned], (
            [n for p in order for n, q in model.named_parameters() if p is q])
    got = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    expected = model(x)
    eager_order, _ = accumulation_order(model.parameters())
    expected.sum().backward()
    # the plan's order is eager's
    assert [id(p) for p in eager_order] == [id(p) for p in planned]
    torch.testing.assert_close(out, expected)
    for a, b in zip(got, (p.grad for p in model.parameters())):
        torch.testing.assert_close(a, b)


def test_pieces_pass_parameters_as_they_are_once_the_buckets_are_final():
    torch.manual_seed(0)
    model = GeluMLP(width=16, depth=3)
    graph, inputs = captured_graph(model, torch.randn(4, 16))
    plan = plan_split(graph, inputs, FakeDDP(model, 520))
    runner = PiecewiseCall(torchsmith.lookup_backend("aot_eager"), graph, split_graph(graph, list(plan.cuts)),
                           planned_final=True, ready_order=plan.ready_order)
    (out,) = runner(*inputs)
    # the last piece's backward node hands the head's gradients to the parameters themselves
    accumulated = [f.variable for f, _ in out.grad_fn.next_functions if hasattr(f, "variable")]
    assert any(p is model.head.weight for p in accumulated), out.grad_fn.next_functions
