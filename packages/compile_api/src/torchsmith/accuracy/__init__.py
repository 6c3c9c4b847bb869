"""The accuracy check behind `torchsmith.compile(fn, options={"check": True})` (or `TORCHSMITH_CHECK=1`).

Each stage's output graph runs on the call's real inputs and is compared with the previous stage's:

    capture's graph (torch.*)      vs the original program run eagerly  (function_check.py)
    autograd_aot's graph (aten.*)  vs capture's graph                    (graph_check.py, levels.py)
    prims' graph (prims.*)         vs autograd_aot's graph
    inductor's compiled code       vs prims' graph

Forward outputs, inputs mutated by the call and, when the call trains, the gradients (from seeded
tangents) are compared within the tolerance of their dtype (compare.py). On a mismatch the check
finds the first node whose values differ (localize.py), writes a repro folder (repro_folder.py,
replay_script.py), warns with `torchsmith.AccuracyWarning`, and the call uses the previous stage's result.
"""
