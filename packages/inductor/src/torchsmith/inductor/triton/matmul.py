"""mode="max-autotune" for matmuls: a Triton matmul template with a fused epilogue (bias,
activation, residual), tuned per shape against PyTorch's own matmul; the faster wins.

`matmul_epilogue(a, b, bias, activation, residual, config)` runs the template once;
`tuned_linear(a, b, bias, activation, residual)` times the template's configs and torch (`torch.mm`
plus the same epilogue in eager) on the first call for a shape, remembers the winner in memory and
in the autotune file (keyed by shape, dtypes, epilogue and GPU name), and runs it.
`tuned_matmul(a, b)` is the plain form the compiled graph uses for its `prims.mm` extern calls.
Off the GPU (or under the interpreter) torch always runs: timing there means nothing.
"""

import json

import torch
import triton

from torchsmith.inductor.errors import RuntimeCallError
from torchsmith.inductor.runtime.triton_launch import _read_choices, _remember, interpreting, load_module
from torchsmith.inductor.triton.codegen import source_hash

ACTIVATIONS = ("none", "relu", "gelu", "gelu_tanh", "silu")

# (BLOCK_M, BLOCK_N, BLOCK_K, num_warps, num_stages): shapes that suit H100/H200-class GPUs.
CONFIGS = (
    (64, 64, 32, 4, 3),
    (128, 64, 32, 4, 4),
    (128, 128, 32, 8, 3),
    (128, 128, 64, 8, 3),
    (64, 128, 64, 4, 4),
    (128, 256, 64, 8, 3),
)


MATMUL_TEMPLATE = """import triton
import triton.language as tl


@triton.jit
def ts_matmul(
    a, b, c, bias, residual, M, N, K,
    stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn, stride_rm, stride_rn,
    HAS_BIAS: tl.constexpr, ACTIVATION: tl.constexpr, HAS_RESIDUAL: tl.constexpr,
    PRECISION: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr,
):
    # Blocks are visited in groups of GROUP_M rows so that neighbouring programs share B in L2.
    pid = tl.program_id(0)
    tiles_m, tiles_n = tl.cdiv(M, BLOCK_M), tl.cdiv(N, BLOCK_N)
    group = pid // (GROUP_M * tiles_n)
    first_m = group * GROUP_M
    rows_in_group = tl.minimum(tiles_m - first_m, GROUP_M)
    pid_m = first_m + (pid % (GROUP_M * tiles_n)) % rows_in_group
    pid_n = (pid % (GROUP_M * tiles_n)) // rows_in_group
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)[:, None]
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)[None, :]
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
{loop}
        rk_row = k0 + tl.arange(0, BLOCK_K)[None, :]
        rk_col = k0 + tl.arange(0, BLOCK_K)[:, None]
        a_tile = tl.load(a + rm * stride_am + rk_row * stride_ak, (rm < M) & (rk_row < K), other=0.0)
        b_tile = tl.load(b + rk_col * stride_bk + rn * stride_bn, (rk_col < K) & (rn < N), other=0.0)
        acc = tl.dot(a_tile, b_tile, acc, input_precision=PRECISION)
{step}    mask = (rm < M) & (rn < N)
    if HAS_BIAS:
        acc = acc + tl.load(bias + rn, rn < N, other=0.0).to(tl.float32)
    if ACTIVATION == "relu":
        acc = tl.maximum(acc, 0.0)
    elif ACTIVATION == "gelu":
        acc = 0.5 * acc * (1.0 + tl.erf(acc * 0.7071067811865476))
    elif ACTIVATION == "gelu_tanh":
        inner = 0.7978845608028654 * (acc + 0.044715 * acc * acc * acc)
        acc = 0.5 * acc * (1.0 + (2.0 * tl.sigmoid(2.0 * inner) - 1.0))
    elif ACTIVATION == "silu":
        acc = acc * tl.sigmoid(acc)
    if HAS_RESIDUAL:
        acc = acc + tl.load(residual + rm * stride_rm + rn * stride_rn, mask, other=0.0).to(tl.float32)
    tl.store(c + rm * stride_cm + rn * stride_cn, acc.to(c.dtype.element_ty), mask)
"""


def _template_kernel():
    """The template's kernel, loaded from generated source: the K loop is a `for` on the GPU (Triton
    pipelines it) and a `while` under the interpreter (whose `range` cannot take a kernel argument)."""
    if interpreting():
        loop, step = "    k0 = 0\n    while k0 < K:", "        k0 += BLOCK_K\n"
    else:
        loop, step = "    for k0 in range(0, K, BLOCK_K):", ""
    source = MATMUL_TEMPLATE.replace("{loop}", loop).replace("{step}", step)
    return load_module(source, source_hash(source)).ts_matmul


def _precision(dtype: torch.dtype) -> str:
    # Match torch.mm: float32 uses TF32 only when torch allows it.
    if dtype == torch.float32 and not torch.backends.cuda.matmul.allow_tf32:
        return "ieee"
    return "tf32"


def _check(a, b, bias, activation, residual) -> None:
    if activation not in ACTIVATIONS:
        raise RuntimeCallError(f"matmul epilogue activation {activation!r}: expected one of {ACTIVATIONS}")
    if a.dim() != 2 or b.dim() != 2 or a.shape[1] != b.shape[0]:
        raise RuntimeCallError(f"matmul of shapes {list(a.shape)} and {list(b.shape)}")
    if bias is not None and tuple(bias.shape) != (b.shape[1],):
        raise RuntimeCallError(f"matmul bias of shape {list(bias.shape)} for {b.shape[1]} columns")
    if residual is not None and tuple(residual.shape) != (a.shape[0], b.shape[1]):
        raise RuntimeCallError(f"matmul residual of shape {list(residual.shape)}")


def matmul_epilogue(a, b, bias=None, activation="none", residual=None, config=CONFIGS[0]):
    """`activation(a @ b + bias) + residual` in one Triton kernel (float32 accumulation)."""
    _check(a, b, bias, activation, residual)
    (m, k), n = a.shape, b.shape[1]
    c = torch.empty((m, n), dtype=a.dtype, device=a.device)
    block_m, block_n, block_k, warps, stages = config
    grid = (triton.cdiv(m, block_m) * triton.cdiv(n, block_n),)
    r = residual if residual is not None else c
    _template_kernel()[grid](
        a, b, c, bias if bias is not None else c, r, m, n, k,
        a.stride(0), a.stride(1), b.stride(0), b.stride(1),
        c.stride(0), c.stride(1), r.stride(0), r.stride(1),
        HAS_BIAS=bias is not None, ACTIVATION=activation, HAS_RESIDUAL=residual is not None,
        PRECISION=_precision(a.dtype), BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k, GROUP_M=8,
        num_warps=warps, num_stages=stages,
    )  # fmt: skip
    return c


def eager_linear(a, b, bias=None, activation="none", residual=None):
    """The same computation with torch's matmul and eager ops: the reference and the baseline."""
    out = torch.mm(a, b)
    if bias is not None:
        out = out + bias
    if activation == "relu":
        out = torch.relu(out)
    elif activation in ("gelu", "gelu_tanh"):
        out = torch.nn.functional.gelu(out, approximate="tanh" if activation == "gelu_tanh" else "none")
    elif activation == "silu":
        out = torch.nn.functional.silu(out)
    return out + residual if residual is not None else out


_WINNERS: dict[str, int] = {}  # key -> -1 for torch, else an index into CONFIGS
STATS = {"tuned": 0, "template_wins": 0, "torch_wins": 0}


def _time_ms(fn, repeat: int = 10) -> float:
    fn()  # compile / warm up
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(repeat):
        fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / repeat


def tuned_linear(a, b, bias=None, activation="none", residual=None):
    """`eager_linear`'s result from whichever of torch and the template configs is fastest here."""
    _check(a, b, bias, activation, residual)
    if a.device.type != "cuda":
        return eager_linear(a, b, bias, activation, residual)
    key = json.dumps(
        ["mm", list(a.shape), list(b.shape), a.stride(), b.stride(), str(a.dtype), bias is not None,
         activation, residual is not None, torch.cuda.get_device_name(a.device), _precision(a.dtype)]
    )  # fmt: skip
    winner = _WINNERS.get(key)
    if winner is None:
        winner = _read_choices().get(key)
    if winner is None:
        STATS["tuned"] += 1
        args = (a, b, bias, activation, residual)
        times = {-1: _time_ms(lambda: eager_linear(*args))}
        for index, config in enumerate(CONFIGS):
            try:
                times[index] = _time_ms(lambda config=config: matmul_epilogue(*args, config=config))
            except Exception:  # out of shared memory or registers for this config
                times[index] = float("inf")
        winner = min(times, key=times.__getitem__)
        STATS["template_wins" if winner >= 0 else "torch_wins"] += 1
        _remember(key, winner)
    _WINNERS[key] = winner
    if winner < 0:
        return eager_linear(a, b, bias, activation, residual)
    return matmul_epilogue(a, b, bias, activation, residual, config=CONFIGS[winner])


def tuned_matmul(a, b):
    """`torch.mm(a, b)` by the fastest of torch and the template, per shape (no epilogue)."""
    if a.dim() != 2 or b.dim() != 2 or a.dtype not in (torch.float32, torch.float16, torch.bfloat16):
        return torch.mm(a, b)
    return tuned_linear(a, b)
