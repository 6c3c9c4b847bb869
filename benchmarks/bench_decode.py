"""LLM decoding with a static KV cache: one-token steps of a Llama-style decoder (the gpt-fast
pattern), eager vs `torch.compile(mode="reduce-overhead")` vs `torchsmith.compile(mode="reduce-overhead")`.

The decoder is written here in plain torch (RMSNorm, rotary embeddings, grouped-query attention
through `scaled_dot_product_attention(enable_gqa=True)`, SwiGLU MLP, random weights). Each
attention layer owns preallocated key and value caches (buffers of `max_seq` positions) that a step
updates with `index_copy_` at `input_pos`, a tensor: one compiled graph serves every position.

Each compiler runs in its own process: the prompt is prefilled eagerly (the same for all), then the
compiled model runs one-token decode steps. Tokens are fixed in advance (teacher forcing), so every
process computes the same logits; the parent reports tokens per second, the first decode call's
seconds (compile included) and the largest difference of each step's logits from eager's.

    python benchmarks/bench_decode.py                  # CUDA, d=2048, 16 layers, bf16
    python benchmarks/bench_decode.py --quick          # a tiny config on CPU (float32), for tests
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as F
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import RESULTS, gpu_name, machine, median, prepare_native, short_error  # noqa: E402

COMPILERS = ("eager", "torch.compile", "torchsmith")
# also accepted by --compilers: each compiler's default mode (no CUDA graphs), for comparison
DEFAULT_MODE = ("torch.compile-default", "torchsmith-default")


@dataclass(frozen=True)
class DecoderConfig:
    dim: int = 2048
    layers: int = 16
    heads: int = 32
    kv_heads: int = 8
    vocab: int = 32000
    intermediate: int = 5632
    max_seq: int = 2048
    rope_base: float = 10000.0

    @property
    def head_dim(self) -> int:
        return self.dim // self.heads


QUICK = DecoderConfig(dim=64, layers=2, heads=4, kv_heads=2, vocab=256, intermediate=160, max_seq=64)


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        variance = x.float().pow(2).mean(-1, keepdim=True)
        return (x.float() * torch.rsqrt(variance + self.eps)).to(x.dtype) * self.weight


def rotate(x, cos, sin):
    """Rotary embedding of `x` [batch, heads, seq, head_dim] by angles cos/sin [seq, head_dim/2]."""
    x1, x2 = x.chunk(2, dim=-1)
    cos, sin = cos[None, None], sin[None, None]
    return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1).to(x.dtype)


class Attention(nn.Module):
    def __init__(self, config: DecoderConfig, batch: int, dtype):
        super().__init__()
        self.config = config
        hd = config.head_dim
        self.wq = nn.Linear(config.dim, config.heads * hd, bias=False)
        self.wk = nn.Linear(config.dim, config.kv_heads * hd, bias=False)
        self.wv = nn.Linear(config.dim, config.kv_heads * hd, bias=False)
        self.wo = nn.Linear(config.heads * hd, config.dim, bias=False)
        shape = (batch, config.kv_heads, config.max_seq, hd)
        self.register_buffer("k_cache", torch.zeros(shape, dtype=dtype))
        self.register_buffer("v_cache", torch.zeros(shape, dtype=dtype))

    def forward(self, x, cos, sin, mask, input_pos):
        b, t, _ = x.shape
        c = self.config
        q = self.wq(x).view(b, t, c.heads, c.head_dim).transpose(1, 2)
        k = self.wk(x).view(b, t, c.kv_heads, c.head_dim).transpose(1, 2)
        v = self.wv(x).view(b, t, c.kv_heads, c.head_dim).transpose(1, 2)
        q, k = rotate(q, cos, sin), rotate(k, cos, sin)
        self.k_cache.index_copy_(2, input_pos, k)
        self.v_cache.index_copy_(2, input_pos, v)
        y = F.scaled_dot_product_attention(q, self.k_cache, self.v_cache, attn_mask=mask, enable_gqa=True)
        return self.wo(y.transpose(1, 2).reshape(b, t, c.heads * c.head_dim))


class Block(nn.Module):
    def __init__(self, config: DecoderConfig, batch: int, dtype):
        super().__init__()
        self.attention_norm = RMSNorm(config.dim)
        self.attention = Attention(config, batch, dtype)
        self.mlp_norm = RMSNorm(config.dim)
        self.w_gate = nn.Linear(config.dim, config.intermediate, bias=False)
        self.w_up = nn.Linear(config.dim, config.intermediate, bias=False)
        self.w_down = nn.Linear(config.intermediate, config.dim, bias=False)

    def forward(self, x, cos, sin, mask, input_pos):
        x = x + self.attention(self.attention_norm(x), cos, sin, mask, input_pos)
        h = self.mlp_norm(x)
        return x + self.w_down(F.silu(self.w_gate(h)) * self.w_up(h))


class Decoder(nn.Module):
    """`model(tokens [batch, t], input_pos [t]) -> logits [batch, t, vocab]`; writes the caches at
    `input_pos` and attends to every cached position up to each token's own."""

    def __init__(self, config: DecoderConfig, batch: int = 1, dtype=torch.float32):
        super().__init__()
        self.config = config
        self.embed = nn.Embedding(config.vocab, config.dim)
        self.blocks = nn.ModuleList(Block(config, batch, dtype) for _ in range(config.layers))
        self.norm = RMSNorm(config.dim)
        self.head = nn.Linear(config.dim, config.vocab, bias=False)
        half = config.head_dim // 2
        freqs = 1.0 / config.rope_base ** (torch.arange(half, dtype=torch.float32) / half)
        angles = torch.outer(torch.arange(config.max_seq, dtype=torch.float32), freqs)
        self.register_buffer("cos", angles.cos())
        self.register_buffer("sin", angles.sin())
        causal = torch.tril(torch.ones(config.max_seq, config.max_seq, dtype=torch.bool))
        self.register_buffer("causal", causal)

    def forward(self, tokens, input_pos):
        x = self.embed(tokens)
        cos, sin = self.cos[input_pos], self.sin[input_pos]
        mask = self.causal[input_pos][None, None]
        for block in self.blocks:
            x = block(x, cos, sin, mask, input_pos)
        return self.head(self.norm(x))


def build(config: DecoderConfig, device: str, dtype, batch: int = 1, seed: int = 0) -> Decoder:
    """The decoder with seeded random weights (std 0.02, as Llama initializes), caches zeroed."""
    torch.manual_seed(seed)
    model = Decoder(config, batch, dtype)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if not name.endswith("weight") or p.dim() == 1:
                continue
            p.normal_(0.0, 0.02)
    return model.to(device=device, dtype=dtype).eval()


def compile_with(name: str, model: nn.Module):
    if name == "eager":
        return model
    mode = "default" if name.endswith("-default") else "reduce-overhead"
    if name.startswith("torch.compile"):
        return torch.compile(model, mode=mode, fullgraph=True)
    import torchsmith

    return torchsmith.compile(model, mode=mode)


def run_worker(args) -> dict:
    """One compiler in this process: prefill, the first decode call timed, then the logits of every
    step and tokens per second over `args.rounds` rounds of `args.steps` steps."""
    config = QUICK if args.quick else DecoderConfig(layers=args.layers)
    device = "cpu" if args.quick else "cuda"
    dtype = torch.float32 if args.quick else torch.bfloat16
    prompt = 16 if args.quick else args.prompt
    steps = min(args.steps, config.max_seq - prompt)
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    model = build(config, device, dtype)
    generator = torch.Generator().manual_seed(1)
    tokens = torch.randint(0, config.vocab, (1, prompt + steps), generator=generator).to(device)
    positions = torch.arange(config.max_seq, device=device)
    step_inputs = [(tokens[:, prompt + i:prompt + i + 1], positions[prompt + i:prompt + i + 1])
                   for i in range(steps)]
    result = {"compiler": args.worker}
    with torch.no_grad():
        sync()
        start = time.perf_counter()
        model(tokens[:, :prompt], positions[:prompt])
        sync()
        result["prefill_s"] = time.perf_counter() - start
        step = compile_with(args.worker, model)
        graphs_before = _torchsmith_graphs() if args.worker.startswith("torchsmith") else None
        sync()
        start = time.perf_counter()
        step(*step_inputs[0])
        sync()
        result["first_call_s"] = time.perf_counter() - start
        for inputs in step_inputs[1:3]:  # reduce-overhead records its CUDA graph in these
            step(*inputs)
        logits = []
        for inputs in step_inputs:
            logits.append(step(*inputs)[0, -1].float().cpu())
        torch.save(torch.stack(logits), args.logits)
        times = []
        for _ in range(args.rounds):
            sync()
            start = time.perf_counter()
            for inputs in step_inputs:
                step(*inputs)
            sync()
            times.append(time.perf_counter() - start)
        result["round_s"] = times
        result["tokens_per_s"] = steps / median(times)
        result["ms_per_token"] = 1000 * median(times) / steps
        result["steps"] = steps
        if graphs_before is not None:
            result.update(_torchsmith_report(step, graphs_before))
    return result


def _torchsmith_graphs() -> int:
    from torchsmith.inductor.device_compilers import STATS

    return STATS.graphs


def _torchsmith_report(step, graphs_before: int) -> dict:
    """Graphs the inductor compiled over all decode steps: one when a position tensor serves every
    step and nothing breaks the graph."""
    from torchsmith.inductor.device_compilers import STATS

    return {"graphs_compiled": STATS.graphs - graphs_before}


def run_in_process(name: str, args, workdir: str) -> dict:
    logits = os.path.join(workdir, f"{name}.pt")
    out = os.path.join(workdir, f"{name}.json")
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", name, "--logits", logits, "--json", out,
           "--steps", str(args.steps), "--rounds", str(args.rounds), "--prompt", str(args.prompt),
           "--layers", str(args.layers)] + (["--quick"] if args.quick else [])
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout)
    if proc.returncode != 0 or not os.path.exists(out):
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-12:]
        return {"compiler": name, "error": "\n".join(tail)[-2000:]}
    with open(out) as f:
        result = json.load(f)
    result["logits_path"] = logits
    return result


def render(report: dict) -> str:
    c = report["config"]
    lines = [
        "# LLM decoding with a static KV cache" + (" (quick, CPU)" if report["quick"] else ""),
        "",
        f"Llama-style decoder, d={c['dim']}, {c['layers']} layers, {c['heads']} heads / "
        f"{c['kv_heads']} kv heads, "
        f"vocab {c['vocab']}, MLP {c['intermediate']}, cache {c['max_seq']} positions, batch 1, "
        f"{report['dtype']} on {report['device']}. Prompt of {report['prompt']} tokens prefilled eagerly, "
        "then "
        f"{report['steps']} one-token decode steps (`index_copy_` into the caches at a position tensor); "
        "teacher-forced tokens, so every compiler computes the same logits. Each compiler in its own "
        f"process; tokens/s from the median of {report['rounds']} rounds. `mode=\"reduce-overhead\"` for "
        "both compilers (the `-default` rows: mode=\"default\"). Max diff: the largest |logit - eager's| "
        "over all steps. torchsmith's C++ extensions, built once per install, loaded before the "
        f"workers start: {_native_text(report.get('native'))}.",
        "",
        f"Machine: {report['machine'].get('gpu') or report['machine']['cpu']}, "
        f"torch {report['machine']['torch']}, {report['machine']['date']}.",
        "",
        "| compiler | tokens/s | ms/token | speedup over eager | first call s | max diff vs eager | notes |",
        "|---|---|---|---|---|---|---|",
    ]
    eager = next((r for r in report["results"] if r["compiler"] == "eager" and "error" not in r), None)
    for r in report["results"]:
        if "error" in r:
            lines.append(f"| {r['compiler']} | error | | | | | {r['error'].splitlines()[-1][:200]} |")
            continue
        speed = f"{r['tokens_per_s'] / eager['tokens_per_s']:.2f}x" if eager else ""
        diff = "" if r.get("max_abs_diff") is None else f"{r['max_abs_diff']:.3g}"
        notes = f"{r['graphs_compiled']} graph(s) compiled" if "graphs_compiled" in r else ""
        lines.append(f"| {r['compiler']} | {r['tokens_per_s']:.1f} | {r['ms_per_token']:.3f} | {speed} | "
                     f"{r['first_call_s']:.2f} | {diff} | {notes} |")
    return "\n".join(lines) + "\n"


def _native_text(native: dict | None) -> str:
    if not native:
        return "not recorded"
    return ", ".join(f"{name.removeprefix('native_').replace('_', ' ')} {'yes' if ok else 'no (Python form)'}"
                     for name, ok in native.items())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny config on CPU (float32)")
    parser.add_argument("--steps", type=int, default=128, help="decode steps per round")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--prompt", type=int, default=1024, help="prefill length (CUDA runs)")
    parser.add_argument("--layers", type=int, default=16)
    parser.add_argument("--compilers", default=",".join(COMPILERS))
    parser.add_argument("--timeout", type=int, default=900, help="seconds per compiler process")
    parser.add_argument("--out", default=None, help="results stem (default benchmarks/results/decode_cuda)")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--logits", help=argparse.SUPPRESS)
    parser.add_argument("--json", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        result = run_worker(args)
        with open(args.json, "w") as f:
            json.dump(result, f)
        return
    config = QUICK if args.quick else DecoderConfig(layers=args.layers)
    results = []
    # Built once per install (as bench_inductor does): a worker's steps would otherwise run with the
    # guard's Python form while the extension builds in the background.
    native = prepare_native()
    with tempfile.TemporaryDirectory() as workdir:
        for name in args.compilers.split(","):
            result = run_in_process(name, args, workdir)
            results.append(result)
            print(json.dumps({k: v for k, v in result.items() if k != "round_s"}), flush=True)
        eager_path = next(
            (r["logits_path"] for r in results if r["compiler"] == "eager" and "error" not in r), None
        )
        eager_logits = torch.load(eager_path) if eager_path else None
        for r in results:
            path = r.pop("logits_path", None)
            if path is None or eager_logits is None:
                continue
            try:
                r["max_abs_diff"] = (torch.load(path) - eager_logits).abs().max().item()
            except Exception as e:  # noqa: BLE001 - a shape mismatch is reported, not fatal
                r["max_abs_diff_error"] = short_error(e)
    report = {
        "quick": args.quick,
        "config": asdict(config),
        "device": "cpu" if args.quick else "cuda",
        "dtype": "float32" if args.quick else "bfloat16",
        "prompt": 16 if args.quick else args.prompt,
        "steps": min(args.steps, config.max_seq - (16 if args.quick else args.prompt)),
        "rounds": args.rounds,
        "machine": machine({"gpu": gpu_name()}),
        "native": native,
        "results": results,
    }
    stem = args.out or str(RESULTS / ("decode_cpu_quick" if args.quick else "decode_cuda"))
    with open(stem + ".json", "w") as f:
        json.dump(report, f, indent=1)
    with open(stem + ".md", "w") as f:
        f.write(render(report))
    print(render(report))


if __name__ == "__main__":
    main()
