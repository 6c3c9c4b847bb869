"""torchsmith under `torch.distributed`: DDP with the backward cut at the gradient buckets, FSDP2.

- `BucketSplitBackend` (`ddp_backend.py`): graphs compiled inside a DDP forward are cut so each
  gradient bucket is completed by its own backward piece (`plan.py`, `split.py`, `buckets.py`).
- `CompiledDDP` (`ddp_module.py`): what `torchsmith.compile(DDP(model))` returns.

FSDP2 needs nothing here: with blocks sharded and then the model compiled, a sharded block's call
breaks the graph and runs its hooks (all-gather before, reshard and reduce-scatter hooks after)
natively around the block's own captured forward (capture's `call_with_forward_hooks`); a compiled
block given to `fully_shard` keeps FSDP's class, state and hooks on the wrapper, which
`CapturedModule.named_modules` lists so FSDP's root finds it.
"""

from torchsmith.distributed.ddp_backend import BucketSplitBackend, PiecewiseCall, active_ddp_module
from torchsmith.distributed.ddp_module import CompiledDDP, is_ddp
from torchsmith.distributed.plan import SplitPlan, plan_split
from torchsmith.distributed.split import Piece, safe_cuts, split_graph

__all__ = [
    "BucketSplitBackend", "CompiledDDP", "Piece", "PiecewiseCall", "SplitPlan", "active_ddp_module",
    "is_ddp", "plan_split", "safe_cuts", "split_graph",
]
