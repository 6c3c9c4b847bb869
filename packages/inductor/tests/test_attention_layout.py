"""The layout the lowering gives an attention result: the order the kernel torch picks writes, so
that no copy follows the call (lowering/library.py `_heads_last_layout`)."""

import pytest
import torch

from torchsmith.inductor.lowering.decompose import to_prims
from torchsmith.inductor.lowering.lower import lower
from torchsmith.inductor.testing import make_graph
from torchsmith.ir import TensorType

B, H, L, E = 2, 4, 16, 8
CONTIGUOUS = (H * L * E, L * E, E, 1)
HEADS_LAST = (L * H * E, E, H * E, 1)


def _attention_layout(dtype, device, heads_last_query: bool, mask: bool):
    def body(b, q, k, v, m):
        if heads_last_query:  # a head split of a (B, L, H*E) projection
            q = b.op("aten.transpose.int", b.op("aten.view.default", q, [B, L, H, E]), 1, 2)
        extra = [m] if mask else []
        return b.op("aten.scaled_dot_product_attention.default", q, k, v, *extra)

    q_shape = (B, L, H * E) if heads_last_query else (B, H, L, E)
    types = {"q": TensorType.make(q_shape, dtype, device)}
    types |= {n: TensorType.make((B, H, L, E), dtype, device) for n in ("k", "v")}
    types["m"] = TensorType.make((L, L), torch.bool, device)
    program = lower(to_prims(make_graph("attention", types, body)))
    (call,) = [b for b in program.buffers if "attention" in getattr(b, "kernel", "")]
    return call.layout.strides


@pytest.mark.parametrize(
    "dtype, device, heads_last_query, mask, expected",
    [
        (torch.bfloat16, "cuda:0", False, False, CONTIGUOUS),  # cuDNN / flash: the query's order
        (torch.float16, "cuda:0", False, False, CONTIGUOUS),
        (torch.bfloat16, "cuda:0", True, False, HEADS_LAST),
        (torch.float32, "cuda:0", False, False, HEADS_LAST),  # memory-efficient attention
        (torch.bfloat16, "cuda:0", False, True, HEADS_LAST),
        (torch.float32, "cpu", False, False, CONTIGUOUS),  # CPU flash: the query's order
        (torch.float32, "cpu", True, False, HEADS_LAST),
    ],
)
def test_attention_result_is_stored_in_the_order_its_kernel_writes(dtype, device, heads_last_query, mask,
                                                                    expected):
    assert _attention_layout(dtype, device, heads_last_query, mask) == expected
