"""Warm start across processes: a second process compiling the same model reads the decomposed
prims graphs and the generated programs from the compile cache (nothing lowered again) and
computes the same outputs and gradients, including through extern calls of prims ops that no
lowering imported torchsmith.prims for."""

import json
import os
import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent(
    """
    import json, sys
    import torch
    import torch.nn.functional as F
    import torchsmith
    from torchsmith.inductor.runtime import compile_cache

    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.norm = torch.nn.LayerNorm(16)
            self.proj = torch.nn.Linear(16, 48)

        def forward(self, x):
            q, k, v = self.proj(self.norm(x)).view(2, 5, 3, 16).unbind(2)
            return F.scaled_dot_product_attention(q, k, v, is_causal=True).relu().sum(-1)

    torch.manual_seed(0)
    model = Block()
    x = torch.randn(2, 5, 16)
    out = torchsmith.compile(model)(x)
    out.sum().backward()
    print(json.dumps({
        "out": out.detach().tolist(),
        "grad": model.proj.weight.grad.flatten().tolist(),
        "hits": compile_cache.STATS.hits,
        "misses": compile_cache.STATS.misses,
    }))
    """
)


def _run(cache_dir) -> dict:
    env = dict(os.environ, TORCHSMITH_CACHE_DIR=str(cache_dir))
    command = [sys.executable, "-c", SCRIPT]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_second_process_reads_the_compile_cache_and_matches(tmp_path):
    cold = _run(tmp_path)
    assert cold["hits"] == 0 and cold["misses"] >= 3  # prims graph, forward and backward programs
    warm = _run(tmp_path)
    assert warm["misses"] == 0 and warm["hits"] == cold["misses"]
    assert warm["out"] == cold["out"]
    assert warm["grad"] == cold["grad"]
