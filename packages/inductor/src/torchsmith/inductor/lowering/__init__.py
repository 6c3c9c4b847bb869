"""prims graph -> loop IR: `lower` and the lowerings it dispatches to (one module per op family),
view remapping (`view_refs`), channels-last layout choice, and the loop-IR rewrites that follow
lowering (`inline`, `sink`)."""
