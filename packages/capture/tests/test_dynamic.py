"""Dynamic shapes: symbols in the IR types, guards on sizes, automatic dynamic, mark_dynamic."""

import torch

from torchsmith.capture import mark_dynamic


def test_automatic_dynamic_makes_the_changed_dim_symbolic(compile_with, backend):
    def f(x, w):
        return (x @ w).relu().view(x.shape[0] * 2, -1)

    compiled = compile_with(f)
    w = torch.randn(4, 6)
    for n in (3, 5, 8):
        x = torch.randn(n, 4)
        torch.testing.assert_close(compiled(x, w), f(x, w))
    static, dynamic = backend.graphs
    assert str(static.inputs[0].type) == "f32[3, 4] cpu"
    assert str(dynamic.inputs[0].type) == "f32[s0, 4] cpu"
    assert str(dynamic.inputs[1].type) == "f32[4, 6] cpu"
    assert str(dynamic.outputs[0].type) == "f32[2*s0, 3] cpu"


def test_dynamic_true_and_size_guards(compile_with, backend):
    compiled = compile_with(lambda x: x.sum(0) * x.shape[0], dynamic=True)
    for n in (2, 3, 9):
        x = torch.randn(n, 3)
        torch.testing.assert_close(compiled(x), x.sum(0) * n)
    assert len(backend.graphs) == 1
    (record,) = compiled.session.records
    assert "L['x'].size(0) >= 2" in record.guards
    compiled(torch.randn(1, 3))  # sizes 0 and 1 are specialized: a new entry
    assert len(backend.graphs) == 2


def test_comparison_on_a_size_adds_a_guard(compile_with, backend):
    def f(x):
        return x * 2 if x.shape[0] > 4 else x * 3

    compiled = compile_with(f, dynamic=True)
    for n in (5, 6, 2, 3):
        x = torch.ones(n)
        torch.testing.assert_close(compiled(x), f(x))
    assert len(backend.graphs) == 2
    assert any("> 4" in g or "<= 4" in g for g in compiled.session.records[0].guards)


def test_mark_dynamic(compile_with, backend):
    compiled = compile_with(lambda x: x.softmax(0))
    for n in (3, 4):
        x = torch.randn(n, 2)
        mark_dynamic(x, 0)
        torch.testing.assert_close(compiled(x), x.softmax(0))
    (graph,) = backend.graphs
    assert str(graph.inputs[0].type) == "f32[s0, 2] cpu"


def test_dynamic_false_never_makes_symbols(compile_with, backend):
    compiled = compile_with(lambda x: x + 1, dynamic=False)
    for n in (2, 3, 4):
        compiled(torch.ones(n))
    assert all(not g.inputs[0].type.free_symbols for g in backend.graphs) and len(backend.graphs) == 3


def test_returned_sizes_are_computed_at_run_time(compile_with):
    compiled = compile_with(lambda x: (x.shape, x.size(0) + 1, x.numel()), dynamic=True)
    assert compiled(torch.ones(3, 2)) == (torch.Size([3, 2]), 4, 6)
    assert compiled(torch.ones(7, 2)) == (torch.Size([7, 2]), 8, 14)
    assert type(compiled(torch.ones(5, 2))[0]) is torch.Size


def test_unfittable_size_specializes(compile_with, backend):
    def f(x):
        n = x.shape[0]
        return x.sum() + torch.tril_indices(n, n).sum(0)  # s0 * (s0 + 1) / 2: no fitted form

    compiled = compile_with(f, dynamic=True)
    x = torch.randn(7)
    torch.testing.assert_close(compiled(x), f(x))
    assert any("== 7" in g for g in compiled.session.records[0].guards)


def test_a_pool_size_is_the_floor_division_by_its_kernel(compile_with, backend):
    def f(x):
        return torch.nn.functional.max_pool1d(x, 3)

    compiled = compile_with(f, dynamic=True)
    for n in (7, 10, 13, 8):
        x = torch.randn(1, 2, n)
        torch.testing.assert_close(compiled(x), f(x))
    assert len(backend.graphs) == 1
    assert str(backend.graphs[0].outputs[0].type) == "f32[1, s0, s1 // 3] cpu"


def test_a_strided_pool_size_is_guarded_on_its_residue(compile_with, backend):
    def f(x):
        return torch.nn.functional.max_pool1d(x, 4, stride=3)  # (s0 - 1) // 3: no argument holds it

    compiled = compile_with(f, dynamic=True)
    for n in (7, 10, 13, 8):
        x = torch.randn(1, 2, n)
        torch.testing.assert_close(compiled(x), f(x))
    assert len(backend.graphs) == 2  # 8 has another residue mod 3 than 7, 10 and 13
    assert any("% 3 == 1" in g for g in compiled.session.records[0].guards)


def test_int_of_a_size_stays_symbolic(compile_with, backend):
    # transformers' TF-style padding reads `int(features.shape[-2])`: a size is an int already
    def f(x):
        height = int(x.shape[-1])
        pad = max(3 - height % 2, 0)
        return torch.nn.functional.pad(x, (0, pad)) * height

    compiled = compile_with(f, dynamic=True)
    for n in (6, 8, 10):
        x = torch.randn(2, n)
        torch.testing.assert_close(compiled(x), f(x))
    assert len(backend.graphs) == 1
    assert "s0" in str(backend.graphs[0].inputs[0].type)


def test_int_of_a_size_with_a_base_reads_it_as_text(compile_with, backend):
    def f(x):
        return x * int("11", 2)

    x = torch.randn(3)
    torch.testing.assert_close(compile_with(f)(x), x * 3)
