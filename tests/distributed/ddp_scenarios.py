"""What each rank runs for test_ddp.py: eager DDP against compiled DDP, both ways of wrapping."""

import io

import torch
import torch.distributed as dist
from models import batches, build, loss_of
from torch.nn.parallel import DistributedDataParallel as DDP

import torchsmith
from torchsmith.autograd_aot import aot_compile
from torchsmith.autograd_aot.runtime import python_compiler
from torchsmith.ir.events import observe

STEPS = 3
# small buckets, so the tiny models span several (bytes: the MLP has 1,732 of parameters, GPT-2 11,392)
BUCKET_MB = {"mlp": 0.0005, "gpt2": 0.002, "bert": 0.002}


def wrap(name: str, how: str, backend, options=None, **ddp_kwargs):
    """The model `name` under DDP: eager, DDP(compile(model)) or compile(DDP(model))."""
    model = build(name)
    ddp_kwargs = {"bucket_cap_mb": BUCKET_MB[name], **ddp_kwargs}
    if how == "eager":
        return model, DDP(model, **ddp_kwargs)
    if how == "ddp_of_compiled":
        return model, DDP(torchsmith.compile(model, backend=backend, options=options), **ddp_kwargs)
    return model, torchsmith.compile(DDP(model, **ddp_kwargs), backend=backend, options=options)


def train(model, wrapped, xs) -> dict:
    """Three SGD steps; losses, gradients after each step and the final parameters."""
    optimizer = torch.optim.SGD(wrapped.parameters(), lr=0.1)
    losses, grads = [], []
    for x in xs:
        optimizer.zero_grad()
        loss = loss_of(wrapped(x))
        loss.backward()
        losses.append(loss.detach())
        grads.append([p.grad.detach().clone() for p in model.parameters()])
        optimizer.step()
    return {"losses": losses, "grads": grads, "params": [p.detach().clone() for p in model.parameters()]}


def equal_to_eager(rank, world_size, name: str, backend: str, runs=(("ddp_of_compiled", True),
                   ("compiled_ddp", True)), **ddp_kwargs) -> dict:
    """Eager DDP and each compiled wrapping (how, split at buckets) of model `name`: training results,
    the pieces each graph was cut into, and the state_dict keys; keyed by "how/split"."""
    xs = batches(name, rank, STEPS)
    model, wrapped = wrap(name, "eager", backend, **ddp_kwargs)
    result = {"eager": train(model, wrapped, xs), "eager_keys": list(wrapped.state_dict())}
    eager_state = wrapped.state_dict()
    for how, split in runs:
        model, wrapped = wrap(name, how, backend, options={"ddp.split_at_buckets": split}, **ddp_kwargs)
        with observe() as events:
            run = train(model, wrapped, xs)
        run["pieces"] = [len(e.payload["pieces"]) for e in events if e.kind == "ddp_split"]
        run["keys"] = list(wrapped.state_dict())
        # a checkpoint of eager DDP loads into the compiled wrapper (and back out) under eager's keys
        buffer = io.BytesIO()
        torch.save(eager_state, buffer)
        buffer.seek(0)
        wrapped.load_state_dict(torch.load(buffer))
        run["loaded_equal"] = all(torch.equal(wrapped.state_dict()[k], v) for k, v in eager_state.items())
        result[f"{how}/{split}"] = run
    return result


def recording_backend(events: list):
    """A backend whose compiled backward of each graph (each piece) records ("backward", name) as it runs."""

    def backend(graph, example_inputs):
        def backward_compiler(bw_graph, bw_inputs):
            run = python_compiler(bw_graph, bw_inputs)

            def recorded(*args):
                events.append(("backward", graph.name))
                return run(*args)

            return recorded

        return aot_compile(graph, example_inputs, python_compiler, backward_compiler)

    return backend


def allreduce_order(rank, world_size, name: str) -> dict:
    """With the split at buckets and without: the order of backward pieces and bucket all-reduce
    launches in the last of three steps, recorded by the compiled backwards and by a DDP comm hook
    (which launches each bucket's all-reduce), and DDP's buckets (parameter names); and the buckets
    eager DDP rebuilt ("eager")."""
    result = {split: _allreduce_order(world_size, name, split) for split in (True, False)}
    model, ddp = wrap(name, "eager", None)
    train(model, ddp, batches(name, dist.get_rank(), STEPS))
    result["eager"] = {"buckets": bucket_names(model, ddp)}
    return result


def bucket_names(model, ddp) -> list[list[str]]:
    """DDP's buckets, bucket 0 first, as the names of their parameters in `model`."""
    return [[n for n, p in model.named_parameters() if any(p is q for q in b.parameters())]
            for b in ddp.reducer._get_zeros_like_grad_buckets()]


def _allreduce_order(world_size, name: str, split: bool) -> dict:
    events: list = []
    model = build(name)
    ddp = DDP(torchsmith.compile(model, backend=recording_backend(events),
                                 options={"ddp.split_at_buckets": split}),
              bucket_cap_mb=BUCKET_MB[name])

    def hook(state, bucket):
        events.append(("allreduce", bucket.index()))
        future = dist.all_reduce(bucket.buffer().div_(world_size), async_op=True).get_future()
        return future.then(lambda f: f.value()[0])

    ddp.register_comm_hook(None, hook)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.1)
    for x in batches(name, dist.get_rank(), STEPS):
        events.clear()
        optimizer.zero_grad()
        loss_of(ddp(x)).backward()
        optimizer.step()
    return {"events": list(events), "buckets": bucket_names(model, ddp)}
