"""Reused result buffers for the matmul extern calls (mm, bmm, addmm).

A fresh result tensor from torch for each matmul of each call costs time: large ones come from
fresh pages, which the kernel then faults in, and a transformer's forward runs dozens of them. So
each call site keeps its last result buffer, and the next call writes into it
(`out=`) when nothing holds it any more: no tensor but the pool's references its storage (no view,
no graph output a user kept) and no Python reference but ours remains. A buffer still in use is
left alone and a fresh one allocated, so results a caller holds are never overwritten.

The pool keeps an alias of each result (its own tensor over the same storage), not the tensor the
call returns: a caller that is the only holder of the returned tensor may take it over, as autograd's
AccumulateGrad does with a gradient nothing else references (were the pool to hold the returned
tensor itself, AccumulateGrad would copy every compiled weight gradient into `.grad`). The storage
stays shared, so the pool still sees the caller's hold and leaves the buffer alone until it is freed.

Only results of at least `MIN_BYTES` are kept (small ones come from the allocator's free lists
anyway), and at most `MAX_BYTES` in all: the cost is that memory, held between calls.
"""

import sys
import threading

import torch

MIN_BYTES = 1 << 18
MAX_BYTES = 1 << 28
# The torch kernels that take `out=`: a kernel name maps to the function it must still be bound to
# (tests and users may replace EXTERN_KERNELS entries with functions that take no `out=`).
OUT_KERNELS = {"extern.addmm": torch.addmm, "prims.mm": torch.mm, "prims.bmm": torch.bmm}

_pool: dict[int, tuple[object, torch.Tensor]] = {}  # id(call) -> (call, its last result)
_held = 0
_lock = threading.Lock()


def worth_keeping(shape, dtype: torch.dtype) -> bool:
    """Whether a result of `shape` is large enough to keep (smaller ones take the plain call)."""
    count = 1
    for d in shape:
        count *= d
    return count * dtype.itemsize >= MIN_BYTES


def _unused(t: torch.Tensor) -> bool:
    """Whether only the caller's one local name refers to `t` and only `t` to its storage."""
    # getrefcount: the caller's local and the argument; use count: `t` and the temporary storage.
    return sys.getrefcount(t) <= 3 and torch._C._storage_Use_Count(t.untyped_storage()._cdata) <= 2


def out_buffer(call, shape, strides, dtype, device) -> torch.Tensor:
    """A tensor of `call`'s result layout to pass as `out=`: the call site's last result if it is
    free, else a new one."""
    global _held
    with _lock:
        entry = _pool.pop(id(call), None)
        if entry is not None:
            _held -= entry[1].numel() * entry[1].element_size()
    if entry is not None and entry[0] is call:
        t = entry[1]
        entry = None
        if t.shape == shape and t.stride() == strides and t.dtype == dtype and _unused(t):
            return t
    return torch.empty_strided(shape, strides, dtype=dtype, device=device)


def keep(call, result: torch.Tensor) -> None:
    """Remember `result` as `call`'s buffer for its next run (if it is large enough and fits)."""
    global _held
    size = result.numel() * result.element_size()
    if size < MIN_BYTES:
        return
    with _lock:
        if _held + size > MAX_BYTES:
            return
        previous = _pool.get(id(call))
        if previous is not None:
            _held -= previous[1].numel() * previous[1].element_size()
        _pool[id(call)] = (call, result.detach())  # an alias: the caller's tensor stays its own
        _held += size


def clear() -> None:
    """Drop every kept buffer (tests, and users short of memory)."""
    global _held
    with _lock:
        _pool.clear()
        _held = 0
