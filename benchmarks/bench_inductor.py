"""Eager vs torch.compile vs torchsmith (backend="inductor") on eleven workloads, one machine, one run.

    python benchmarks/bench_inductor.py                      # CPU, float32: writes results/inductor_cpu.md
    python benchmarks/bench_inductor.py --quick --only mlp   # tiny sizes, one workload: a smoke run
    python benchmarks/bench_inductor.py --device cuda --dtype bfloat16   # results/inductor_cuda_bfloat16.md
    python benchmarks/bench_inductor.py --device cuda --no-cold --no-warm --only mlp  # one process each
    python benchmarks/bench_inductor.py --device cuda --dtype bfloat16 --one-process
        # every workload measured in one process, then each compiler's cold first call in its own
        # fresh process
    python benchmarks/bench_inductor.py --complete-cold results/inductor_cuda_bfloat16.json --timeout 60
        # the cold processes a cut --one-process run did not reach (or that failed), added to its table

With --device cuda the workloads take GPU sizes (inductor_workloads: `gpu_title`), and a bandwidth
micro-suite (inductor_bandwidth.py: copy, pointwise, softmax, layer norm, column sums; GB/s and share of
copy bandwidth per system) runs first unless --no-bandwidth. Results are rewritten after every workload,
so a run cut short still leaves its table.

Workloads (inductor_workloads.py): MLP, a pointwise chain, softmax, LayerNorm+GELU+residual,
attention, a transformer encoder layer, conv-BatchNorm-ReLU, GPT-2 and BERT (small `transformers`
configurations, random weights), and training steps of the MLP and the encoder layer.

For each workload, five fresh processes (so that no compiler finds anything in memory):

1. cold torch.compile, 2. cold torchsmith: empty caches (TORCHINDUCTOR_CACHE_DIR, TRITON_CACHE_DIR and
   TORCHSMITH_CACHE_DIR set to new temporary folders); the time from wrapping the model to the end of
   its first call (capture, compile, run; for training a whole step: forward, backward, SGD step);
3. warm torch.compile, 4. warm torchsmith: the same with the caches the cold runs filled;
5. steady state: the three systems in one process (compiled from the warm caches), checked against
   eager (max abs error, allclose), then timed: the median over `--repeat` rounds of the per-call time,
   each round running every system in turn so that a slow spell of a shared machine hits all alike.

torch.compile is the baseline only, never part of torchsmith. The torchsmith row says how its run went:
"ok" (every captured graph compiled), "fell back" (compile_api ran some graph eagerly after a backend
error: the time is then partly eager's), or "not built".
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import warnings

import torch
from common import (
    RESULTS,
    calls_per_round,
    interleaved_times,
    machine,
    median,
    prepare_native,
    short_error,
    synchronizer,
)
from inductor_report import markdown, summarize
from inductor_workloads import WORKLOADS

SYSTEMS = ("eager", "torch.compile", "torchsmith")
TOLERANCE = {torch.float32: 1e-3, torch.bfloat16: 3e-2, torch.float16: 1e-2}  # relative to the output's scale


# --- the workload on a device, as a step function --------------------------------------------


def prepare(name: str, device: str, dtype: torch.dtype, quick: bool):
    """The workload's module and inputs on `device`, floating point ones in `dtype` (seeded: every
    process builds the same weights and inputs)."""
    torch.manual_seed(0)
    module, inputs = WORKLOADS[name].build(quick, device.startswith("cuda"))
    module = module.to(device=device, dtype=dtype)
    inputs = [x.to(device=device, dtype=dtype if x.is_floating_point() else x.dtype) for x in inputs]
    module.train(WORKLOADS[name].train)  # inference runs in eval mode (BatchNorm uses running stats)
    return module, inputs


class TorchsmithProbe:
    """A backend wrapping torchsmith's `backend_name` that records what happened: graphs captured,
    backend errors (after which compile_api runs the graph eagerly), and each compiled prims graph
    (its loop program and compile timings) through the inductor's device-compiler hook."""

    def __init__(self, backend_name: str, device: str):
        import torchsmith

        self.inner = torchsmith.lookup_backend(backend_name)
        self.not_built = bool(getattr(self.inner, "not_built", False))
        self.device_type = device.split(":")[0]
        self.captured, self.errors, self.compiled = 0, [], []
        self._hooked = backend_name != "inductor"

    def _hook_device_compiler(self) -> None:
        """Record every graph the inductor's code generator compiles (forward and backward)."""
        self._hooked = True
        try:
            from torchsmith.inductor import device_compilers as inductor_backend
        except ImportError:
            return
        original = inductor_backend.DEVICE_COMPILERS.get(self.device_type)
        if original is None:
            return
        takes_options = _accepts_options(original)

        def recording(graph, example_inputs, options=None):
            start = time.perf_counter()
            if options is not None and takes_options:
                compiled = original(graph, example_inputs, options=options)
            else:
                compiled = original(graph, example_inputs)
            self.compiled.append((compiled, time.perf_counter() - start))
            return compiled

        inductor_backend.register_device_compiler(self.device_type, recording)

    def backend(self, graph, example_inputs, options=None):
        if not self._hooked:
            self._hook_device_compiler()
        self.captured += 1
        try:
            if options is not None and _accepts_options(self.inner):
                return self.inner(graph, example_inputs, options=options)
            return self.inner(graph, example_inputs)
        except Exception as e:
            self.errors.append(short_error(e))
            raise

    def profile(self) -> dict:
        """What was compiled: graphs, kernels, extern calls by op, eager fallbacks, compile seconds."""
        from inductor_report import profile_of

        return profile_of(self.captured, self.errors, self.compiled)


def _accepts_options(fn) -> bool:
    import inspect

    try:
        return "options" in inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False


def make_system(system: str, module, probe: TorchsmithProbe | None, mode: str = "default"):
    """The callable that runs `module` under `system`, both compilers in the same `mode`."""
    if system == "eager":
        return module
    if system == "torch.compile":
        return torch.compile(module, mode=mode)  # the baseline, default backend (inductor)
    import torchsmith

    return torchsmith.compile(module, backend=probe.backend, mode=mode)


def make_step(train: bool, module, fn, inputs):
    """One call of the workload: inference under no_grad, or forward + backward + SGD step."""
    if not train:
        def infer():
            with torch.no_grad():
                return fn(*inputs)

        return infer
    optimizer = torch.optim.SGD(module.parameters(), lr=1e-4)

    def train_step():
        loss = fn(*inputs)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss

    return train_step


def outputs_of(train: bool, module, fn, inputs) -> list[torch.Tensor]:
    """What is compared with eager: the outputs, or for training the loss and every gradient."""
    if not train:
        with torch.no_grad():
            out = fn(*inputs)
        return [t.detach() for t in (out if isinstance(out, tuple | list) else [out])]
    module.zero_grad(set_to_none=True)
    loss = fn(*inputs)
    loss.backward()
    grads = [p.grad.detach().clone() for p in module.parameters() if p.grad is not None]
    module.zero_grad(set_to_none=True)
    return [loss.detach()] + grads


def compare(expected: list[torch.Tensor], actual: list[torch.Tensor], dtype) -> dict:
    """Max abs error and allclose at a tolerance relative to each output's largest magnitude."""
    if len(expected) != len(actual):
        note = f"{len(actual)} outputs, not {len(expected)}"
        return {"max_abs_err": float("inf"), "allclose": False, "note": note}
    worst, ok = 0.0, True
    for e, a in zip(expected, actual):
        if e.shape != a.shape:
            return {"max_abs_err": float("inf"), "allclose": False, "note": f"shape {list(a.shape)}"}
        e, a = e.double(), a.double()
        tol = TOLERANCE.get(dtype, 1e-3) * max(1.0, e.abs().max().item() if e.numel() else 1.0)
        worst = max(worst, (e - a).abs().max().item() if e.numel() else 0.0)
        ok = ok and torch.allclose(a, e, rtol=TOLERANCE.get(dtype, 1e-3), atol=tol, equal_nan=True)
    return {"max_abs_err": worst, "allclose": ok}


# --- the child processes -----------------------------------------------------------------------


def _first_optimizer_step(device: str) -> None:
    """One SGD step on a throwaway parameter. torch's first `optimizer.step()` in a process imports
    torch._dynamo (seconds); a training program pays it with or without a compiler, so the warm and
    cold first calls are timed after it."""
    weight = torch.nn.Parameter(torch.ones(2, device=device))
    optimizer = torch.optim.SGD([weight], lr=0.1)
    weight.sum().backward()
    optimizer.step()


def child_first_call(spec: dict) -> dict:
    """A fresh process: wrap the model with `spec["system"]` and time its first call."""
    if spec.get("threads"):
        torch.set_num_threads(spec["threads"])
    device, dtype, train = spec["device"], getattr(torch, spec["dtype"]), WORKLOADS[spec["workload"]].train
    module, inputs = prepare(spec["workload"], device, dtype, spec["quick"])
    probe = TorchsmithProbe(spec["backend"], device) if spec["system"] == "torchsmith" else None
    if probe is not None and probe.not_built:
        return {"status": "not built"}
    sync = synchronizer(device)
    if train:  # torch's own lazy start-up, which eager pays too: not compile time of either system
        _first_optimizer_step(device)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        sync()
        start = time.perf_counter()
        fn = make_system(spec["system"], module, probe, spec.get("mode", "default"))
        step = make_step(train, module, fn, inputs)
        step()
        sync()
        seconds = time.perf_counter() - start
    result = {"first_call_s": seconds}
    if probe is not None:
        result.update(probe.profile())
        result["warnings"] = sorted({str(w.message)[:300] for w in caught if "torchsmith" in str(w.message)})
        import torchsmith.inductor as inductor

        result["build"] = vars(inductor.BUILD_STATS).copy() if hasattr(inductor, "BUILD_STATS") else {}
    else:
        from torch._dynamo.utils import counters  # the baseline's own count, for the report only

        result["graphs"] = counters["stats"]["unique_graphs"]
    return result


def child_measure(spec: dict) -> dict:
    """A fresh process with warm caches: check every system against eager, then time them in turn.
    The time of each system's first call (compile from the warm caches, then the correctness call)
    is kept: with --quick it stands in for the warm-start processes."""
    if spec.get("threads"):
        torch.set_num_threads(spec["threads"])
    device, dtype, train = spec["device"], getattr(torch, spec["dtype"]), WORKLOADS[spec["workload"]].train
    base, inputs = prepare(spec["workload"], device, dtype, spec["quick"])
    probe = TorchsmithProbe(spec["backend"], device)
    systems = [s for s in SYSTEMS if s != "torchsmith" or not probe.not_built]
    modules = {s: copy.deepcopy(base) for s in systems}  # same weights; each system steps its own
    fns, result, expected = {}, {"systems": {}}, None
    sync = synchronizer(device)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for s in systems:
            try:
                sync()
                start = time.perf_counter()
                fns[s] = make_system(s, modules[s], probe, spec.get("mode", "default"))
                got = outputs_of(train, modules[s], fns[s], inputs)
                sync()
                first_call_s = time.perf_counter() - start
                expected = got if s == "eager" else expected  # eager comes first: the reference
                result["systems"][s] = dict(compare(expected, got, dtype), first_call_s=first_call_s)
            except Exception as e:
                result["systems"][s] = {"error": short_error(e)}
                fns.pop(s, None)
    steps = {s: make_step(train, modules[s], fn, inputs) for s, fn in fns.items()}
    for s, step in list(steps.items()):  # warm-up: compiles anything the correctness call did not
        try:
            for _ in range(2):
                step()
        except Exception as e:  # e.g. a training step failing in its optimizer step: time the others
            result["systems"][s] = {"error": short_error(e)}
            del steps[s]
    if "eager" not in steps:
        return dict(result, error="eager failed: " + result["systems"]["eager"]["error"])
    calls = calls_per_round(steps["eager"], sync, target_s=spec["round_s"])
    samples = interleaved_times(steps, rounds=spec["repeat"], calls=calls, sync=sync)
    for s, times in samples.items():
        result["systems"][s].update(median_s=median(times), best_s=min(times))
    result.update(calls_per_round=calls, rounds=spec["repeat"], profile=probe.profile())
    if not train:  # what one call must read and write at least: inputs, parameters, outputs
        tensors = list(inputs) + list(base.parameters()) + list(base.buffers()) + list(expected or [])
        result["io_bytes"] = sum(t.numel() * t.element_size() for t in tensors)
    result["warnings"] = sorted({str(w.message)[:300] for w in caught if "torchsmith" in str(w.message)})
    if spec["backend"] == "inductor" and not probe.not_built:
        import torchsmith.inductor as inductor

        result["backend_stats"] = vars(inductor.BACKEND_STATS).copy()
        result["build"] = vars(inductor.BUILD_STATS).copy()
    return result


def child_copy(spec: dict) -> dict:
    """The device's copy bandwidth (bytes read + written per second by `dst.copy_(src)`): the bar that
    memory-bound kernels are measured against (issue 7: at least 80% of it)."""
    if spec.get("threads"):
        torch.set_num_threads(spec["threads"])
    device, sync = spec["device"], synchronizer(spec["device"])
    nbytes = (256 if device.startswith("cuda") else 64) * 2**20  # well past the caches, even with --quick
    src = torch.rand(nbytes // 4, device=device)
    dst = torch.empty_like(src)
    rounds = spec["repeat"] + 2
    samples = interleaved_times({"copy": lambda: dst.copy_(src)}, rounds=rounds, calls=3, sync=sync)
    best = min(samples["copy"])
    return {"bytes": 2 * nbytes, "best_s": best, "gbs": 2 * nbytes / best / 1e9}


def child_bandwidth(spec: dict) -> dict:
    """The bandwidth micro-suite (inductor_bandwidth.py) in one process."""
    from inductor_bandwidth import run_suite

    return run_suite(getattr(torch, spec["dtype"]), spec["quick"], spec["repeat"], spec.get("kernels"))


def child_measure_all(spec: dict) -> dict:
    """--one-process: `child_measure` for every workload of `spec["workloads"]` in this one process
    (torch, torch.compile's and torchsmith's start-up paid once: on the H200 a workload cost ~30 s
    in a process of its own), each row appended to `spec["rows_file"]` as it finishes so that a run
    cut short keeps what it measured. Per-workload counters are differences across the workload."""
    import gc

    for name in spec["workloads"]:
        before = _process_stats(spec)
        try:
            result = child_measure(dict(spec, workload=name))
        except Exception as e:
            result = {"error": short_error(e)}
        after = _process_stats(spec)
        for key in ("backend_stats", "build"):
            if key in result and key in after:
                result[key] = {k: v - before[key].get(k, 0) for k, v in after[key].items()}
        with open(spec["rows_file"], "a") as f:
            f.write(json.dumps({"workload": name, "measure": result}) + "\n")
        torch._dynamo.reset()  # the baseline's compiled code and guards of this workload
        gc.collect()
        if spec["device"].startswith("cuda"):
            torch.cuda.empty_cache()
    return {"done": len(spec["workloads"])}


def _process_stats(spec: dict) -> dict:
    if spec["backend"] != "inductor":
        return {}
    import torchsmith.inductor as inductor

    if not hasattr(inductor, "BACKEND_STATS"):
        return {}
    return {"backend_stats": vars(inductor.BACKEND_STATS).copy(), "build": vars(inductor.BUILD_STATS).copy()}


CHILDREN = {"first_call": child_first_call, "measure": child_measure, "copy": child_copy,
            "bandwidth": child_bandwidth, "measure_all": child_measure_all}


def run_child(spec: dict, cache: str, timeout: float) -> dict:
    """Run one child task in a new Python process with its caches under `cache`."""
    env = dict(os.environ)
    env.update(
        TORCHINDUCTOR_CACHE_DIR=os.path.join(cache, "torchinductor"),
        # Both compilers keep Triton's binaries, launchers and driver helpers there: one folder per
        # system, so that a cold run never finds what the other system's cold run built.
        TRITON_CACHE_DIR=os.path.join(cache, "triton", spec.get("system", "measure")),
        TORCHSMITH_CACHE_DIR=os.path.join(cache, "torchsmith"),
    )
    if spec.get("threads"):  # OpenMP in generated kernels too, whoever starts it
        env["OMP_NUM_THREADS"] = str(spec["threads"])
    command = [sys.executable, os.path.abspath(__file__), "--child", json.dumps(spec)]
    try:
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout:.0f} s"}
    for line in reversed(done.stdout.splitlines()):
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT "):])
    tail = (done.stderr.strip().splitlines() or ["(no output)"])[-1]
    return {"error": f"exit {done.returncode}: {tail[:300]}"}


def main_child(spec_text: str) -> None:
    spec = json.loads(spec_text)
    try:
        result = CHILDREN[spec["task"]](spec)
    except Exception as e:
        import traceback

        traceback.print_exc()
        result = {"error": short_error(e)}
    print("RESULT " + json.dumps(result), flush=True)


# --- the run -----------------------------------------------------------------------------------


def _merge_triton_caches(cache: str) -> None:
    """Copy each system's Triton cache (run_child keeps one per system) into the measuring one."""
    root = os.path.join(cache, "triton")
    for system in SYSTEMS[1:]:
        if os.path.isdir(os.path.join(root, system)):
            shutil.copytree(os.path.join(root, system), os.path.join(root, "measure"), dirs_exist_ok=True)


def _first_call_spec(name: str, args) -> dict:
    return {"workload": name, "device": args.device, "dtype": args.dtype, "quick": args.quick,
            "backend": args.backend, "threads": args.threads, "task": "first_call"}


def cold_processes(name: str, args, systems=SYSTEMS[1:]) -> dict:
    """The cold first call of each compiler on `name`, each in a fresh process with empty caches."""
    with tempfile.TemporaryDirectory(prefix="bench_inductor_") as cache:
        return {f"cold {system}": run_child(dict(_first_call_spec(name, args), system=system), cache,
                                            args.timeout)
                for system in systems}


def _needs_cold_process(entry: dict | None) -> bool:
    return entry is None or "error" in entry or entry.get("in_measure", False)


def complete_cold(path: str, args) -> dict:
    """Finish a --one-process run that was cut short: run the cold processes its rows lack (a cold
    column that is missing, an error, or the measuring process's first call) and rewrite its table."""
    with open(path) as f:
        result = json.load(f)
    args.device, args.dtype, args.quick = result["device"], result["dtype"], result["quick"]
    args.backend = result["backend"]
    command = "python benchmarks/bench_inductor.py " + " ".join(sys.argv[1:])
    result["cold_completed_by"] = command.strip()
    out = os.path.splitext(path)[0] + ".md"
    for row in result["rows"]:
        missing = [system for system in SYSTEMS[1:] if _needs_cold_process(row.get(f"cold {system}"))]
        row.update(cold_processes(row["workload"], args, missing))
        print(summarize(row), flush=True)
        _write(out, result)
    return result


def bench_workload(name: str, args) -> dict:
    """Cold, warm and steady-state numbers of one workload (see the module docstring)."""
    spec = {"workload": name, "device": args.device, "dtype": args.dtype, "quick": args.quick,
            "backend": args.backend, "mode": args.mode, "repeat": args.repeat,
            "round_s": 0.01 if args.quick else 0.03, "threads": args.threads}
    title = WORKLOADS[name].title_for(args.device.startswith("cuda"))
    row = {"workload": name, "title": title, "train": WORKLOADS[name].train,
           "memory_bound": WORKLOADS[name].memory_bound}
    with tempfile.TemporaryDirectory(prefix="bench_inductor_") as cache:
        phases = ([] if args.no_cold else ["cold"]) + ([] if args.quick or args.no_warm else ["warm"])
        for phase in phases:
            for system in SYSTEMS[1:]:
                task = dict(spec, task="first_call", system=system)
                row[f"{phase} {system}"] = run_child(task, cache, args.timeout)
        _merge_triton_caches(cache)  # the measuring process starts warm for both systems
        row["measure"] = run_child(dict(spec, task="measure"), cache, args.timeout)
    if args.quick or args.no_warm:  # no warm-start processes: the measuring process stands in
        # With --no-cold as well its caches were empty: its first calls are cold compiles.
        phase = "cold" if args.no_cold else "warm"
        measured = row["measure"].get("systems", {})
        for system in SYSTEMS[1:]:
            if "first_call_s" in measured.get(system, {}):
                first = measured[system]["first_call_s"]
                row[f"{phase} {system}"] = {"first_call_s": first, "in_measure": True}
        if f"{phase} torchsmith" in row:
            profile = row["measure"].get("profile", {})
            row[f"{phase} torchsmith"].update(compiled_graphs=profile.get("compiled_graphs"),
                                              build=row["measure"].get("build", {}))
    return row


def _row_for(name: str, args, measure: dict) -> dict:
    workload = WORKLOADS[name]
    row = {"workload": name, "title": workload.title_for(args.device.startswith("cuda")),
           "train": workload.train, "memory_bound": workload.memory_bound, "measure": measure}
    measured = measure.get("systems", {})
    for system in SYSTEMS[1:]:  # cold compiles in an already started process (see --one-process)
        if "first_call_s" in measured.get(system, {}):
            row[f"cold {system}"] = {"first_call_s": measured[system]["first_call_s"], "in_measure": True}
    if "cold torchsmith" in row:
        row["cold torchsmith"].update(compiled_graphs=measure.get("profile", {}).get("compiled_graphs"),
                                      build=measure.get("build", {}))
    return row


def _measuring_caches(keep: str | None):
    """The measuring process's cache folder: a new temporary one, or `keep` (--keep-caches), which
    then holds the tuning choices and generated kernels afterwards."""
    if keep is None:
        return tempfile.TemporaryDirectory(prefix="bench_inductor_")
    os.makedirs(keep, exist_ok=True)
    return contextlib.nullcontext(keep)


def measure_in_one_process(names: list[str], args):
    """Rows of `names`, measured by one child process (--one-process), yielded as they finish
    (read from the rows file the child appends to; a child that dies or times out ends the list,
    its remaining workloads marked with the error)."""
    import threading

    spec = {"device": args.device, "dtype": args.dtype, "quick": args.quick, "backend": args.backend,
            "repeat": args.repeat, "round_s": 0.01 if args.quick else 0.03, "threads": args.threads,
            "mode": args.mode, "task": "measure_all", "workloads": names}
    with _measuring_caches(args.keep_caches) as cache:
        spec["rows_file"] = os.path.join(cache, "rows.jsonl")
        done: dict = {}
        worker = threading.Thread(
            target=lambda: done.update(run_child(spec, cache, args.timeout * len(names))), daemon=True
        )
        worker.start()
        seen = 0
        while True:
            finished = not worker.is_alive()
            lines = open(spec["rows_file"]).read().splitlines() if os.path.exists(spec["rows_file"]) else []
            for line in lines[seen:]:
                entry = json.loads(line)
                yield _row_for(entry["workload"], args, entry["measure"])
            seen = len(lines)
            if finished:
                break
            time.sleep(0.5)
        for name in names[seen:]:
            yield _row_for(name, args, {"error": done.get("error", "not reached")})


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", action="append", choices=list(WORKLOADS), metavar="NAME",
                        help=f"run only this workload (repeatable): {', '.join(WORKLOADS)}")
    parser.add_argument("--repeat", type=int, default=None,
                        help="timed rounds per system (default 15; 3 with --quick)")
    parser.add_argument("--quick", action="store_true",
                        help="tiny sizes, few rounds, warm start read while measuring; writes nothing")
    parser.add_argument("--device", default="cpu", help="cpu or cuda")
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    parser.add_argument("--mode", default="default", choices=["default", "reduce-overhead", "max-autotune"],
                        help="both compilers' mode")
    parser.add_argument("--backend", default="inductor",
                        help="torchsmith's backend (aot_eager while developing)")
    parser.add_argument("--threads", type=int, default=None,
                        help="torch threads in every process (default: torch's own choice)")
    parser.add_argument("--no-cold", action="store_true", help="skip the cold-compile processes")
    parser.add_argument("--no-warm", action="store_true",
                        help="skip the warm-start processes (the measuring process's first calls stand in; "
                        "with --no-cold too, those are cold compiles in an already started process)")
    parser.add_argument("--no-bandwidth", action="store_true", help="skip the GPU bandwidth micro-suite")
    parser.add_argument("--one-process", action="store_true",
                        help="measure every workload in one process (implies --no-warm); then, unless "
                        "--no-cold, the cold processes of each workload (with --no-cold, the cold columns "
                        "are first calls in that process, after the workloads before)")
    parser.add_argument("--bandwidth-only", action="store_true", help="run only the bandwidth micro-suite")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds per child process")
    parser.add_argument("--keep-caches", metavar="DIR",
                        help="with --one-process: the measuring process's caches go here and stay")
    parser.add_argument("--out", help="write the markdown table here (default: results/ for full runs only)")
    parser.add_argument("--complete-cold", metavar="JSON",
                        help="finish a cut --one-process run: the cold processes its table lacks")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        main_child(args.child)
        return {}
    if args.complete_cold:
        return complete_cold(args.complete_cold, args)
    args.repeat = args.repeat or (3 if args.quick else 15)
    prepare_native()  # the children (cold ones too) load the extensions the user's install has built
    if args.threads:
        torch.set_num_threads(args.threads)  # so the machine info says what the children use
    gpu = args.device.startswith("cuda")
    suite = [name for name, w in WORKLOADS.items() if gpu or not w.gpu_only]
    names = [] if args.bandwidth_only else args.only or suite
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="bench_inductor_") as cache:
        copy_spec = {"task": "copy", "device": args.device, "quick": args.quick, "repeat": args.repeat,
                     "threads": args.threads}
        copy_result = run_child(copy_spec, cache, args.timeout)
        print(f"copy bandwidth: {copy_result.get('gbs', float('nan')):.1f} GB/s", flush=True)
        bandwidth = {}
        if gpu and not args.no_bandwidth:
            spec = {"task": "bandwidth", "dtype": args.dtype, "quick": args.quick, "repeat": args.repeat}
            bandwidth = run_child(spec, cache, args.timeout * 2)
            print(f"bandwidth suite: {bandwidth.get('error', 'done')}", flush=True)
    command = "python benchmarks/bench_inductor.py " + " ".join(argv if argv is not None else sys.argv[1:])
    out = args.out
    if out is None and not args.quick and not args.only:
        if gpu:
            mode = "" if args.mode == "default" else f"_{args.mode.replace('-', '_')}"
            out = str(RESULTS / f"inductor_cuda_{args.dtype}{mode}.md")
        else:
            suffix = "" if args.dtype == "float32" else f"_{args.dtype}"
            out = str(RESULTS / f"inductor_{args.device.split(':')[0]}{suffix}.md")
    rows = []

    def result_so_far() -> dict:
        result = {
            "benchmark": "inductor", "command": command.strip(), "device": args.device, "dtype": args.dtype,
            "mode": args.mode, "backend": args.backend, "quick": args.quick, "repeat": args.repeat,
            "no_cold": args.no_cold, "no_warm": args.no_warm, "machine": machine(_versions(args.device)),
            "total_s": time.perf_counter() - start, "rows": rows,
            "copy": copy_result,
        }
        if bandwidth:
            result["bandwidth"] = bandwidth
        return result

    if out and gpu:
        _write(out, result_so_far())  # the bandwidth suite, before any workload
    if args.one_process:
        args.no_warm = True
        for row in measure_in_one_process(names, args):
            rows.append(row)
            print(summarize(row), flush=True)
            if out and gpu:
                _write(out, result_so_far())
        for row in [] if args.no_cold else rows:  # after the measuring process: never beside it
            row.update(cold_processes(row["workload"], args))
            print(summarize(row), flush=True)
            if out and gpu:
                _write(out, result_so_far())
    for name in [] if args.one_process else names:
        row = bench_workload(name, args)
        rows.append(row)
        print(summarize(row), flush=True)
        if out and gpu:  # a GPU run cut short keeps what it measured
            _write(out, result_so_far())
    result = result_so_far()
    if out:
        _write(out, result)
        print(f"wrote {out}")
    else:
        print(markdown(result))
    return result


def _write(out: str, result: dict) -> None:
    RESULTS.mkdir(parents=True, exist_ok=True)
    with open(out, "w") as f:
        f.write(markdown(result))
    with open(os.path.splitext(out)[0] + ".json", "w") as f:
        f.write(json.dumps(result, indent=2) + "\n")


def _versions(device: str) -> dict:
    import torchsmith

    info = {"torchsmith": torchsmith.__version__}
    try:
        import transformers

        info["transformers"] = transformers.__version__
    except ImportError:
        info["transformers"] = None
    if device.startswith("cuda"):
        from common import gpu_name

        info["gpu"] = gpu_name()
    return info


if __name__ == "__main__":
    main()
