"""max-autotune: a matmul's pointwise consumer fused into the Triton matmul template as its
epilogue (bias, activation, residual: whatever the graph computes on the product), chosen per
shape against the unfused pair (torch.mm, then the consumer's own kernel) by timing; faster wins.

A pair qualifies when `mm` (an extern `prims.mm` of static shape, row-major) is read by exactly one
buffer, a pointwise `[m, n]` buffer alone in its kernel group that reads the product only at its
own element. The epilogue code is the consumer's expression written by the same body writer as
every other kernel, with the product's load replaced by the accumulator.
"""

import json

import sympy
import torch

from torchsmith.inductor.loop_ir.index_math import split_index
from torchsmith.inductor.loop_ir.program import (
    ComputedBuffer,
    ExternCall,
    Load,
    LoopProgram,
    Op,
    Pointwise,
    index_vars,
    loads,
)
from torchsmith.inductor.runtime.externs import tensor_of
from torchsmith.inductor.runtime.triton_launch import _read_choices, _remember, interpreting, load_module
from torchsmith.inductor.triton.codegen import source_hash
from torchsmith.inductor.triton.group import ReductionResult
from torchsmith.inductor.triton.index import Axis, kernel_symbol, triton_dtype
from torchsmith.inductor.triton.matmul import CONFIGS, MATMUL_TEMPLATE, _precision
from torchsmith.inductor.triton.writer import TritonBodyWriter, in_kernel_space
from torchsmith.ir.symbolic import evaluate

ALWAYS_FUSE = False  # tests under the interpreter (where nothing is timed) force the fused kernel


def _replace_loads(expr, name: str, dtype):
    if isinstance(expr, Load):
        return ReductionResult(name, dtype) if expr.buffer == name else expr
    if isinstance(expr, Op):
        return Op(expr.op, tuple(_replace_loads(a, name, dtype) for a in expr.args), expr.dtype)
    return expr


def find_pairs(program: LoopProgram, groups) -> dict[str, ExternCall]:
    """`{consumer name: mm call}` for every matmul whose only reader can be its epilogue."""
    alone = {g[0].name for g in groups if len(g) == 1}
    readers: dict[str, list] = {}
    for b in program.buffers:
        reads = (
            [a.buffer for a in b.args]
            if isinstance(b, ExternCall)
            else [ld.buffer for ld in loads(b.body.value)]
        )
        for r in set(reads):
            readers.setdefault(r, []).append(b)
    outputs = {v.buffer for v in program.outputs}
    pairs = {}
    for mm in program.buffers:
        if not isinstance(mm, ExternCall) or mm.kernel != "prims.mm" or mm.params or mm.name in outputs:
            continue
        users = readers.get(mm.name, [])
        if len(users) != 1 or not isinstance(users[0], ComputedBuffer):
            continue
        consumer = users[0]
        shape = mm.layout.shape
        static = all(sympy.sympify(d).is_Integer for d in (*shape, *mm.args[0].shape))
        if not static or consumer.name not in alone or not isinstance(consumer.body, Pointwise):
            continue
        if len(consumer.body.ranges) != 2 or any(
            sympy.sympify(a - b) != 0 for a, b in zip(consumer.body.ranges, shape)
        ):
            continue
        i0, i1 = index_vars(2)
        ranges = {i0: shape[0], i1: shape[1]}
        own = all(
            split_index(ld.index, shape, mm.layout.strides, ranges) == (i0, i1)
            for ld in loads(consumer.body.value)
            if ld.buffer == mm.name
        )
        if own:
            pairs[consumer.name] = mm
    return pairs


def epilogue_source(
    mm: ExternCall, consumer: ComputedBuffer, program: LoopProgram
) -> tuple[str, tuple[str, ...]]:
    """The template's kernel with `consumer` as its epilogue, and the buffers the epilogue reads."""
    value = _replace_loads(consumer.body.value, mm.name, torch.float32)
    reads = tuple(dict.fromkeys(ld.buffer for ld in loads(value)))
    pointer_of = {n: f"in_{k}" for k, n in enumerate(reads)}
    i0, i1 = index_vars(2)
    m, n = mm.layout.shape
    axes = (Axis(kernel_symbol("yindex"), (i0,), (m,)), Axis(kernel_symbol("xindex"), (i1,), (n,)))
    lines: list[str] = []
    # The product is rounded to its dtype first, as eager's stored mm result is.
    rounded = (
        "acc"
        if mm.layout.dtype == torch.float32
        else f"acc.to({triton_dtype(mm.layout.dtype)}).to(tl.float32)"
    )
    writer = TritonBodyWriter(
        pointer_of, lambda used: "mask", "0 * (yindex + xindex)", 2, lines, "    ", [0], {mm.name: "product"}
    )
    result = writer.value(in_kernel_space(value, axes))
    strides = consumer.layout.strides
    store = in_kernel_space(
        Load(consumer.name, i0 * strides[0] + i1 * strides[1], consumer.layout.dtype), axes
    ).index
    writer.store("c", store, result, consumer.layout.dtype, "mask")
    head, tail = MATMUL_TEMPLATE.split("{step}")
    head = head.replace(
        "a, b, c, bias, residual, M, N, K,",
        f"a, b, c, {''.join(p + ', ' for p in pointer_of.values())}M, N, K,",
    )
    head = head.replace("stride_cm, stride_cn, stride_rm, stride_rn,\n", "\n")
    head = head.replace("HAS_BIAS: tl.constexpr, ACTIVATION: tl.constexpr, HAS_RESIDUAL: tl.constexpr,\n", "")
    epilogue = [
        "{step}    yindex = rm",
        "    xindex = rn",
        "    mask = (rm < M) & (rn < N)",
        f"    product = {rounded}",
        *lines,
    ]
    return head + "\n".join(epilogue) + "\n", reads


class FusedEpilogue:
    """At the consumer's step: the product and the consumer together, by the faster of the
    template with this epilogue and the unfused pair (chosen on first use per process and disk)."""

    def __init__(self, mm: ExternCall, consumer: ComputedBuffer, program: LoopProgram):
        self.mm, self.consumer = mm, consumer
        template, self.reads = epilogue_source(mm, consumer, program)
        self.template = template
        self.choice: int | None = None

    def _kernel(self):
        if interpreting():
            loop, step = "    k0 = 0\n    while k0 < K:", "        k0 += BLOCK_K\n"
        else:
            loop, step = "    for k0 in range(0, K, BLOCK_K):", ""
        source = self.template.replace("{loop}", loop).replace("{step}", step)
        return load_module(source, source_hash(source)).ts_matmul

    def fused(self, a, b, extra, out, config) -> None:
        (m, k), n = a.shape, b.shape[1]
        block_m, block_n, block_k, warps, stages = config
        grid = (-(-m // block_m) * -(-n // block_n),)
        self._kernel()[grid](
            a, b, out, *extra, m, n, k, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
            PRECISION=_precision(a.dtype), BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k, GROUP_M=8,
            num_warps=warps, num_stages=stages,
        )  # fmt: skip

    def run(self, tensors, bindings, launcher, symbols, device) -> None:
        """Define the consumer's buffer in `tensors` (and the product's, when unfused)."""
        a, b = (tensor_of(tensors, v, bindings) for v in self.mm.args)
        layout = self.consumer.layout
        shape = [evaluate(d, bindings) for d in layout.shape]
        strides = [evaluate(d, bindings) for d in layout.strides]
        out = torch.empty_strided(shape, strides, dtype=layout.dtype, device=device)
        extra = [tensors[r] for r in self.reads]

        def unfused():
            tensors[self.mm.name] = torch.mm(a, b)
            tensors[self.consumer.name] = out
            spec = launcher.spec
            launcher.launch([tensors[nm] for nm in spec.writes + spec.reads], symbols, bindings)

        if self.choice is None:
            self.choice = self._choose(a, b, extra, out, unfused)
        if self.choice < 0:
            unfused()
        else:
            self.fused(a, b, extra, out, CONFIGS[self.choice])
            tensors[self.consumer.name] = out

    def _choose(self, a, b, extra, out, unfused) -> int:
        if a.device.type != "cuda":
            return 0 if ALWAYS_FUSE else -1
        key = json.dumps(["mm-epilogue", source_hash(self.template), list(a.shape), list(b.shape),
                          torch.cuda.get_device_name(a.device), _precision(a.dtype)])  # fmt: skip
        known = _read_choices().get(key)
        if known is not None:
            return known
        from torchsmith.inductor.triton.matmul import _time_ms

        times = {-1: _time_ms(unfused)}
        for index, config in enumerate(CONFIGS):
            try:
                times[index] = _time_ms(lambda config=config: self.fused(a, b, extra, out, config))
            except Exception:  # a config this GPU cannot run
                times[index] = float("inf")
        choice = min(times, key=times.__getitem__)
        _remember(key, choice)
        return choice
