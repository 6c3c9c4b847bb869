"""`aligned_mm(a, b)` and `aligned_addmm(bias, a, b)`: `a @ b` (plus a bias) for a half-precision
`b` whose column count is not a multiple of 8 (a vocabulary head: GPT-2's 50257, BERT's 30522),
computed with that count padded.

cuBLAS runs such a product with a slow kernel (several times the time of an aligned product of
the same size); writing the result with aligned rows alone does
not change its choice, padding the columns of `b` does. `b` is usually a parameter, which can change
between calls, so it is padded on every call (a copy of `b`, small next to the product). The result
is a view of the padded product's first columns: its rows lie `padded` elements apart, which is the
layout the lowering gives the call (lowering/library.py), so no copy follows.

Where that product is a graph output, eager's layout is dense: a copy of the padded rows into dense
ones would then cost a read and a write of the whole result. `dense_mm(a, b)` and
`dense_addmm(bias, a, b)` write dense rows directly with a Triton matmul (triton/matmul.py), which
takes any row length; the lowering picks them for such outputs (lowering/library.py).
"""

import torch

ALIGNMENT = 8  # elements: 16 bytes of float16/bfloat16


def padded_columns(n: int) -> int:
    """`n` rounded up to the alignment the library's fast kernels need."""
    return -(-n // ALIGNMENT) * ALIGNMENT


def aligned_mm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """`a @ b` (2-d) with `b`'s columns padded by zeros to `padded_columns`; the result is the
    [M, N] view of the [M, padded] product."""
    n = b.shape[1]
    if padded_columns(n) == n:
        return torch.mm(a, b)
    return torch.mm(a, _padded(b))[:, :n]


def aligned_addmm(bias: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """`bias + a @ b` (a 1-d bias) as `aligned_mm` computes the product, the bias padded too."""
    n = b.shape[1]
    if padded_columns(n) == n:
        return torch.addmm(bias, a, b)
    bias = torch.cat([bias, bias.new_zeros(padded_columns(n) - n)])
    return torch.addmm(bias, a, _padded(b))[:, :n]


# Tiles of the Triton matmul for a wide product (a vocabulary head of a batch of tokens).
DENSE_CONFIG = (128, 256, 64, 8, 4)  # BLOCK_M, BLOCK_N, BLOCK_K, warps, stages


def dense_mm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """`a @ b` (2-d) written as a dense [M, N] tensor whatever N is: the Triton matmul on a GPU,
    torch's elsewhere (where no alignment matters)."""
    return dense_addmm(None, a, b)


def dense_addmm(bias: torch.Tensor | None, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """`bias + a @ b` as `dense_mm` computes the product."""
    if not a.is_cuda:
        return torch.mm(a, b) if bias is None else torch.addmm(bias, a, b)
    from torchsmith.inductor.triton.matmul import matmul_epilogue

    return matmul_epilogue(a, b, bias, config=DENSE_CONFIG)


def _padded(b: torch.Tensor) -> torch.Tensor:
    n = b.shape[1]
    width = padded_columns(n)
    if b.stride(0) == 1:  # b is the transpose of a row-major [N, K] weight: pad its rows
        rows = torch.empty(width, b.shape[0], dtype=b.dtype, device=b.device)
        rows[:n].copy_(b.t())
        rows[n:].zero_()
        return rows.t()
    padded = torch.empty(b.shape[0], width, dtype=b.dtype, device=b.device)
    padded[:, :n].copy_(b)
    padded[:, n:].zero_()
    return padded
