"""Log artifacts: set_logs in its three spellings, perf from the compile events, the inductor loggers,
and TORCHSMITH_LOGS in a fresh process."""

import logging
import os
import subprocess
import sys

import pytest
import torch

import torchsmith
from torchsmith.ir import events
from torchsmith.logs import ARTIFACTS


def test_every_issue_artifact_exists():
    wanted = {"graph", "graph_breaks", "guards", "recompiles", "fusion", "output_code", "perf"}
    assert wanted <= set(ARTIFACTS)
    assert "torchsmith.inductor.fusion" in ARTIFACTS["fusion"]
    assert "torchsmith.inductor.output_code" in ARTIFACTS["output_code"]


def test_perf_logs_compile_time_per_stage_step(capsys):
    torchsmith.set_logs("perf")
    w = torch.randn(3, requires_grad=True)
    torchsmith.compile(lambda x: (x * w).sin().sum(), backend="aot_eager")(torch.randn(3))
    err = capsys.readouterr().err
    steps = ("capture capture", "autograd_aot trace", "autograd_aot functionalize", "autograd_aot partition")
    for step in steps:
        assert f"[torchsmith perf] {step}: " in err
    assert " s\n" in err


def test_set_logs_replaces_and_turns_off(capsys):
    torchsmith.set_logs(graph=True, perf=True)
    torchsmith.set_logs(["graph_breaks"])  # graph and perf are off again
    torchsmith.compile(lambda x: x * 3, backend="eager")(torch.ones(1))
    assert "[torchsmith" not in capsys.readouterr().err
    assert logging.getLogger("torchsmith.capture.graph").level == logging.NOTSET
    torchsmith.set_logs()
    assert not logging.getLogger("torchsmith.capture.graph_breaks").handlers


def test_fusion_and_output_code_enable_the_inductor_loggers():
    torchsmith.set_logs("fusion,output_code")
    assert logging.getLogger("torchsmith.inductor.fusion").isEnabledFor(logging.INFO)
    assert logging.getLogger("torchsmith.inductor.output_code").isEnabledFor(logging.INFO)
    assert logging.getLogger("torchsmith.capture.output_code").isEnabledFor(logging.INFO)
    torchsmith.set_logs()
    assert not logging.getLogger("torchsmith.inductor.fusion").isEnabledFor(logging.INFO)


def test_unknown_artifact_lists_the_known_ones():
    with pytest.raises(torchsmith.InvalidOptionError, match="unknown log artifact 'grpah'; known: fallback"):
        torchsmith.set_logs("graph,grpah")


def test_perf_subscription_is_removed_when_perf_is_off():
    torchsmith.set_logs("perf")
    torchsmith.set_logs("graph")
    from torchsmith.logs import _perf_event

    assert _perf_event not in events._SUBSCRIBERS


def test_environment_variable_turns_logs_on_in_a_new_process():
    env = dict(os.environ, TORCHSMITH_LOGS="graph,perf")
    code = "import torch, torchsmith; torchsmith.compile(lambda x: x.cos(), backend='eager')(torch.ones(2))"
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stderr
    assert "[torchsmith graph] captured graph:" in result.stderr and "torch.Tensor.cos" in result.stderr
    assert "[torchsmith perf] capture capture:" in result.stderr
