"""Instances of one module class share a cache entry: modules are guarded by class and by what the
code reads from them (parameters are graph inputs), not by identity. What the code reads that
differs between instances still recompiles, and each call reads its own instance's parameters."""

import torch


class Block(torch.nn.Module):
    def __init__(self, width: int = 8, scale: int = 1, act: bool = True):
        super().__init__()
        self.lin = torch.nn.Linear(width, width)
        self.scale = scale
        self.act = act

    def forward(self, x):
        y = self.lin(x) * self.scale
        if self.act:
            y = torch.nn.functional.gelu(y)
        return y + x


class OtherBlock(Block):
    def forward(self, x):
        return super().forward(x) - 1


def _blocks(n, **kwargs):
    torch.manual_seed(0)
    return [Block(**kwargs) for _ in range(n)]


def _run_each(compiled, blocks, x):
    for block in blocks:
        torch.testing.assert_close(compiled(block, x), block(x))


def test_twelve_instances_compile_once(compile_with, backend):
    blocks = _blocks(12)  # past the recompile limit (8), were each instance captured alone
    compiled = compile_with(lambda block, x: block(x))
    x = torch.randn(4, 8)
    _run_each(compiled, blocks, x)
    _run_each(compiled, blocks, x)
    assert len(backend.graphs) == 1
    (cache,) = compiled.session.caches.values()
    assert len(cache.entries) == 1 and cache.eager_reason is None


def test_blocks_entered_after_breaks_share_one_entry(compile_with, backend):
    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.blocks = torch.nn.ModuleList(_blocks(12))

        def forward(self, x):
            for block in self.blocks:
                x = block(x)
            return x

    model = Model()
    for block in model.blocks:  # as FSDP2's do: each block call breaks the graph and runs alone
        block.register_forward_pre_hook(lambda module, args, kwargs: None, with_kwargs=True)
    compiled = compile_with(model)
    x = torch.randn(4, 8, requires_grad=True)
    torch.testing.assert_close(compiled(x), model(x))
    entries = {code.co_qualname: len(c.entries) for code, c in compiled._session.caches.items()}
    assert entries["Block.forward"] == 1
    assert all(c.eager_reason is None for c in compiled._session.caches.values())


def test_each_instance_gets_its_own_gradients_and_sees_optimizer_steps(compile_with):
    blocks = _blocks(3)
    eager = _blocks(3)
    compiled = compile_with(lambda block, x: block(x))
    params = [p for b in blocks for p in b.parameters()]
    eager_params = [p for b in eager for p in b.parameters()]
    opt = torch.optim.SGD(params, lr=0.1)
    eager_opt = torch.optim.SGD(eager_params, lr=0.1)
    x = torch.randn(4, 8)
    for _ in range(3):
        opt.zero_grad()
        eager_opt.zero_grad()
        loss = sum(compiled(b, x * (i + 1)).pow(2).mean() for i, b in enumerate(blocks))
        eager_loss = sum(b(x * (i + 1)).pow(2).mean() for i, b in enumerate(eager))
        torch.testing.assert_close(loss, eager_loss)
        loss.backward()
        eager_loss.backward()
        for p, q in zip(params, eager_params):
            torch.testing.assert_close(p.grad, q.grad)
        opt.step()
        eager_opt.step()
    for p, q in zip(params, eager_params):
        torch.testing.assert_close(p, q)


def test_what_the_code_reads_still_recompiles(compile_with, backend):
    x = torch.randn(4, 8)
    cases = {
        "another class": OtherBlock(),
        "an attribute the code reads": Block(scale=2),
        "a flag the code reads": Block(act=False),
        "training": Block().eval(),
        "parameter dtype": Block().double(),
        "parameter shapes": Block(width=4),
        "requires_grad": Block().requires_grad_(False),
        "a hook on one instance": Block(),
        "forward replaced on one instance": Block(),
    }
    cases["a hook on one instance"].lin.register_forward_hook(lambda module, args, out: out * 3)
    cases["forward replaced on one instance"].lin.forward = lambda x: x * 5
    for reason, block in cases.items():
        (base,) = _blocks(1)
        compiled = compile_with(lambda block, x: block(x))
        torch.testing.assert_close(compiled(base, x), base(x))
        inputs = x.double() if block.lin.weight.dtype == torch.float64 else x[:, : block.lin.in_features]
        before = len(backend.graphs)
        torch.testing.assert_close(compiled(block, inputs), block(inputs))
        assert len(backend.graphs) == before + 1, f"{reason} did not recompile"
        (again,) = _blocks(1)
        torch.testing.assert_close(compiled(again, x), again(x))
        assert len(backend.graphs) == before + 1, f"{reason}: the first entry no longer serves"


def test_hooked_instances_do_not_share_their_hooks(compile_with):
    blocks = _blocks(2)
    blocks[0].lin.register_forward_hook(lambda module, args, out: out * 2)
    blocks[1].lin.register_forward_hook(lambda module, args, out: out * 3)
    compiled = compile_with(lambda block, x: block(x))
    _run_each(compiled, blocks, torch.randn(4, 8))


def test_a_method_shadowed_on_one_instance(compile_with):
    class Helper(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(8, 8)

        def act(self, y):
            return torch.relu(y)

        def forward(self, x):
            return self.act(self.lin(x))

    a, b = Helper(), Helper()
    b.act = lambda y: y * 7
    compiled = compile_with(lambda m, x: m(x))
    x = torch.randn(4, 8)
    torch.testing.assert_close(compiled(a, x), a(x))
    torch.testing.assert_close(compiled(b, x), b(x))


def test_identity_between_modules_is_guarded(compile_with):
    class Tied(torch.nn.Module):
        def __init__(self, shared: bool):
            super().__init__()
            self.a = torch.nn.Linear(8, 8)
            self.b = self.a if shared else torch.nn.Linear(8, 8)

        def forward(self, x):
            if self.a is self.b:
                return self.a(x)
            return self.a(x) + self.b(x)

    compiled = compile_with(lambda m, x: m(x))
    x = torch.randn(4, 8)
    for m in (Tied(False), Tied(True), Tied(False), Tied(True)):
        torch.testing.assert_close(compiled(m, x), m(x))


def test_instance_specific_reads_pin_the_instance(compile_with):
    class Stack(torch.nn.Module):
        def __init__(self, n: int):
            super().__init__()
            self.layers = torch.nn.ModuleList(torch.nn.Linear(8, 8) for _ in range(n))
            self.extra = torch.nn.Parameter(torch.randn(8)) if n > 2 else None

        def forward(self, x):
            for layer in self.layers[1:]:
                x = layer(x)
            return x + sum(p.sum() for p in self.parameters())

    compiled = compile_with(lambda m, x: m(x))
    x = torch.randn(4, 8)
    for m in (Stack(2), Stack(2), Stack(3), Stack(2)):
        torch.testing.assert_close(compiled(m, x), m(x))


def test_a_different_number_of_layers_recompiles(compile_with, backend):
    class Stack(torch.nn.Module):
        def __init__(self, n: int):
            super().__init__()
            self.layers = torch.nn.ModuleList(torch.nn.Linear(8, 8) for _ in range(n))

        def forward(self, x):
            for layer in self.layers:
                x = layer(x)
            return x

    compiled = compile_with(lambda m, x: m(x))
    x = torch.randn(4, 8)
    for m in (Stack(2), Stack(2), Stack(3), Stack(3)):
        torch.testing.assert_close(compiled(m, x), m(x))
    assert len(backend.graphs) == 2


class IndexedBlock(torch.nn.Module):
    """A block that reads its own index, as transformers' attention does for its cache slot."""

    def __init__(self, index: int):
        super().__init__()
        self.index = index
        self.lin = torch.nn.Linear(8, 8)

    def forward(self, x, slots: list):
        slots[self.index] = self.lin(x)
        return slots[self.index] + x


def test_an_entry_per_instance_counts_once_per_instance(compile_with, backend, caplog):
    torch.manual_seed(0)
    blocks = [IndexedBlock(i) for i in range(12)]
    compiled = compile_with(lambda block, x, slots: block(x, slots))
    x = torch.randn(4, 8)
    with caplog.at_level("WARNING", logger="torchsmith.capture"):
        for _ in range(2):
            slots, eager_slots = [None] * 12, [None] * 12
            for b in blocks:
                torch.testing.assert_close(compiled(b, x, slots), b(x, eager_slots))
            torch.testing.assert_close(slots, eager_slots)
    assert len(backend.graphs) == 12  # one per index: none ran eagerly
    assert not [r for r in caplog.records if "recompile limit" in r.getMessage()]


def test_the_check_that_told_entries_apart_runs_first(compile_with):
    torch.manual_seed(0)
    blocks = [IndexedBlock(i) for i in range(4)]
    compiled = compile_with(lambda block, x, slots: block(x, slots))
    x = torch.randn(4, 8)
    for b in blocks + blocks:
        torch.testing.assert_close(compiled(b, x, [None] * 4), b(x, [None] * 4))
    (cache,) = compiled.session.caches.values()
    firsts = [e.guard_set.exprs[0] for e in cache.entries]
    assert firsts[:3] == [f"L['block'].index == {i}" for i in range(3)]
    assert "index" not in firsts[3]  # the last entry never failed


def test_one_instance_changing_what_it_reads_still_hits_the_limit(compile_with, backend, caplog):
    block = IndexedBlock(0)
    compiled = compile_with(block)
    x = torch.randn(4, 8)
    with caplog.at_level("WARNING", logger="torchsmith.capture"):
        for i in range(12):
            block.index = i
            slots, eager_slots = [None] * 12, [None] * 12
            torch.testing.assert_close(compiled(x, slots), block(x, eager_slots))
    assert len(backend.graphs) == 8
    assert len([r for r in caplog.records if "recompile limit" in r.getMessage()]) == 1


def test_membership_and_hashes_of_modules_are_guarded(compile_with):
    class Skip(torch.nn.Module):
        def __init__(self, skip_second: bool):
            super().__init__()
            self.layers = torch.nn.ModuleList(torch.nn.Linear(8, 8) for _ in range(2))
            self.skipped = [self.layers[1]] if skip_second else [torch.nn.Linear(8, 8)]

        def forward(self, x):
            for layer in self.layers:
                if layer not in self.skipped:
                    x = layer(x)
            return x

    compiled = compile_with(lambda m, x: m(x))
    x = torch.randn(4, 8)
    for m in (Skip(True), Skip(False), Skip(True)):
        torch.testing.assert_close(compiled(m, x), m(x))


def test_buffers_updated_in_place_stay_each_instance_own(compile_with, backend):
    import copy

    class Normed(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(8, 8)
            self.bn = torch.nn.BatchNorm1d(8)

        def forward(self, x):
            return self.bn(self.lin(x)).relu() + x

    torch.manual_seed(0)
    blocks = [Normed() for _ in range(4)]
    eager = copy.deepcopy(blocks)
    compiled = compile_with(lambda block, x: block(x))
    for _ in range(3):
        for i, (b, e) in enumerate(zip(blocks, eager)):
            x = torch.randn(16, 8) * (i + 1)
            torch.testing.assert_close(compiled(b, x), e(x))
    for b, e in zip(blocks, eager):
        torch.testing.assert_close(b.bn.running_mean, e.bn.running_mean)
        torch.testing.assert_close(b.bn.running_var, e.bn.running_var)
        assert int(b.bn.num_batches_tracked) == int(e.bn.num_batches_tracked) == 3
    assert len(backend.graphs) == 1
