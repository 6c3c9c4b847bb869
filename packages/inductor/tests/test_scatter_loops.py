"""scatter, scatter_add and index_put at data-chosen positions as generated C++ scatter loops
(lowerings_scatter, cpp_scatter) under backend="inductor", against eager: values, duplicates,
negative indices, dtypes, empty indices, the threaded paths, embedding's backward in a training
step, and out-of-range indices raising eager's errors (in a child process, so a crash is a failed
exit code)."""

import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch

from torchsmith.inductor import compile_graph
from torchsmith.inductor.loop_ir.program import ComputedBuffer, ExternCall, Scatter
from torchsmith.inductor.testing import assert_matches_eager, make_graph
from torchsmith.ir import events


def _compile(fn, **kwargs):
    """torchsmith.compile, or a skip where compile_api is not installed (the package's isolated run)."""
    import torchsmith

    if not hasattr(torchsmith, "compile"):
        pytest.skip("needs the torchsmith package (compile_api)")
    return torchsmith.compile(fn, **kwargs)

WRITE_OPS = ("prims.scatter", "prims.scatter_add", "prims.index_put", "aten.index_put.default")


def _compiled_programs(fn, *args):
    """fn compiled with the inductor (errors raised, no eager fallback) and called on args: its
    result and the loop programs of the graphs it compiled."""
    with events.observe() as seen:
        out = _compile(fn, backend="inductor", options={"fallback": "raise"})(*args)
    programs = [e.payload["program"] for e in seen if e.stage == "inductor" and e.kind == "loops"]
    return out, programs


def _assert_scatter_loops(programs, count=1):
    """No write op runs through torch's kernel, and `count` (at least) scatter loops were made."""
    externs = [
        b.kernel for p in programs for b in p.buffers if isinstance(b, ExternCall) and b.kernel in WRITE_OPS
    ]
    assert externs == [], f"extern calls for {externs}"
    assert not [op for p in programs for op, _ in p.fallbacks if op in WRITE_OPS]
    loops = [
        b
        for p in programs
        for b in p.buffers
        if isinstance(b, ComputedBuffer) and isinstance(b.body, Scatter)
    ]
    assert len(loops) >= count


def _check(fn, *args, exact=True, **tolerance):
    expected = fn(*args)
    got, programs = _compiled_programs(fn, *args)
    _assert_scatter_loops(programs)
    if exact:
        assert got.dtype == expected.dtype and torch.equal(got, expected), (got, expected)
    else:
        torch.testing.assert_close(got, expected, **tolerance)


def _values(shape, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    if dtype.is_floating_point:
        return torch.randn(shape, generator=g).to(dtype)
    return torch.randint(-50, 50, shape, generator=g).to(dtype)


DTYPES = (torch.float32, torch.int64, torch.int32, torch.bfloat16)


def _exact(dtype) -> bool:
    # Small loops are serial in eager's order: float sums are bitwise equal too, but allow rounding.
    return not dtype.is_floating_point


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", ["1d", "2d_dim0", "2d_dim1", "3d_dim1"])
def test_scatter_add_matches_eager(case, dtype):
    g = torch.Generator().manual_seed(1)
    base_shape, dim, index_shape = {
        "1d": ((7,), 0, (12,)),  # 12 writes into 7 slots: duplicates
        "2d_dim0": ((4, 5), 0, (6, 3)),  # an index smaller than the base in the other dim
        "2d_dim1": ((4, 5), 1, (3, 8)),
        "3d_dim1": ((2, 3, 4), 1, (2, 5, 4)),
    }[case]
    index = torch.randint(0, base_shape[dim], index_shape, generator=g)
    src = _values(tuple(max(a, b) for a, b in zip(index_shape, base_shape)), dtype, 2)
    base = _values(base_shape, dtype, 3)
    _check(lambda a, i, s: a.scatter_add(dim, i, s), base, index, src, exact=_exact(dtype))


@pytest.mark.parametrize("dtype", DTYPES)
def test_scatter_without_accumulating_matches_eager(dtype):
    # Each line's positions are distinct (a permutation), so eager's result does not depend on order.
    g = torch.Generator().manual_seed(4)
    index = torch.stack([torch.randperm(6, generator=g)[:4] for _ in range(3)], dim=1)  # [4, 3] into dim 0
    base, src = _values((6, 3), dtype, 5), _values((4, 3), dtype, 6)
    _check(lambda a, i, s: a.scatter(0, i, s), base, index, src)
    _check(lambda a, i: a.scatter(1, i.t()[:, :2] % 3, 7), base, index)  # scatter of a value


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("accumulate", [True, False])
def test_index_put_matches_eager(dtype, accumulate):
    g = torch.Generator().manual_seed(7)
    rows = torch.tensor([1, -1, 1, 0, -4])  # duplicates and negative entries (wrapped as eager does)
    if not accumulate:
        rows = torch.tensor([3, -1, 0, 2])  # distinct after wrapping: eager's winner is defined
    n = len(rows)
    x1, x2, x3 = _values((5,), dtype, 1), _values((5, 3), dtype, 2), _values((4, 5, 6), dtype, 3)
    cols = torch.randint(0, 6, (n,), generator=g)
    _check(lambda x, i, v: x.index_put((i,), v, accumulate=accumulate), x1, rows, _values((n,), dtype, 4),
           exact=_exact(dtype))  # fmt: skip
    _check(lambda x, i, v: x.index_put((i,), v, accumulate=accumulate), x2, rows, _values((n, 3), dtype, 5),
           exact=_exact(dtype))  # fmt: skip
    # adjacent index tensors (dims 1 and 2, values broadcast) and separated ones (dims 0 and 2)
    rows4 = torch.tensor([3, -1, 0, 2]) if not accumulate else rows.clamp(-4, 3)
    for indices, values in ((["n", "i", "j"], (4, 1)), (["i", "n", "j"], (n, 5))):

        def body(b, x, i, j, v, indices=indices):
            chosen = [{"i": i, "j": j, "n": None}[k] for k in indices]
            return b.op("aten.index_put.default", x, chosen, v, accumulate)

        types = {
            "x": ((4, 5, 6), dtype),
            "i": ((n,), torch.int64),
            "j": ((n,), torch.int64),
            "v": (values, dtype),
        }
        graph = make_graph("index_put_dims", types, body)
        compiled = compile_graph(graph)
        _assert_scatter_loops([compiled.program])
        i = rows if indices[1] == "i" else rows4
        assert_matches_eager(compiled, graph, x3, i, cols, _values(values, dtype, 6))


@pytest.mark.parametrize("accumulate", [True, False])
def test_index_put_of_an_empty_index_returns_the_base(accumulate):
    x = torch.randn(5, 3)
    _check(lambda x, i, v: x.index_put((i,), v, accumulate=accumulate), x, torch.zeros(0, dtype=torch.long),
           torch.randn(0, 3))  # fmt: skip
    _check(lambda a, i, s: a.scatter_add(0, i, s), x, torch.zeros(0, 3, dtype=torch.long), torch.randn(0, 3))


def test_in_place_index_add_and_plain_assignment():
    def fn(x, i, v):
        y = x.clone()
        y[i] += v  # index_put(accumulate=False) of a gathered sum: duplicates keep one write
        z = x * 2
        z.index_put_((i,), v, accumulate=True)
        return y + z

    x, i, v = torch.randn(8, 4), torch.tensor([2, 5, -1]), torch.randn(3, 4)
    _check(fn, x, i, v, exact=False)


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.int32, torch.bfloat16])
def test_large_scatters_thread_and_match_eager(dtype):
    # Threaded paths: split over an output coordinate (scatter_add's columns, index_put rows of
    # width 256), atomics where every coordinate comes from data (1-d index_put), serial for bf16.
    g = torch.Generator().manual_seed(11)
    exact = _exact(dtype)
    # bf16 sums round after every add; eager's large kernels add in another order: a few ulps apart.
    tolerance = dict(atol=0.125, rtol=0.05) if dtype == torch.bfloat16 else {}
    base, index = _values((64, 512), dtype, 1), torch.randint(0, 64, (300, 512), generator=g)
    _check(lambda a, i, s: a.scatter_add(0, i, s), base, index, _values((300, 512), dtype, 2), exact=exact,
           **tolerance)  # fmt: skip
    rows = torch.randint(-1000, 1000, (200,), generator=g)
    _check(lambda x, i, v: x.index_put((i,), v, accumulate=True), _values((1000, 256), dtype, 3), rows,
           _values((200, 256), dtype, 4), exact=exact, **tolerance)  # fmt: skip
    flat = torch.randint(0, 500, (70000,), generator=g)
    # About 140 atomic float adds per element land in the order the threads reach them: the sum's
    # rounding differs from eager's serial order by up to a few ulps of the partial sums (about 10).
    atomic_tolerance = dict(atol=1e-4, rtol=1e-5) if dtype == torch.float32 else tolerance
    _check(lambda x, i, v: x.index_put((i,), v, accumulate=True), _values((500,), dtype, 5), flat,
           _values((70000,), dtype, 6), exact=exact, **atomic_tolerance)  # fmt: skip
    unique = torch.randperm(80000, generator=g)[:40000]
    _check(
        lambda x, i, v: x.index_put((i,), v), _values((80000,), dtype, 7), unique, _values((40000,), dtype, 8)
    )


def test_embedding_backward_is_a_scatter_loop_in_a_training_step():
    torch.manual_seed(0)
    model = torch.nn.Embedding(50, 16, padding_idx=3)
    reference = torch.nn.Embedding(50, 16, padding_idx=3)
    reference.load_state_dict(model.state_dict())
    tokens = torch.tensor([[1, 3, 7, 7, 49], [0, 7, 3, 12, 1]])  # repeated tokens and the padding one

    def step(m, tokens):
        return (m(tokens) * torch.arange(16.0)).sum()

    step(reference, tokens).backward()
    with events.observe() as seen:
        compiled = _compile(model, backend="inductor", options={"fallback": "raise"})
        (compiled(tokens) * torch.arange(16.0)).sum().backward()
    programs = [e.payload["program"] for e in seen if e.stage == "inductor" and e.kind == "loops"]
    _assert_scatter_loops(programs)
    torch.testing.assert_close(model.weight.grad, reference.weight.grad)


def test_scatter_loop_survives_the_loop_ir_json_round_trip():
    from torchsmith.inductor.loop_ir.serialize import program_from_json, program_to_json

    _, programs = _compiled_programs(lambda a, i, s: a.scatter_add(1, i, s), torch.zeros(3, 4),
                                     torch.tensor([[0, 3, 3]]), torch.ones(1, 3))  # fmt: skip
    (program,) = programs
    assert program_from_json(json.loads(json.dumps(program_to_json(program)))) == program


CHILD = textwrap.dedent(
    """
    import json, sys
    import torch
    import torchsmith

    def outcome(fn, *args):
        try:
            return ["ok", fn(*args).tolist()]
        except (IndexError, RuntimeError) as error:
            return [type(error).__name__, str(error).splitlines()[0]]

    cases = {
        "scatter_add past the end": (lambda a, i, s: a.scatter_add(0, i, s),
            (torch.zeros(5, 2), torch.tensor([[1, 5]]), torch.ones(1, 2))),
        "scatter negative": (lambda a, i, s: a.scatter(1, i, s),
            (torch.zeros(2, 3), torch.tensor([[0], [-1]]), torch.ones(2, 1))),
        "index_put past the end": (lambda x, i, v: x.index_put((i,), v, accumulate=True),
            (torch.zeros(5, 3), torch.tensor([0, 7]), torch.ones(2, 3))),
        "index_put below -size": (lambda x, i, v: x.index_put((i,), v),
            (torch.zeros(5), torch.tensor([2, -6]), torch.ones(2))),
        "large index_put": (lambda x, i, v: x.index_put((i,), v, accumulate=True),
            (torch.zeros(100), torch.cat([torch.zeros(69999, dtype=torch.long), torch.tensor([100])]),
             torch.ones(70000))),
    }
    for name, (fn, args) in cases.items():
        print(json.dumps(["start", name]), flush=True)
        compiled = torchsmith.compile(fn, backend="inductor", options={"fallback": "raise"})
        got = outcome(compiled, *args)
        expected = outcome(fn, *args)
        fixed = [a.clamp(0, 1) if a.dtype == torch.long else a for a in args]  # every index in range
        again = outcome(compiled, *fixed) == outcome(fn, *fixed)
        print(json.dumps(["done", name, expected, got, again]), flush=True)
    """
)


def test_out_of_range_indices_raise_as_eager_does(tmp_path):
    _compile(lambda x: x)  # the child compiles through compile_api too
    env = dict(os.environ, TORCHSMITH_CACHE_DIR=str(tmp_path))
    done = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True, text=True, timeout=900)
    records = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("[")]
    started = [r for r in records if r[0] == "start"]
    assert done.returncode == 0, (
        f"child died with exit code {done.returncode} during {started[-1][1] if started else '?'}:\n"
        f"{done.stderr[-3000:]}"
    )
    finished = [r for r in records if r[0] == "done"]
    assert len(finished) == 5
    for _, name, expected, got, again in finished:
        assert expected[0] in ("IndexError", "RuntimeError"), (name, expected)
        assert got[0] == expected[0], f"{name}: eager {expected}, compiled {got}"
        assert "out of bounds" in got[1], (name, got)
        assert again, f"{name}: a call with valid indices after the error differs from eager"


def test_embedding_rows_check_their_index_once_and_vectorize():
    from torchsmith.inductor.testing import make_graph as graph_of

    graph = graph_of(
        "emb_bwd",
        {"g": ((64, 40), torch.float32), "i": ((64,), torch.int64)},
        lambda b, g, i: b.op("aten.embedding_dense_backward.default", g, i, 30, -1, False),
    )
    compiled = compile_graph(graph)
    writes = compiled.source[compiled.source.index("ts::checked_position(") :]
    # one check per row, then a branch-free inner loop over the row's columns
    assert writes.index("continue;") < writes.index("#pragma omp simd") < writes.index("for (int64_t r1")
    grad, tokens = torch.randn(64, 40), torch.randint(0, 30, (64,))
    assert_matches_eager(compiled, graph, grad, tokens)


@pytest.mark.parametrize("accumulate", [True, False])
def test_scatter_loops_with_symbolic_sizes(accumulate):
    def fn(x, i, v):
        return (
            x.index_put((i,), v, accumulate=accumulate),
            x.scatter_add(0, i[:, None].expand(-1, x.shape[1]), v),
        )

    compiled = _compile(fn, backend="inductor", dynamic=True, options={"fallback": "raise"})
    for rows, n in ((7, 4), (40, 300), (9000, 5000)):
        x, v = torch.randn(rows, 8), torch.randn(n, 8)
        i = torch.randperm(rows)[:n] if n <= rows else torch.randint(0, rows, (n,))
        for got, expected in zip(compiled(x, i, v), fn(x, i, v)):
            torch.testing.assert_close(got, expected)


@pytest.mark.parametrize("dtype", [torch.bool, torch.uint8, torch.int8, torch.float64, torch.float16])
@pytest.mark.parametrize("accumulate", [True, False])
def test_index_put_of_more_dtypes(dtype, accumulate):
    g = torch.Generator().manual_seed(3)
    rows = torch.tensor([4, 0, -2, 4, 1]) if accumulate else torch.tensor([4, 0, -2, 1])
    shape = (len(rows), 6)
    if dtype == torch.bool:
        x, v = torch.rand(5, 6, generator=g) > 0.7, torch.rand(shape, generator=g) > 0.5
    elif dtype.is_floating_point:
        x, v = torch.randn(5, 6, generator=g).to(dtype), torch.randn(shape, generator=g).to(dtype)
    else:
        x, v = (
            torch.randint(0, 100, (5, 6), generator=g).to(dtype),
            torch.randint(0, 100, shape, generator=g).to(dtype),
        )
    _check(
        lambda x, i, v: x.index_put((i,), v, accumulate=accumulate),
        x,
        rows,
        v,
        exact=not dtype.is_floating_point,
    )


def test_scatter_add_of_strided_and_broadcast_operands():
    base = torch.randn(6, 5).t()  # [5, 6], column-major
    src = torch.randn(8, 5).t()[:, :4]  # [5, 4], strided
    index = torch.tensor([[0, 5, 5, 2]]).expand(5, 4)  # broadcast: stride 0 along dim 0
    _check(lambda a, i, s: a.scatter_add(1, i, s), base, index, src, exact=False)
    _check(lambda a, i, s: (a * 2).scatter(1, i[:, :2], s[:, :2] + 1), base, index, src)


def test_scatter_checks_work_in_a_library_built_in_parts():
    # Enough kernels that cpp_build compiles the unit in parts: the scatter's position check shares
    # the one index record of the library.
    from torchsmith.inductor.cpp.build import split_source

    types = {f"y{k}": ((k + 2, 3), torch.float32) for k in range(9)}
    types |= {"x": ((5, 6), torch.float32), "index": ((3, 6), torch.int64), "src": ((3, 6), torch.float32)}

    def body(b, *values):
        *ys, x, index, src = values
        exps = tuple(b.op("aten.exp.default", y) for y in ys)
        return (b.op("aten.scatter_add.default", x, 0, index, src), *exps)

    graph = make_graph("parts", types, body)
    compiled = compile_graph(graph)
    assert len(split_source(compiled.source, 2)) > 1
    _assert_scatter_loops([compiled.program])
    inputs = [torch.randn(*shape) for shape, _ in list(types.values())[:-2]]
    inputs += [torch.randint(0, 5, (3, 6)), torch.randn(3, 6)]
    assert_matches_eager(compiled, graph, *inputs)
    inputs[-2][1, 1] = 5
    with pytest.raises(RuntimeError, match="index 5 is out of bounds") as info:
        compiled(*inputs)
    assert "prims.scatter_add" in " ".join(info.value.__notes__)
    inputs[-2][1, 1] = 0
    assert_matches_eager(compiled, graph, *inputs)  # the record was cleared by the raise


def test_int32_indices_scatter_and_gather_as_eager():
    # eager takes int32 index tensors; the decompositions widen them to the prims' int64
    g = torch.Generator().manual_seed(9)
    x, src = torch.randn(5, 6), torch.randn(3, 6)
    index = torch.randint(0, 5, (3, 6), generator=g, dtype=torch.int32)
    _check(lambda a, i, s: a.scatter_add(0, i, s), x, index, src, exact=False)
    _check(
        lambda a, i, s: a.scatter(1, torch.stack([i[:, 0] % 3, i[:, 0] % 3 + 3], 1), s[:, :2]),
        x,
        index,
        src,
    )
    expected = x.gather(0, index)
    gather = _compile(
        lambda a, i: a.gather(0, i), backend="inductor", options={"fallback": "raise"}
    )
    got = gather(x, index)
    assert torch.equal(got, expected)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bool])
def test_large_plain_writes_with_duplicates_keep_one_written_value(dtype):
    # Which of several writes to one element wins is unspecified (torch's parallel kernels too):
    # each element must hold the base or one of the values written there, nothing torn or mixed.
    g = torch.Generator().manual_seed(5)
    rows = torch.randint(0, 300, (60000,), generator=g)
    x = torch.zeros(300, dtype=dtype)
    v = (
        (torch.arange(60000) % 251 + 1).to(dtype)
        if dtype != torch.bool
        else torch.ones(60000, dtype=torch.bool)
    )
    got, programs = _compiled_programs(lambda x, i, v: x.index_put((i,), v), x, rows, v)
    _assert_scatter_loops(programs)
    for position in range(300):
        written = v[rows == position]
        assert (got[position] == x[position]) if len(written) == 0 else bool((written == got[position]).any())
