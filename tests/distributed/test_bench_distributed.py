"""benchmarks/bench_distributed.py: its CPU table is the committed one, `--device cuda` writes its own
NCCL table (and refuses clearly without a GPU), `--quick` and `--kind` runs write nothing, and a quick
gloo run of the eager configurations measures every round. The GPU run itself needs a GPU; everything
here runs without one."""

import argparse
import json
import pathlib
import sys

import pytest
import torch
import torch.cuda.nccl

if not torch.distributed.is_available():
    pytest.skip("torch.distributed is not available", allow_module_level=True)

BENCHMARKS = pathlib.Path(__file__).resolve().parents[2] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))

import bench_distributed as bench  # noqa: E402

GPU = "NVIDIA H100 80GB HBM3"


def fake_results(kinds=bench.KINDS) -> dict:
    rows = {kind: {"step_ms": 2.0 + i, "cpu_ms": 1.0 + i, "first_s": 3.0 * i, "rounds_ms": [2.0 + i] * 3,
                   "rounds_cpu_ms": [1.0 + i] * 3} for i, kind in enumerate(kinds)}
    gpt2 = {"DDP eager": rows["DDP eager"], "FSDP torchsmith": {"error": "RuntimeError: x"}}
    return {"mlp": rows, "gpt2": gpt2}


def test_cpu_table_is_the_committed_one():
    record = json.loads((BENCHMARKS / "results" / "distributed.json").read_text())
    args = argparse.Namespace(**record["args"])
    text = bench.table(record["results"], record["machine"], args)
    assert text == (BENCHMARKS / "results" / "distributed.md").read_text()


def test_cuda_table_says_nccl_world_size_one_and_the_gpu():
    info = bench.machine({"gpu": GPU, "cuda": "13.0", "nccl": "2.27.7", "triton": "3.6.0",
                          "transformers": "5.17.0", "load_before": 0.5, "load_after": 1.0})
    args = argparse.Namespace(device="cuda", rounds=7, steps=20, bucket_mb=1.0, no_pin=False)
    lines = bench.table(fake_results(), info, args).splitlines()
    title = "# Distributed training step: eager, torch.compile and torchsmith"
    assert lines[0] == f"{title} (NCCL, world size 1, {GPU})"
    assert "gloo" not in "\n".join(lines)
    assert "| mlp | DDP torch.compile | 3.00 | 0.67x | 0.67x | 2.00 | 0.50x | 3.0 |" in lines
    assert "| gpt2 | FSDP torchsmith | failed: RuntimeError: x | | | | | |" in lines
    assert "| gpt2 | DDP torchsmith | failed: not run | | | | | |" in lines


def test_selections_take_commas_or_repeats():
    kinds = ["--kind", "DDP eager, FSDP eager", "--kind", "FSDP torchsmith"]
    args = bench.parse_args(["--only", "mlp,gpt2", *kinds])
    assert args.only == ["mlp", "gpt2"]
    assert args.kind == ["DDP eager", "FSDP eager", "FSDP torchsmith"]
    assert (args.device, args.steps, args.rounds) == ("cpu", 5, 21)
    with pytest.raises(SystemExit):
        bench.parse_args(["--only", "mlp,bert"])


def test_cuda_without_a_gpu_is_a_clear_error(monkeypatch, capsys):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(SystemExit) as exit_info:
        bench.parse_args(["--device", "cuda"])
    assert exit_info.value.code == 2
    assert "--device cuda needs a CUDA GPU" in capsys.readouterr().err


def test_each_device_writes_its_own_files_and_quick_runs_write_none(monkeypatch, tmp_path):
    monkeypatch.setattr(bench, "RESULTS", tmp_path)
    monkeypatch.setattr(bench, "measure", lambda name, args: fake_results()[name])
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.distributed, "is_nccl_available", lambda: True)
    monkeypatch.setattr(torch.cuda.nccl, "version", lambda: (2, 27, 7))
    monkeypatch.setattr(bench, "gpu_name", lambda: GPU)
    bench.main(["--device", "cuda", "--quick"])
    bench.main(["--device", "cuda", "--kind", "DDP eager"])
    bench.main(["--quick"])
    assert list(tmp_path.iterdir()) == []
    bench.main(["--device", "cuda", "--rounds", "7"])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["distributed_cuda.json", "distributed_cuda.md"]
    record = json.loads((tmp_path / "distributed_cuda.json").read_text())
    assert record["machine"]["gpu"] == GPU and record["args"]["steps"] == 20 and record["args"]["rounds"] == 7
    assert (tmp_path / "distributed_cuda.md").read_text().startswith(
        f"# Distributed training step: eager, torch.compile and torchsmith (NCCL, world size 1, {GPU})")


def test_quick_gloo_run_of_the_eager_configurations_times_every_round():
    args = bench.parse_args(["--quick", "--kind", "DDP eager,FSDP eager", "--no-pin"])
    rows = bench.measure("mlp", args)
    assert sorted(rows) == ["DDP eager", "FSDP eager"]
    for row in rows.values():
        assert len(row["rounds_ms"]) == args.rounds and row["step_ms"] > 0 and row["first_s"] > 0
