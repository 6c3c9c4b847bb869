"""The compile cache (compile_cache.py): a prims graph compiled before is read back instead of
lowered again, with the same program and the same results; keys change with what changes the
result; damaged entries and a disabled cache fall back to compiling."""

import importlib
import os

import torch

from torchsmith.inductor.cpu_pipeline import compile_graph
from torchsmith.inductor.runtime import compile_cache
from torchsmith.inductor.testing import assert_matches_eager, make_graph
from torchsmith.ir import TensorType
from torchsmith.ir.symbolic import symbol

F32 = torch.float32


def softmax_graph(n: int = 16):
    def body(b, x):
        return b.op("aten._softmax.default", b.op("aten.mul.Tensor", x, 2.0), -1, False)

    return make_graph("softmax", {"x": ((4, n), F32)}, body)


def test_second_compile_reads_the_cached_program(monkeypatch, tmp_path):
    monkeypatch.setenv("TORCHSMITH_CACHE_DIR", str(tmp_path))
    graph = softmax_graph()
    hits, misses = compile_cache.STATS.hits, compile_cache.STATS.misses
    first = compile_graph(graph)
    assert (compile_cache.STATS.hits, compile_cache.STATS.misses) == (hits, misses + 1)
    assert "lower" in first.timings
    second = compile_graph(graph)
    assert compile_cache.STATS.hits == hits + 1
    assert "lower" not in second.timings  # read back, not lowered again
    assert str(second.program) == str(first.program) and second.source == first.source
    x = torch.randn(4, 16)
    assert_matches_eager(second, graph, x)
    torch.testing.assert_close(second(x)[0], first(x)[0])


def test_key_changes_with_the_graph_and_with_user_registrations(monkeypatch, tmp_path):
    monkeypatch.setenv("TORCHSMITH_CACHE_DIR", str(tmp_path))
    text = "graph text"
    key = compile_cache.key_of("cpp-program", text)
    assert compile_cache.key_of("cpp-program", text) == key
    assert compile_cache.key_of("cpp-program", text + " ") != key

    def my_lowering(ctx, node):  # a lowering registered from outside torchsmith
        raise NotImplementedError

    lowerings = importlib.import_module("torchsmith.inductor.lowering.lower").LOWERINGS
    monkeypatch.setitem(lowerings, "prims.my_op", my_lowering)
    assert "prims.my_op" in compile_cache.custom_registrations()
    assert compile_cache.key_of("cpp-program", text) != key


def test_unreadable_entry_is_a_miss_and_the_cache_can_be_turned_off(monkeypatch, tmp_path, caplog):
    monkeypatch.setenv("TORCHSMITH_CACHE_DIR", str(tmp_path))
    graph = softmax_graph(8)
    compile_graph(graph)
    for entry in (tmp_path / "inductor_programs").iterdir():
        entry.write_bytes(b"not json")
    again = compile_graph(graph)
    assert "lower" in again.timings
    assert "ignoring compile cache entry" in caplog.text and "unreadable" in caplog.text
    assert_matches_eager(again, graph, torch.randn(4, 8))
    monkeypatch.setenv("TORCHSMITH_COMPILE_CACHE", "0")
    hits = compile_cache.STATS.hits
    assert "lower" in compile_graph(graph).timings
    assert compile_cache.STATS.hits == hits


def test_cached_program_with_symbolic_sizes_runs_every_size(monkeypatch, tmp_path):
    monkeypatch.setenv("TORCHSMITH_CACHE_DIR", str(tmp_path))
    s0, s1 = symbol("s0"), symbol("s1")

    def body(b, x):
        var, mean = b.op("prims.var_mean", x, [1], 1)
        return b.op("prims.add", b.op("prims.mul", var, 2.0), mean)

    graph = make_graph("dynamic", {"x": TensorType.make((s0, s1), F32)}, body)
    compile_graph(graph)
    cached = compile_graph(graph)
    assert "lower" not in cached.timings
    for shape in [(3, 5), (7, 300), (1, 1)]:
        assert_matches_eager(cached, graph, torch.randn(*shape), rtol=1e-5, atol=1e-5)


def test_prims_graph_read_back_registers_the_prims_ops(tmp_path):
    """A process that reads a decomposed graph back from the cache has imported nothing that
    registers the prims ops; the steps after it (folding BatchNorm into convolution weights on a
    GPU) look them up, so reading the graph back must register them."""
    import subprocess
    import sys

    script = (
        "import sys, torch\n"
        "from torchsmith.inductor.device_compilers import to_prims_keep\n"
        "from torchsmith.ir import GraphBuilder\n"
        "b = GraphBuilder('g')\n"
        "x = b.input('x', 'f32[4] cpu')\n"
        "to_prims_keep(b.build(b.op('aten.neg.default', b.op('aten.relu.default', x))))\n"
        "print('torchsmith.prims' in sys.modules)\n"
    )
    env = dict(os.environ, TORCHSMITH_CACHE_DIR=str(tmp_path))
    command = [sys.executable, "-c", script]
    runs = [subprocess.run(command, env=env, capture_output=True, text=True, check=True) for _ in range(2)]
    assert [r.stdout.strip() for r in runs] == ["True", "True"]  # the second one read the graph back
    assert any(tmp_path.rglob("*")), "the first process stored nothing"
