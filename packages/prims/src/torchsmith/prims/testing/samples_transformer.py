"""ATen samples for the fused transformer fast paths (_transformer_encoder_layer_fwd,
_native_multi_head_attention): post- and pre-norm, gelu and relu, each mask type the fast path
takes, as bool and as float (nonzero = forbidden), including a sequence whose keys are all masked
(eager gives nan there)."""

import torch

from torchsmith.prims.testing.make import Sample
from torchsmith.prims.testing.sample_helpers import B8, F32, F64
from torchsmith.prims.testing.sample_helpers import t as _t

BATCH, LENGTH, EMBED, HEADS, FFN = 2, 5, 8, 2, 12


def _weights(dtype, seed: int = 10) -> list[torch.Tensor]:
    """qkv weight/bias, out-projection weight/bias (scaled so softmax is not saturated)."""
    d = EMBED
    shapes = [(3 * d, d), (3 * d,), (d, d), (d,)]
    return [_t(s, dtype, seed + i, domain=(-0.5, 0.5)) for i, s in enumerate(shapes)]


def _ffn_and_norms(dtype, seed: int = 20) -> list[torch.Tensor]:
    d = EMBED
    norms = [_t((d,), dtype, seed, domain=(0.5, 1.5)), _t((d,), dtype, seed + 1, domain=(-0.2, 0.2))]
    norms += [_t((d,), dtype, seed + 2, domain=(0.5, 1.5)), _t((d,), dtype, seed + 3, domain=(-0.2, 0.2))]
    ffn = [(FFN, d), (FFN,), (d, FFN), (d,)]
    return norms + [_t(s, dtype, seed + 4 + i, domain=(-0.5, 0.5)) for i, s in enumerate(ffn)]


def _masks() -> list[tuple[torch.Tensor | None, int | None, str]]:
    padding = torch.zeros(BATCH, LENGTH, dtype=B8)
    padding[0, 3:] = True
    causal = torch.ones(LENGTH, LENGTH, dtype=B8).triu(1)
    general = _t((BATCH, HEADS, LENGTH, LENGTH), B8, 3) & ~torch.eye(LENGTH, dtype=B8)
    as_float = lambda m: torch.zeros(m.shape).masked_fill(m, float("-inf"))
    sparse = _t((BATCH, LENGTH), F32, 4) * (_t((BATCH, LENGTH), F32, 5) > 1)  # nonzero = forbidden
    all_masked = padding.clone()
    all_masked[1] = True
    return [
        (None, None, "no mask"),
        (padding, 1, "bool key padding"),
        (as_float(padding), 1, "float 0/-inf key padding"),
        (sparse, 1, "float key padding, nonzero forbids"),
        (causal, 0, "bool (L, L)"),
        (general, 2, "bool (B, H, L, L)"),
        (as_float(general), 2, "float (B, H, L, L)"),
        (all_masked, 1, "a sequence with every key masked (nan)"),
    ]


def encoder_layer_samples() -> list[Sample]:
    samples = []
    for norm_first in (False, True):
        for use_gelu in (False, True):
            for mask, mask_type, note in _masks():
                if (norm_first or use_gelu) and mask_type not in (None, 1):
                    continue  # the mask path is shared; one activation/norm order covers it
                args = (_t((BATCH, LENGTH, EMBED), F32, 1), EMBED, HEADS, *_weights(F32))
                args += (use_gelu, norm_first, 1e-5, *_ffn_and_norms(F32), mask, mask_type)
                samples.append(Sample(args, note=f"norm_first={norm_first} gelu={use_gelu} {note}"))
    args = (_t((BATCH, LENGTH, EMBED), F64, 1), EMBED, HEADS, *_weights(F64), True, False, 1e-6)
    samples.append(Sample(args + (*_ffn_and_norms(F64), None, None), note="float64"))
    return samples


def multi_head_attention_samples() -> list[Sample]:
    x = _t((BATCH, LENGTH, EMBED), F32, 1)
    samples = []
    for mask, mask_type, note in _masks()[:3] + _masks()[-1:]:
        args = (x, x, x, EMBED, HEADS, *_weights(F32), mask, False, True, mask_type)
        samples.append(Sample(args, note=f"self-attention, {note}"))
    key, value = _t((BATCH, LENGTH, EMBED), F32, 2), _t((BATCH, LENGTH, EMBED), F32, 3)
    args = (x, key, value, EMBED, HEADS, *_weights(F32), _masks()[1][0], False, True, 1)
    samples.append(Sample(args, note="three tensors (split in-projection), key padding"))
    args = (x, x, x, EMBED, HEADS, *_weights(F32), None, True, True, None)
    samples.append(Sample(args, note="need_weights (kept whole)"))
    return samples


TRANSFORMER = {
    "aten._transformer_encoder_layer_fwd.default": encoder_layer_samples,
    "aten._native_multi_head_attention.default": multi_head_attention_samples,
}
