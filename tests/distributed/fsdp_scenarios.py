"""What each rank runs for test_fsdp.py: eager FSDP2 (`fully_shard`) against compiled FSDP2 models."""

import warnings

import torch
from models import batches, blocks, build, loss_of
from torch.distributed.fsdp import fully_shard

import torchsmith

STEPS = 3


def full(t: torch.Tensor) -> torch.Tensor:
    """The whole tensor behind a sharded DTensor (a collective: every rank calls it in the same order)."""
    return t.full_tensor() if hasattr(t, "full_tensor") else t


def shard(name: str, how: str, backend: str):
    """(model, what to call, compiled wrappers) for `how`: "eager" (each block sharded, then the
    root), "shard_then_compile" (the same, then the whole model compiled) or "compile_then_shard"
    (each block compiled, the compiled block sharded, then the root sharded)."""
    model = build(name)
    container = blocks(model)
    if how == "compile_then_shard":
        compiled = []
        for i, block in enumerate(list(container)):
            wrapper = torchsmith.compile(block, backend=backend)
            fully_shard(wrapper)
            container[i] = wrapper
            compiled.append(wrapper)
        fully_shard(model)
        return model, model, compiled
    for block in container:
        fully_shard(block)
    fully_shard(model)
    if how == "eager":
        return model, model, []
    wrapper = torchsmith.compile(model, backend=backend)
    return model, wrapper, [wrapper]


def train(model, call, xs) -> dict:
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    losses, grads = [], []
    for x in xs:
        optimizer.zero_grad()
        loss = loss_of(call(x))
        loss.backward()
        losses.append(loss.detach())
        grads.append([full(p.grad).detach().clone() for p in model.parameters()])
        optimizer.step()
    params = [full(p).detach().clone() for p in model.parameters()]
    return {"losses": losses, "grads": grads, "params": params}


def equal_to_eager(rank, world_size, name: str, backend: str,
                   hows=("shard_then_compile", "compile_then_shard")) -> dict:
    """Eager FSDP2 and each compiled variant of model `name`: training results, graphs and graph
    breaks of the compiled code, state_dict keys, and eager's checkpoint loaded into the variant."""
    xs = batches(name, rank, STEPS)
    model, call, _ = shard(name, "eager", backend)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        eager_run = train(model, call, xs)
    eager_run["warnings"] = sorted({str(w.message) for w in caught})
    result = {"eager": eager_run, "eager_keys": list(model.state_dict()),
              "num_params": len(list(model.parameters())), "num_blocks": len(blocks(model))}
    eager_state = model.state_dict()
    eager_full = {k: full(v).clone() for k, v in eager_state.items()}
    for how in hows:
        model, call, compiled = shard(name, how, backend)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            run = train(model, call, xs)
        run["warnings"] = sorted({str(w.message) for w in caught})
        records = [r for wrapper in compiled for r in wrapper._session.records]
        run["graphs"] = sum(r.graph is not None for r in records)
        sessions = [wrapper._session for wrapper in compiled]
        run["eager_codes"] = [code.co_qualname for session in sessions
                              for code, cache in session.caches.items() if cache.eager_reason]
        entries = run["entries"] = {}  # cache entries of each code, over all sessions
        for session in sessions:
            for code, cache in session.caches.items():
                entries[code.co_qualname] = entries.get(code.co_qualname, 0) + len(cache.entries)
        run["breaks"] = [(r.break_reason.reason, f"{r.break_reason.filename}:{r.break_reason.line}")
                         for r in records if r.break_reason is not None]
        run["keys"] = list(call.state_dict())
        call.load_state_dict(eager_state)
        run["loaded_equal"] = all(torch.equal(full(v), eager_full[k]) for k, v in call.state_dict().items())
        result[how] = run
    return result
