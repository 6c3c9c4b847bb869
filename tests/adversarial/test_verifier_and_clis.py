"""The verifier refuses impossible types (negative or int64-overflowing sizes and strides, unknown
devices, outputs the op does not produce) and the stage command lines report every bad input in one
line with exit status 2, before allocating anything."""

import pytest
from adversarial_corpus import outcome, record
from test_op_names import stage_mains

from torchsmith.ir import ExecutionSetupError, VerifyError, dumps, example_inputs, parse_graph, verify

GRAPH = """graph f(%x: f32[4, 8] cpu):
  %y: f32[4, 8] cpu = aten.relu.default(%x)
  %z: f32[8, 4] cpu = aten.t.default(%y)
  return (%z)
"""

BAD_TYPES = {
    "negative size": ("f32[4, 8] cpu", "f32[-4, 8] cpu"),
    "negative stride": ("%x: f32[4, 8] cpu", "%x: f32[4, 8]{-8, 1} cpu"),
    "size 2**63": ("f32[4, 8] cpu", f"f32[{2**63}, 8] cpu"),
    "stride 2**64": ("%x: f32[4, 8] cpu", f"%x: f32[4, 8]{{{2**64}, 1}} cpu"),
    "numel 2**63": ("f32[4, 8] cpu", f"f32[{2**40}, {2**40}] cpu"),
    "device cuda:99": ("cpu", "cuda:99"),
    "device kind": ("cpu", "tpu"),
    "declared shape": ("%z: f32[8, 4] cpu", "%z: f32[4, 8] cpu"),
    "declared dtype": ("%y: f32[4, 8] cpu", "%y: f64[4, 8] cpu"),
    "declared rank": ("%z: f32[8, 4] cpu", "%z: f32[32] cpu"),
}


@pytest.mark.parametrize("case", sorted(BAD_TYPES))
def test_the_verifier_refuses_impossible_types(case):
    old, new = BAD_TYPES[case]
    text = GRAPH.replace(old, new)
    result = outcome("verifier: impossible types", lambda: verify(parse_graph(text)))
    assert result == "clear", case
    with pytest.raises(VerifyError) as info:
        verify(parse_graph(text))
    assert "node" in str(info.value) or "graph input" in str(info.value)


def test_devices_are_checked_when_running_not_when_verifying():
    graph = verify(parse_graph(GRAPH.replace("cpu", "cuda:7")))  # a file made on an 8-GPU machine
    import torch

    if torch.cuda.device_count() <= 7:
        with pytest.raises(ExecutionSetupError, match="cuda:7"):
            example_inputs(graph)


def test_example_inputs_refuse_huge_allocations(monkeypatch):
    big = GRAPH.replace("f32[4, 8]", "f32[100000, 100000]").replace("f32[8, 4]", "f32[100000, 100000]")
    graph = verify(parse_graph(big))
    with pytest.raises(ExecutionSetupError, match="bytes"):
        example_inputs(graph)
    monkeypatch.setenv("TORCHSMITH_MAX_EXAMPLE_BYTES", "64")
    with pytest.raises(ExecutionSetupError):
        example_inputs(parse_graph(GRAPH))


CLI_CASES = ["negative size", "size 2**63", "device cuda:99", "declared shape", "not json", "huge input",
             "missing file"]


@pytest.mark.parametrize("case", CLI_CASES)
def test_stage_command_lines_print_one_line_and_exit_2(case, tmp_path, capsys):
    path = tmp_path / "bad.json"
    if case == "not json":
        path.write_text("{" * 100_000)
    elif case == "huge input":
        path.write_text(dumps(parse_graph(GRAPH.replace("f32[4, 8]", "f32[200000, 80000]")
                                           .replace("f32[8, 4]", "f32[80000, 200000]"))))
    elif case != "missing file":
        old, new = BAD_TYPES[case]
        path.write_text(dumps(parse_graph(GRAPH.replace(old, new))))
    for main, argv in stage_mains(str(path)):
        if case == "huge input" and argv[0] == "decompose":
            continue  # decomposing allocates nothing: a large graph is fine there
        status = main(argv)
        err = capsys.readouterr().err.strip().splitlines()
        clear = status == 2 and len(err) == 1 and err[0].startswith("error: ")
        record("stage CLIs: bad inputs", "clear" if clear else "crash")
        assert clear, (case, argv, status, err[-3:])
