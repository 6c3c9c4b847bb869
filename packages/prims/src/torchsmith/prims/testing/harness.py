"""Checking one decomposition on one sample against eager torch.ops.aten (the numerics rule of
`assert_decomposition_close`)."""

import warnings

import torch

from torchsmith.ir import interpret, lookup_op
from torchsmith.ir.interpreter import bind_symbols
from torchsmith.ir.symbolic import evaluate
from torchsmith.ir.verifier import verify
from torchsmith.prims.decompose import KEPT_WHOLE, decompose
from torchsmith.prims.testing.compare import assert_close, assert_decomposition_close
from torchsmith.prims.testing.make import Sample, one_node_graph

# Ops whose results are unspecified (only shapes and dtypes compare).
UNSPECIFIED = {
    "aten.empty_like.default",
    "aten.new_empty.default",
    "aten.empty.memory_format",
    "aten.empty_strided.default",
}


def _upcast(arg):
    if isinstance(arg, torch.Tensor) and arg.dtype.is_floating_point:
        return arg.double()
    if isinstance(arg, torch.dtype) and arg.is_floating_point:
        return torch.float64
    if isinstance(arg, (list, tuple)):
        return type(arg)(_upcast(a) for a in arg)
    if isinstance(arg, dict):
        return {k: _upcast(v) for k, v in arg.items()}
    return arg


def _float64_reference(op, sample, results):
    """The op run on float64 copies of the float inputs, when that keeps result dtypes float64."""
    try:
        reference = op(*_upcast(sample.args), **_upcast(sample.kwargs))
    except RuntimeError:
        return None
    reference = list(reference) if isinstance(reference, (list, tuple)) else [reference]
    return reference if len(reference) == len(results) else None


def check_decomposition(name: str, sample: Sample, *, symbolic: bool = False) -> None:
    """Decompose a one-node `name` graph on `sample`, run it, and compare with eager; `symbolic`
    gives the graph symbolic sizes (see `one_node_graph`). An op kept whole by default but with a
    decomposition is forced, and compared with 10x the usual tolerance instead of the float64 rule
    (why it is kept whole by default)."""
    what = f"{name}{sample!r}" + (" symbolic" if symbolic else "")
    graph, inputs = one_node_graph(name, sample, symbolic=symbolic)
    forced = name in KEPT_WHOLE
    decomposed = verify(decompose(graph, force={name} if forced else ()))
    assert decomposed.stamps[-1].pass_name == "decompose"
    kept = [n.op for n in decomposed.nodes if n.dialect == "aten"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        # A kept op's declared types come from its meta function, which can disagree with its CPU
        # kernel (native_layer_norm in bfloat16): only check types of fully decomposed graphs.
        actual = interpret(decomposed, *inputs, check_types=not kept)
        eager = interpret(graph, *inputs)
    if kept:
        assert kept == [name], f"{what}: unexpected aten ops left: {kept}"
        return
    references = _float64_reference(lookup_op(name).eager, sample, eager)
    bindings = bind_symbols(graph, inputs)
    for i, (got, expected) in enumerate(zip(actual, eager)):
        if expected is None:  # an undefined tensor (e.g. attention weights not asked for)
            assert got is None or got.numel() == 0, f"{what} output {i}: eager gives none, got {got!r}"
            continue
        declared = tuple(evaluate(d, bindings) for d in graph.outputs[i].type.shape)
        if tuple(expected.shape) != declared:
            continue  # eager's kernel disagrees with the op's meta function, which the IR follows
        if name in UNSPECIFIED:
            assert got.shape == expected.shape and got.dtype == expected.dtype, what
            continue
        if forced:
            assert_close(got, expected, what=f"{what} output {i}", scale=10)
            continue
        reference = references[i] if references is not None else None
        if reference is not None and not reference.dtype.is_floating_point:
            reference = None
        assert_decomposition_close(got, expected, reference, what=f"{what} output {i}")
