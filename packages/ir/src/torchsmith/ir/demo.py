"""A tour of torchsmith.ir in one screen: `python -m torchsmith.ir.demo`.

Builds a two-layer MLP at the aten level with a symbolic batch size, prints its text form,
verifies it, round-trips it through JSON, text and torch.fx, runs it with the reference interpreter
at two batch sizes and compares the results with eager PyTorch.
"""

import sys

import torch
import torch.nn.functional as F

from torchsmith.ir import (
    Graph,
    GraphBuilder,
    IRError,
    format_graph,
    from_fx,
    interpret,
    parse_graph,
    symbol,
    to_fx,
    verify,
)
from torchsmith.ir.serialize import dumps, loads

IN, HIDDEN, OUT = 64, 128, 10


def build_mlp() -> Graph:
    """softmax(gelu(x @ w1.T + b1) @ w2.T + b2) over a batch of s0 rows, in aten ops."""
    s0 = symbol("s0")
    b = GraphBuilder("mlp")
    x = b.input("x", f"f32[s0, {IN}] cpu")
    w1 = b.input("w1", f"f32[{HIDDEN}, {IN}] cpu")
    b1 = b.input("b1", f"f32[{HIDDEN}] cpu")
    w2 = b.input("w2", f"f32[{OUT}, {HIDDEN}] cpu")
    b2 = b.input("b2", f"f32[{OUT}] cpu")
    # Output types are written out: with a symbolic batch they cannot come from meta tensors.
    t1 = b.op("aten.t.default", w1, out_type=f"f32[{IN}, {HIDDEN}]{{1, {IN}}} cpu")
    h = b.op("aten.addmm.default", b1, x, t1, out_type=f"f32[s0, {HIDDEN}] cpu")
    a = b.op("aten.gelu.default", h, approximate="tanh", out_type=f"f32[s0, {HIDDEN}] cpu")
    t2 = b.op("aten.t.default", w2, out_type=f"f32[{HIDDEN}, {OUT}]{{1, {HIDDEN}}} cpu")
    y = b.op("aten.addmm.default", b2, a, t2, out_type=f"f32[s0, {OUT}] cpu")
    p = b.op("aten._softmax.default", y, 1, False, out_type=f"f32[s0, {OUT}] cpu")
    n = b.op("aten.sym_size.int", x, 0, out_type="sym(s0)")
    assert s0 in p.type.shape and n.type.expr == s0
    return b.build(p, n)


def eager_mlp(x, w1, b1, w2, b2):
    """The same model written the way a user would, in eager PyTorch."""
    return F.softmax(F.linear(F.gelu(F.linear(x, w1, b1), approximate="tanh"), w2, b2), dim=1), x.shape[0]


def run_demo(out=print) -> bool:
    """Run every step, reporting each through `out`; True when all of them succeeded."""
    results: list[bool] = []

    def check(ok: bool, message: str) -> None:
        results.append(ok)
        out(f"  {'ok  ' if ok else 'FAIL'} {message}")

    graph = build_mlp()
    out("torchsmith.ir demo: a two-layer MLP in aten ops, batch size symbolic (s0)\n")
    out(format_graph(graph))

    try:
        verify(graph)
        check(True, f"verify: valid IR ({len(graph.nodes)} nodes, {len(graph.inputs)} inputs)")
    except IRError as e:
        check(False, f"verify: {e}")

    document = dumps(graph)
    check(loads(document) == graph, f"JSON round trip: {len(document)} bytes, read back identical")
    check(parse_graph(format_graph(graph)) == graph, "text round trip: parsed back identical")
    gm = to_fx(graph)
    fx_nodes = len(gm.graph.nodes)
    check(from_fx(gm) == graph, f"torch.fx round trip: a GraphModule of {fx_nodes} fx nodes, back identical")

    torch.manual_seed(0)
    weights = [torch.randn(HIDDEN, IN) / 8, torch.randn(HIDDEN), torch.randn(OUT, HIDDEN) / 11]
    weights.append(torch.randn(OUT))
    for batch in (4, 7):
        x = torch.randn(batch, IN)
        probabilities, rows = interpret(graph, x, *weights, check_types=True)
        expected, expected_rows = eager_mlp(x, *weights)
        difference = (probabilities - expected).abs().max().item()
        ok = rows == expected_rows and torch.allclose(probabilities, expected, rtol=1e-5, atol=1e-6)
        fx_ok = all(torch.equal(a, b) if isinstance(a, torch.Tensor) else a == b
                    for a, b in zip(gm(x, *weights), (probabilities, rows)))
        check(ok and fx_ok, f"batch {batch}: interpreter and fx module match eager PyTorch "
              f"(max |difference| {difference:.1e}, s0 = {rows})")

    passed = all(results)
    out("\nall checks passed: the interpreter matches eager PyTorch" if passed else "\nsome checks FAILED")
    return passed


def main() -> int:
    """Entry point of `python -m torchsmith.ir.demo`; the exit status is 0 when everything matched."""
    return 0 if run_demo() else 1


if __name__ == "__main__":
    sys.exit(main())
