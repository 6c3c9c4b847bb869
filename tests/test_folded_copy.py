"""KV-cache writes folded into the kernel computing what they write (inductor/triton/folded_copy.py),
through torchsmith.compile and the Triton code generator (Triton's interpreter on CPU): a decode
step's `k_cache.index_copy_(2, pos, rotate(k))` stored by the rotary kernel, against eager, with
the cache passed as a module buffer or as an argument, several positions at once, a negative dim,
the value cache's copy carried along (not where its shape differs), and a source the graph also
returns (not folded)."""

import copy
import os

import pytest
import torch

if not torch.cuda.is_available():
    os.environ["TRITON_INTERPRET"] = "1"
pytest.importorskip("triton", reason="triton is not installed (pip install triton==3.6.0)")

import torchsmith  # noqa: E402
from torchsmith.inductor import device_compilers as backend  # noqa: E402
from torchsmith.inductor.gpu_pipeline import compile_graph_triton  # noqa: E402
from torchsmith.inductor.runtime.input_derived import step_accesses  # noqa: E402

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
HEADS, SEQ, HEAD_DIM, DIM = 2, 16, 8, 16


@pytest.fixture
def compiled_graphs(monkeypatch):
    """Graphs on the test device compile with the Triton code generator; the compiled graphs."""
    graphs = []

    def compiler(graph, example_inputs, options=None):
        graphs.append(compile_graph_triton(graph, example_inputs, options))
        return graphs[-1]

    monkeypatch.setitem(backend.DEVICE_COMPILERS, DEVICE, compiler)
    return graphs


def _inner(graph):
    return getattr(graph, "compiled", graph)  # a CUDA-graph runner wraps the graph


def rotate(x, cos, sin):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)


class CachedAttention(torch.nn.Module):
    def __init__(self, dim=2, return_key=False, value_dim=HEAD_DIM):
        super().__init__()
        self.wk = torch.nn.Linear(DIM, HEADS * HEAD_DIM, bias=False)
        self.wv = torch.nn.Linear(DIM, HEADS * value_dim, bias=False)
        self.register_buffer("k_cache", torch.zeros(1, HEADS, SEQ, HEAD_DIM))
        self.register_buffer("v_cache", torch.zeros(1, HEADS, SEQ, value_dim))
        angles = torch.outer(torch.arange(SEQ, dtype=torch.float32), torch.rand(HEAD_DIM // 2))
        self.register_buffer("cos", angles.cos())
        self.register_buffer("sin", angles.sin())
        self.dim, self.return_key = dim, return_key

    def forward(self, x, pos):
        t = x.shape[1]
        k = self.wk(x).view(1, t, HEADS, HEAD_DIM).transpose(1, 2)
        v = self.wv(x).view(1, t, HEADS, -1).transpose(1, 2)
        k = rotate(k, self.cos[pos], self.sin[pos])
        self.k_cache.index_copy_(self.dim, pos, k)
        self.v_cache.index_copy_(self.dim, pos, v)
        out = self.k_cache.sum(-1) * self.v_cache.sum(-1)
        return (out, k) if self.return_key else out


def _steps(module, compiled_graphs, positions, tokens=1):
    torch.manual_seed(0)
    module = module.to(DEVICE)
    reference = copy.deepcopy(module)
    step = torchsmith.compile(module, options={"fallback": "raise"})
    versions = []
    with torch.no_grad():
        for start in positions:
            x = torch.randn(1, tokens, DIM, device=DEVICE)
            pos = torch.arange(start, start + tokens, device=DEVICE)
            before = module.k_cache._version
            got, expected = step(x, pos), reference(x, pos)
            versions.append(module.k_cache._version > before)
            torch.testing.assert_close(got, expected)
            torch.testing.assert_close(module.k_cache, reference.k_cache)
            torch.testing.assert_close(module.v_cache, reference.v_cache)
    assert all(versions), "each call changes the cache: its version counter says so"
    assert len(compiled_graphs) == 1, "one graph serves every position"
    return _inner(compiled_graphs[0])


def test_rotary_key_write_is_stored_by_the_rotary_kernel(compiled_graphs):
    graph = _steps(CachedAttention(), compiled_graphs, positions=[0, 1, 2, 5, 15, 3])
    # the key's copy is folded into the rotary kernel computing its source; the value's copy (its
    # source a library matmul's result, over the same elements) rides along in that kernel
    assert len(graph.folded_copies) == 2
    kinds = [kind for kind, _, _ in graph._steps]
    assert kinds.count("alias") == 2
    assert not [what for kind, what, _ in graph._steps if kind == "extern" and "index_copy" in what.kernel]
    (folded,) = [
        what for kind, what, _ in graph._steps if kind == "kernel" and what.spec.name.endswith("_folded")
    ]
    caches = [b.name for b in graph.program.inputs if b.name.endswith(("k_cache", "v_cache"))]
    assert sorted(folded.spec.writes) == sorted(caches)
    source = next(b.args[2].buffer for b in graph.program.buffers if b.name == graph.folded_copies[0])
    allocated = [a[0] for kind, _, allocate in graph._steps if kind == "kernel" for a in allocate]
    assert source not in allocated, "the rotary result is never stored on its own"


def test_several_positions_and_a_negative_dim(compiled_graphs):
    graph = _steps(CachedAttention(dim=-2), compiled_graphs, positions=[0, 4, 13], tokens=3)
    assert len(graph.folded_copies) == 2


def test_a_value_cache_of_another_shape_keeps_its_library_call(compiled_graphs):
    graph = _steps(CachedAttention(value_dim=2 * HEAD_DIM), compiled_graphs, positions=[0, 3, 8])
    (call,) = graph.folded_copies
    assert [b.args[0].buffer for b in graph.program.buffers if b.name == call][0].endswith("k_cache")
    assert [what.kernel for kind, what, _ in graph._steps if kind == "extern" and "index_copy" in what.kernel]


def test_a_source_also_returned_is_not_folded(compiled_graphs):
    graph = _steps(CachedAttention(return_key=True), compiled_graphs, positions=[0, 1, 7])
    assert graph.folded_copies == []


def test_a_cache_passed_as_an_argument_is_written_in_place(compiled_graphs):
    torch.manual_seed(0)
    w = torch.randn(DIM, HEAD_DIM, device=DEVICE)
    cos, sin = torch.rand(SEQ, HEAD_DIM // 2, device=DEVICE), torch.rand(SEQ, HEAD_DIM // 2, device=DEVICE)

    def write(cache, x, pos):
        cache.index_copy_(0, pos, rotate(x @ w, cos[pos], sin[pos]))
        return cache.sum()

    cache, expected_cache = (
        torch.zeros(SEQ, HEAD_DIM, device=DEVICE),
        torch.zeros(SEQ, HEAD_DIM, device=DEVICE),
    )
    step = torchsmith.compile(write, options={"fallback": "raise"})
    for start in (2, 9, 0):
        x, pos = torch.randn(1, DIM, device=DEVICE), torch.tensor([start], device=DEVICE)
        torch.testing.assert_close(step(cache, x, pos), write(expected_cache, x, pos))
        torch.testing.assert_close(cache, expected_cache)
    assert _inner(compiled_graphs[0]).folded_copies


class ParameterWrite(torch.nn.Module):
    """A cache written from parameters alone at a position held in a buffer: values a graph may keep
    between calls (`input_derived`), but the write itself happens every call."""

    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(1, HEAD_DIM))
        self.register_buffer("pos", torch.tensor([3]))
        self.register_buffer("cache", torch.zeros(SEQ, HEAD_DIM))

    def forward(self, x):
        self.cache.index_copy_(0, self.pos, self.w * 2 + 1)
        return self.cache.sum() + x


def test_a_write_from_unchanging_inputs_happens_every_call(compiled_graphs):
    torch.manual_seed(0)
    module = ParameterWrite().to(DEVICE)
    reference = copy.deepcopy(module)
    step = torchsmith.compile(module, options={"fallback": "raise"})
    with torch.no_grad():
        for call in range(5):
            x = torch.randn(1, device=DEVICE)
            if call >= 3:  # the caller resets the cache: the next call writes it again
                module.cache.zero_()
                reference.cache.zero_()
            torch.testing.assert_close(step(x), reference(x))
            torch.testing.assert_close(module.cache, reference.cache)
    assert _inner(compiled_graphs[0]).folded_copies


def test_transformers_llama_static_cache_writes_are_folded(compiled_graphs):
    """transformers' Llama prefilling and decoding into its StaticCache: each layer computes the
    cache positions again, after the rotary kernel would run; that kernel computes them itself."""
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2, vocab_size=128,
                                      max_position_embeddings=64)
    model = transformers.LlamaForCausalLM(config).eval().to(DEVICE)
    reference = copy.deepcopy(model)
    caches = [transformers.StaticCache(config=config, max_cache_len=32) for _ in range(2)]

    def step(m, cache, tokens, positions):
        return m(tokens, past_key_values=cache, cache_position=positions, use_cache=True).logits

    def chunk(m, cache, tokens, positions):  # its own code: compiled for its own sizes
        return m(tokens, past_key_values=cache, cache_position=positions, use_cache=True).logits

    compiled, compiled_chunk = (torchsmith.compile(f, options={"fallback": "raise"}) for f in (step, chunk))
    with torch.no_grad():
        # the prefill (which creates the caches inside its graph), a chunk of three positions
        # (each element of the rotary kernel at its own position), then one position at a time
        for start, length in [(0, 5), (5, 3), (8, 1), (9, 1), (10, 1)]:
            tokens = torch.randint(0, 128, (1, length), device=DEVICE)
            positions = torch.arange(start, start + length, device=DEVICE)
            run = compiled_chunk if length == 3 else compiled
            torch.testing.assert_close(run(model, caches[0], tokens, positions),
                                       step(reference, caches[1], tokens, positions))
    # the chunk's graph and the one-token step's: keys and values of each layer
    for graph in compiled_graphs[1:]:
        graph = _inner(graph)
        assert len(graph.folded_copies) == 2 * config.num_hidden_layers
        # and no kernel is left computing an index only the folded copies read
        read = {view.buffer for view in graph.program.outputs} | {b.name for b in graph.program.inputs}
        read |= {name for step in graph._steps for name in step_accesses(step)[0]}
        assert all(set(what.spec.writes) & read for kind, what, _ in graph._steps if kind == "kernel")
