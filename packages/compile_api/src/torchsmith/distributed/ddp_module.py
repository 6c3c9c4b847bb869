"""`torchsmith.compile(DDP(model))`: DDP's own forward runs as it is, around the compiled module.

DDP's forward is bookkeeping for the reducer (buffer broadcast, bucket rebuilds, `prepare_for_backward`,
join hooks) around one call of its module; none of it is tensor math to compile. So the DDP module
runs natively and only the module it wraps is compiled: for each call the DDP module's `module`
entry refers to the compiled wrapper, which shares every parameter, buffer and `state_dict` key with
the original, and is put back after the call.
"""

import torch

from torchsmith.capture.api import CapturedModule


def is_ddp(module) -> bool:
    """Whether `module` is a `torch.nn.parallel.DistributedDataParallel`."""
    if not torch.distributed.is_available():
        return False
    from torch.nn.parallel import DistributedDataParallel

    return isinstance(module, DistributedDataParallel)


class CompiledDDP(CapturedModule):
    """A DDP module whose wrapped module runs compiled; everything else (parameters, `state_dict` with
    DDP's `module.` keys, `no_sync`, comm hooks, attributes) is the DDP module's own."""

    def __init__(self, ddp: torch.nn.Module, compiled_module: CapturedModule, session):
        super().__init__(ddp, session)
        object.__setattr__(self, "_compiled_module", compiled_module)

    def __call__(self, *args, **kwargs):
        ddp = self._orig_mod
        module = ddp._modules["module"]
        ddp._modules["module"] = self._compiled_module
        try:
            return ddp(*args, **kwargs)
        finally:
            ddp._modules["module"] = module

    forward = __call__

    def __repr__(self):
        return f"CompiledDDP({self._orig_mod!r})"
