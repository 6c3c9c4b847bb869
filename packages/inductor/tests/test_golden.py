"""Golden text of the inductor: each `golden/<case>.json` (a prims graph, written by
`python -m torchsmith.prims decompose ... --out`) compiled by `python -m torchsmith.inductor compile`
prints its loop IR and C++ kernels exactly as in `golden/<case>.txt`, followed by the fusion
decisions of that compilation and the Triton kernels the GPU path generates for the same graph
(source only: no GPU needed). golden/README.md says what is left out and why.

Regenerate after an intended change:
`TORCHSMITH_UPDATE_GOLDEN=1 pytest packages/inductor/tests/test_golden.py`.
"""

import os
import pathlib
import re

import pytest
import torch

# Triton source is generated the same way on either device; without a GPU, triton's interpreter
# stands in for the loader. It must be chosen before triton is first imported.
if not torch.cuda.is_available():
    os.environ["TRITON_INTERPRET"] = "1"

import torchsmith.inductor as inductor  # noqa: E402
import torchsmith.prims  # noqa: E402,F401  (registers the prims ops the inputs use)
from torchsmith.inductor.__main__ import main  # noqa: E402
from torchsmith.ir import example_inputs, format_graph, load, parse_graph  # noqa: E402
from torchsmith.ir.golden import check_golden  # noqa: E402

GOLDEN = pathlib.Path(__file__).parent / "golden"


@pytest.fixture(autouse=True)
def avx2_lanes(monkeypatch):
    """Reduction lanes as on an AVX2 machine (8 floats): the golden text is the same on every machine."""
    import torchsmith.inductor.cpp.build as build

    monkeypatch.setattr(build, "native_vector_bytes", lambda: 32)

CASES = sorted(p.stem for p in GOLDEN.glob("*.json"))
CPP_KERNEL = "// @torchsmith-kernel"
TRITON_KERNEL = "@triton.jit\ndef kernel"


def kernels_only(source: str, marker: str) -> str:
    """The generated source from its first kernel on: the prelude before it (helper functions, math
    declarations, import lines) depends on the machine's libm and the package layout, not the graph."""
    start = source.find(marker)
    assert start >= 0, f"no {marker!r} in the generated source"
    return source[start:].rstrip("\n")


def one_row_loop_form(source: str) -> str:
    """Triton's loop over a long row written one way: the generator emits `for roffset in
    range(0, N, RBLOCK)` on a GPU and a `while` loop under the interpreter (triton_reduction's
    `loop_header`); both become `for roffset in range(0, rnumel, RBLOCK):`."""
    loop = "for roffset in range(0, rnumel, RBLOCK):"
    source = re.sub(r"^( *)roffset = 0\n\1while roffset < rnumel:$", r"\1" + loop, source, flags=re.MULTILINE)
    source = re.sub(r"^ *roffset \+= RBLOCK\n", "", source, flags=re.MULTILINE)
    return re.sub(r"for roffset in range\(0, [^,]+, RBLOCK\):", loop, source)


def for_triton(graph):
    """`graph` where Triton runs it: as is without a GPU (the interpreter takes cpu tensors), else
    with every tensor on cuda, since the Triton path compiles cuda graphs only there."""
    if not torch.cuda.is_available():
        return graph
    text = re.sub(r"(?<= )cpu\b", "cuda", format_graph(graph)).replace('device="cpu"', 'device="cuda"')
    return parse_graph(text)


def golden_text(capsys, case: str) -> str:
    path = GOLDEN / f"{case}.json"
    capsys.readouterr()
    status = main(["compile", str(path)])
    out = capsys.readouterr()
    assert status == 0, out.err
    loops, cpp_header, cpp = out.out.partition("\n# C++ of ")
    assert cpp_header, out.out
    graph = load(path)
    inputs = [x.detach() if isinstance(x, torch.Tensor) else x for x in example_inputs(graph, seed=0)]
    # the same compilation again: a compile-cache hit that reports the decisions the command made
    decisions = inductor.compile_graph(graph, inputs).decisions
    triton = inductor.compile_graph_triton(for_triton(graph))
    return "\n".join([
        loops.rstrip("\n"),
        "",
        f"# C++ kernels of {graph.name}",
        kernels_only(cpp, CPP_KERNEL),
        "",
        f"# fusion decisions of {graph.name}",
        *(str(d) for d in decisions),
        "",
        f"# Triton kernels of {graph.name}",
        one_row_loop_form(kernels_only(triton.source, TRITON_KERNEL)),
    ]) + "\n"


def test_every_case_has_its_golden_text():
    assert len(CASES) >= 6
    assert {p.stem for p in GOLDEN.glob("*.txt")} == set(CASES)


@pytest.mark.parametrize("case", CASES)
def test_golden(case, capsys):
    check_golden(GOLDEN / f"{case}.txt", golden_text(capsys, case))


def test_text_is_the_same_on_a_second_run(capsys):
    assert golden_text(capsys, "reductions") == golden_text(capsys, "reductions")
