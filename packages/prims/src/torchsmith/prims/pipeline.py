"""The prims stage as one pipeline: an ATen graph in, a prims graph out.

    >>> print(prims_pipeline(fuse=True))
    prims pipeline:
      decompose              -> prims graph: aten ops as prims, kept ops whole
      fuse_attention         -> prims graph, softmax attention as one op
      common_subexpressions  -> prims graph, each pure value computed once
      attention_forms        -> prims graph, causal masks and grouped heads in attention
    >>> graph = prims_pipeline(on_missing="keep").run(aten_graph)   # doctest: +SKIP

`decompose(graph, ...)` alone is the first step run on its own; `fuse_attention` the second;
`common_subexpressions` merges what the per-node decompositions compute more than once (a mask
each attention call converts), after fuse_attention, so the chains it matches are as decomposed;
`attention_forms` then gives attention a constant causal mask as `is_causal` and grouped key/value
heads without their repeated copies.
"""

from torchsmith.ir.passes import Pipeline
from torchsmith.prims.attention_forms import attention_forms
from torchsmith.prims.common_subexpressions import common_subexpressions
from torchsmith.prims.decompose import decompose_step
from torchsmith.prims.fuse_attention import fuse_attention


def prims_pipeline(keep=frozenset(), *, on_missing: str = "error", force=frozenset(), philox: bool = False,
                   fuse: bool = False) -> Pipeline:
    """The steps of the prims stage with `decompose`'s options; `fuse` adds `fuse_attention`
    (softmax attention chains as one library op, for a backend that keeps it)."""
    steps = [decompose_step(keep, on_missing=on_missing, force=force, philox=philox)]
    if fuse:
        steps.append(fuse_attention.step)
    steps += [common_subexpressions.step, attention_forms.step]
    return Pipeline("prims", tuple(steps))
