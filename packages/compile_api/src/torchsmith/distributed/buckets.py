"""DDP's gradient buckets, as the reducer builds them, for the parameters of one captured graph.

DDP starts with every parameter in one bucket and, after the first backward, rebuilds its buckets
from the order in which gradients became ready, filling each bucket up to its byte limit (the first
one up to `first_bucket_bytes_cap`, the rest up to `bucket_bytes_cap`, or the per-bucket limits of
`bucket_cap_mb_list`). Gradients become ready in reverse order of the parameters' first use in the
forward, so the buckets are computed from that order with the reducer's own assignment function
(`torch.distributed._compute_bucket_assignment_by_size`) and the DDP module's limits.

With `find_unused_parameters=True` (and no static graph) DDP never rebuilds: the buckets it built at
construction are final. Once DDP has rebuilt them (it does so once) they are final as well. In both
cases `fixed_buckets` reads them from its reducer.
"""

from dataclasses import dataclass

import torch
import torch.distributed as dist


@dataclass(frozen=True, slots=True)
class BucketLimits:
    """Byte limits of DDP's buckets: `limits[i]` for bucket i, the last one for every later bucket."""

    limits: tuple[int, ...]

    @staticmethod
    def of(ddp: torch.nn.Module) -> "BucketLimits":
        """The limits the reducer of `ddp` (a DistributedDataParallel) rebuilds its buckets with."""
        config = getattr(ddp, "_bucket_config", None)
        if config is not None:
            if config.per_bucket_bytes_caps:
                return BucketLimits(tuple(config.per_bucket_bytes_caps))
            return BucketLimits((config.first_bucket_bytes_cap, config.bucket_bytes_cap))
        # Releases before the bucket config object: the first bucket is small only with the default cap.
        cap = int(ddp.bucket_bytes_cap)
        first = dist._DEFAULT_FIRST_BUCKET_BYTES if getattr(ddp, "bucket_bytes_cap_default", False) else cap
        return BucketLimits((first, cap))


def reduced_parameters(ddp: torch.nn.Module) -> list[torch.Tensor]:
    """The parameters whose gradients `ddp` all-reduces (requires_grad, not in `parameters_to_ignore`)."""
    ignored = set(getattr(ddp, "parameters_to_ignore", ()) or ())
    return [p for name, p in ddp.module.named_parameters() if p.requires_grad and name not in ignored]


def bucket_assignment(params_in_ready_order: list[torch.Tensor], limits: BucketLimits) -> list[list[int]]:
    """Buckets as lists of indices into `params_in_ready_order` (the order gradients become ready),
    bucket 0 first: the reducer's own assignment, so one bucket never mixes dtypes or devices."""
    if not params_in_ready_order:
        return []
    sparse = [False] * len(params_in_ready_order)
    indices, _ = dist._compute_bucket_assignment_by_size(params_in_ready_order, list(limits.limits), sparse)
    return [list(bucket) for bucket in indices]


def has_final_buckets(ddp: torch.nn.Module) -> bool:
    """Whether `ddp`'s buckets will not change any more: it never rebuilds them, or it already has."""
    if getattr(ddp, "_has_rebuilt_buckets", False):
        return True
    return bool(getattr(ddp, "find_unused_parameters", False)) and not getattr(ddp, "static_graph", False)


def fixed_buckets(ddp: torch.nn.Module) -> list[list[torch.Tensor]] | None:
    """The reducer's buckets (parameters, bucket 0 first) when they are final, else None."""
    if not has_final_buckets(ddp):
        return None
    reducer = getattr(ddp, "reducer", None)
    if reducer is None:
        return None
    return [list(bucket.parameters()) for bucket in reducer._get_zeros_like_grad_buckets()]
