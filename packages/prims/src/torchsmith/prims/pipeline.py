"""The prims stage as one pipeline: an ATen graph in, a prims graph out.

    >>> print(prims_pipeline(fuse=True))
    prims pipeline:
      decompose       -> prims graph: aten ops as prims, kept ops whole
      fuse_attention  -> prims graph, softmax attention as one op
    >>> graph = prims_pipeline(on_missing="keep").run(aten_graph)   # doctest: +SKIP

`decompose(graph, ...)` alone is the first step run on its own; `fuse_attention` the second.
"""

from torchsmith.ir.passes import Pipeline
from torchsmith.prims.decompose import decompose_step
from torchsmith.prims.fuse_attention import fuse_attention


def prims_pipeline(keep=frozenset(), *, on_missing: str = "error", force=frozenset(), philox: bool = False,
                   fuse: bool = False) -> Pipeline:
    """The steps of the prims stage with `decompose`'s options; `fuse` adds `fuse_attention`
    (softmax attention chains as one library op, for a backend that keeps it)."""
    steps = [decompose_step(keep, on_missing=on_missing, force=force, philox=philox)]
    if fuse:
        steps.append(fuse_attention.step)
    return Pipeline("prims", tuple(steps))
