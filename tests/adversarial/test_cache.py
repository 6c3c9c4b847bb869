"""The compile caches cannot lie or leak: an entry renamed or swapped onto another key is a miss, a
damaged library is built again (never mapped, never a permanent eager fallback), the directory is
private, writes are atomic under threads and processes, and the caches and the process stay bounded
however many programs are compiled.

Whatever could crash (loading a damaged library) runs in a child process, so a crash is a failing
exit code, not a dead pytest."""

import json
import os
import stat
import subprocess
import sys
import textwrap
import threading
import warnings

import pytest
import torch

from torchsmith.inductor.cpp import build as cpp_build
from torchsmith.inductor.cpu_pipeline import compile_graph
from torchsmith.inductor.runtime import cache_files, compile_cache
from torchsmith.inductor.testing import assert_matches_eager, make_graph

F32 = torch.float32


def _child(script: str, cache, *args, extra_env=None, timeout=600) -> subprocess.CompletedProcess:
    env = dict(os.environ, TORCHSMITH_CACHE_DIR=str(cache), **(extra_env or {}))
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script), *map(str, args)],
        env=env, capture_output=True, text=True, timeout=timeout,
    )  # fmt: skip


def _last_json(done: subprocess.CompletedProcess):
    assert done.returncode == 0, f"exit code {done.returncode}:\n{done.stderr[-3000:]}"
    return json.loads(done.stdout.strip().splitlines()[-1])


# ---- 1. keys are checked: swapped or renamed entries are misses -----------------------------------

TWO_MODELS = """
    import json, torch, torchsmith
    from torchsmith.inductor.runtime import compile_cache
    torch.manual_seed(0)
    x = torch.randn(64)
    f = torchsmith.compile(lambda x: x * 2 + 1)
    g = torchsmith.compile(lambda x: (x - 3) * 4)
    error = max((f(x) - (x * 2 + 1)).abs().max().item(), (g(x) - (x - 3) * 4).abs().max().item())
    stats = compile_cache.STATS
    print(json.dumps({"error": error, "hits": stats.hits, "rejected": stats.rejected}))
"""


def test_swapped_entries_are_misses_not_another_models_program(tmp_path):
    cold = _last_json(_child(TWO_MODELS, tmp_path))
    assert cold["error"] == 0
    programs = tmp_path / "inductor_programs"
    for kind in ("cpp-program", "prims-graph"):
        a, b = sorted(p for p in programs.iterdir() if p.name.startswith(kind))[:2]
        a_bytes = a.read_bytes()
        a.write_bytes(b.read_bytes())
        b.write_bytes(a_bytes)
    # Before entries held their key, this gave the other model's program: max error 17.2.
    swapped = _last_json(_child(TWO_MODELS, tmp_path))
    assert swapped["error"] == 0
    assert swapped["rejected"] == 4 and swapped["hits"] == 0
    warm = _last_json(_child(TWO_MODELS, tmp_path))  # the misses wrote the right entries back
    assert warm["error"] == 0 and warm["rejected"] == 0 and warm["hits"] == 4


def _scale_graph(name: str, factor: float):
    return make_graph(name, {"x": ((8, 16), F32)}, lambda b, x: b.op("aten.mul.Tensor", x, factor))


def test_entry_copied_over_another_key_and_foreign_documents_are_misses(monkeypatch, tmp_path, caplog):
    monkeypatch.setenv("TORCHSMITH_CACHE_DIR", str(tmp_path))
    first, second = _scale_graph("first", 2.0), _scale_graph("second", -5.0)
    compile_graph(first)
    compile_graph(second)
    entries = sorted((tmp_path / "inductor_programs").glob("cpp-program-*.json"), key=os.path.getmtime)
    assert len(entries) == 2
    entries[1].write_bytes(entries[0].read_bytes())  # first's program under second's key
    again = compile_graph(second)
    assert "lower" in again.timings and "holds the entry of key" in caplog.text
    assert_matches_eager(again, second, torch.randn(8, 16))
    # Right key, but a value that is not a program (hand-edited): a miss, not a crash.
    doc = json.loads(entries[1].read_text())
    doc["value"] = {"format": "torchsmith.cpp_program", "version": 1, "program": [1, 2]}
    entries[1].write_text(json.dumps(doc))
    rejected = compile_cache.STATS.rejected
    assert "lower" in compile_graph(second).timings and compile_cache.STATS.rejected == rejected + 1
    # A pickle (what older versions wrote) is never unpickled.
    entries[1].write_bytes(b"\x80\x04\x95" + b"cos\nsystem\n" * 4)
    assert_matches_eager(compile_graph(second), second, torch.randn(8, 16))


# ---- 2. libraries are checked before they are loaded ------------------------------------------------

SOURCE = 'extern "C" long torchsmith_damage_probe(long a) { return a * 5 + 2; }\n'
DAMAGES = ("truncated", "zeroed", "random", "empty")


def _source(k: int) -> str:
    """A library of its own per kind of damage (another source, another key)."""
    return f'extern "C" long torchsmith_damage_probe(long a) {{ return a * 5 + {k}; }}\n'


# Loads each source given, one after another, and prints each one's value and build counts.
LOAD = """
    import json, sys
    from torchsmith.inductor import BUILD_STATS, load_library
    seen = []
    for source in sys.argv[1:]:
        before = (BUILD_STATS.compiled, BUILD_STATS.disk_hits, BUILD_STATS.rejected)
        value = load_library(source).torchsmith_damage_probe(3)
        after = (BUILD_STATS.compiled, BUILD_STATS.disk_hits, BUILD_STATS.rejected)
        compiled, disk_hits, rejected = (b - a for a, b in zip(before, after))
        seen.append({"value": value, "compiled": compiled, "disk_hits": disk_hits, "rejected": rejected})
    print(json.dumps(seen))
"""


def _damage(path, how: str) -> None:
    data = path.read_bytes()
    damaged = {
        "truncated": data[: len(data) // 3],
        "zeroed": bytes(len(data)),
        "random": os.urandom(len(data)),
        "empty": b"",
    }[how]
    path.write_bytes(damaged)


def test_damaged_library_is_built_again_never_loaded(tmp_path):
    # One library per kind of damage, built, damaged, and loaded again in fresh processes (a
    # library loaded once stays in its process); a crash is the child's failing exit code.
    sources = [_source(k) for k in range(len(DAMAGES))]
    values = [3 * 5 + k for k in range(len(DAMAGES))]
    built = _last_json(_child(LOAD, tmp_path, *sources))
    assert built == [{"value": v, "compiled": 1, "disk_hits": 0, "rejected": 0} for v in values]
    libraries = sorted((tmp_path / "inductor_cpp").rglob("*.so"))
    assert len(libraries) == len(DAMAGES)
    for library, how in zip(libraries, DAMAGES):
        _damage(library, how)
    rebuilt = _last_json(_child(LOAD, tmp_path, *sources))
    assert rebuilt == [{"value": v, "compiled": 1, "disk_hits": 0, "rejected": 1} for v in values]
    # Built again, and the next process trusts the new files.
    trusted = _last_json(_child(LOAD, tmp_path, *sources))
    assert trusted == [{"value": v, "compiled": 0, "disk_hits": 1, "rejected": 0} for v in values]


def test_damaged_library_of_a_compiled_model_is_rebuilt_not_an_eager_fallback(tmp_path):
    script = """
        import json, warnings, torch, torchsmith
        from torchsmith.inductor import BUILD_STATS
        warnings.simplefilter("error")  # an eager fallback warns: make it fail the child
        x = torch.arange(12.0).reshape(3, 4)
        out = torchsmith.compile(lambda x: (x.sin() * 3).sum(1))(x)
        print(json.dumps({"ok": torch.allclose(out, (x.sin() * 3).sum(1)), "compiled": BUILD_STATS.compiled}))
    """
    assert _last_json(_child(script, tmp_path)) == {"ok": True, "compiled": 1}
    for library in (tmp_path / "inductor_cpp").rglob("*.so"):
        _damage(library, "truncated")
    assert _last_json(_child(script, tmp_path)) == {"ok": True, "compiled": 1}
    assert _last_json(_child(script, tmp_path)) == {"ok": True, "compiled": 0}


def test_manifest_of_another_key_or_a_path_outside_is_refused(monkeypatch, tmp_path):
    monkeypatch.setenv("TORCHSMITH_CACHE_DIR", str(tmp_path))
    other = 'extern "C" long torchsmith_damage_probe(long a) { return -1; }\n'
    cpp_build.load_library(other)
    key, other_key = cpp_build.build_key(SOURCE), cpp_build.build_key(other)
    directory = cpp_build.cache_dir() / key[:2]
    directory.mkdir(exist_ok=True)
    manifest = json.loads((cpp_build.cache_dir() / other_key[:2] / f"{other_key}.json").read_text())
    (directory / f"{key}.json").write_text(json.dumps(manifest))  # other's manifest under our key
    assert cpp_build._load_cached(directory, key) is None
    manifest["key"] = key
    manifest["library"] = f"../{other_key[:2]}/{manifest['library']}"
    (directory / f"{key}.json").write_text(json.dumps(manifest))
    assert cpp_build._load_cached(directory, key) is None
    assert cpp_build.load_library(SOURCE).torchsmith_damage_probe(3) == 17


# ---- 3. the directory is private --------------------------------------------------------------------


def test_new_cache_directory_is_private(monkeypatch, tmp_path):
    root = tmp_path / "fresh" / "cache"
    monkeypatch.setenv("TORCHSMITH_CACHE_DIR", str(root))
    assert cache_files.cache_root() == root
    assert stat.S_IMODE(os.stat(root).st_mode) == 0o700
    assert stat.S_IMODE(os.stat(cpp_build.cache_dir()).st_mode) == 0o700
    assert stat.S_IMODE(os.stat(compile_cache.cache_dir()).st_mode) == 0o700
    readable = tmp_path / "readable"
    readable.mkdir(mode=0o755)
    os.chmod(readable, 0o755)
    monkeypatch.setenv("TORCHSMITH_CACHE_DIR", str(readable))
    assert cache_files.cache_root() == readable  # ours and not writable by others: tightened, kept
    assert stat.S_IMODE(os.stat(readable).st_mode) == 0o700


def _refused_with_warning(monkeypatch, directory) -> None:
    monkeypatch.setenv("TORCHSMITH_CACHE_DIR", str(directory))
    with pytest.warns(cache_files.CacheDirectoryWarning, match="not using the cache directory"):
        used = cache_files.cache_root()
    assert used != directory and stat.S_IMODE(os.stat(used).st_mode) == 0o700
    assert os.stat(used).st_uid == os.geteuid()
    # Compiling still works, from the private directory, and writes nothing into the refused one.
    before = sorted(os.listdir(directory))
    assert cpp_build.load_library(SOURCE + "// refused\n").torchsmith_damage_probe(1) == 7
    assert sorted(os.listdir(directory)) == before
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # warned once per directory, not on every use
        assert cache_files.cache_root() == used


@pytest.mark.parametrize("mode", [0o777, 0o770, 0o722])
def test_group_or_world_writable_directory_is_refused(monkeypatch, tmp_path, mode):
    shared = tmp_path / f"shared{mode:o}"
    shared.mkdir()
    os.chmod(shared, mode)
    _refused_with_warning(monkeypatch, shared)


@pytest.mark.skipif(os.geteuid() != 0, reason="chown to another user needs root")
def test_directory_owned_by_another_user_is_refused(monkeypatch, tmp_path):
    theirs = tmp_path / "theirs"
    theirs.mkdir(mode=0o700)
    os.chown(theirs, 12345, 12345)
    _refused_with_warning(monkeypatch, theirs)


def test_directory_under_a_writable_parent_without_sticky_bit_is_refused(monkeypatch, tmp_path):
    parent = tmp_path / "open"
    parent.mkdir()
    os.chmod(parent, 0o777)
    mine = parent / "cache"
    mine.mkdir(mode=0o700)
    _refused_with_warning(monkeypatch, mine)
    os.chmod(parent, 0o777 | stat.S_ISVTX)  # like /tmp: others cannot rename what is ours
    monkeypatch.setenv("TORCHSMITH_CACHE_DIR", str(mine))
    assert cache_files.cache_root() == mine


# ---- 4. atomic writes under threads and processes ---------------------------------------------------


def _kernel_source(k: int, size: int = 40) -> str:
    # Big enough that g++ reads it over time: a rewrite during the read is what broke before.
    body = "\n".join(f"static long helper{k}_{i}(long a) {{ return a * {i} + {k}; }}" for i in range(size))
    calls = " + ".join(f"helper{k}_{i}(a)" for i in range(size))
    return f'{body}\nextern "C" long torchsmith_thread_probe(long a) {{ return {calls}; }}\n'


def _expected(k: int, a: int, size: int = 40) -> int:
    return sum(a * i + k for i in range(size))


def test_eight_threads_building_the_same_and_different_sources(monkeypatch, tmp_path):
    monkeypatch.setenv("TORCHSMITH_CACHE_DIR", str(tmp_path))
    sources = [_kernel_source(100)] * 8 + [_kernel_source(200 + k) for k in range(8)]
    results, errors = [None] * len(sources), []
    barrier = threading.Barrier(len(sources))
    compiled = cpp_build.STATS.compiled

    def build(i):
        try:
            barrier.wait()
            results[i] = cpp_build.load_library(sources[i]).torchsmith_thread_probe(3)
        except Exception as error:  # noqa: BLE001 - reported below
            errors.append(repr(error))

    threads = [threading.Thread(target=build, args=(i,)) for i in range(len(sources))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert results == [_expected(100, 3)] * 8 + [_expected(200 + k, 3) for k in range(8)]
    assert cpp_build.STATS.compiled - compiled == 9  # the shared source once
    leftovers = [p for p in tmp_path.rglob("*") if p.name.startswith(cache_files.TEMPORARY_PREFIX)]
    assert not leftovers


PROCESS_BUILD = """
    import json, sys, torch, torchsmith
    k = int(sys.argv[1])
    x = torch.arange(24.0).reshape(4, 6)
    same = torchsmith.compile(lambda x: (x * 3 + 1).relu().sum(0))(x)
    different = torchsmith.compile(lambda x: x * k - 2)(x)
    same_ok, different_ok = torch.equal(same, (x * 3 + 1).relu().sum(0)), torch.equal(different, x * k - 2)
    print(json.dumps({"same": same_ok, "different": different_ok}))
"""


def test_four_processes_building_the_same_and_different_graphs(tmp_path):
    env = dict(os.environ, TORCHSMITH_CACHE_DIR=str(tmp_path))
    children = [
        subprocess.Popen([sys.executable, "-c", textwrap.dedent(PROCESS_BUILD), str(k)], env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for k in range(4)
    ]  # fmt: skip
    for child in children:
        out, err = child.communicate(timeout=600)
        assert child.returncode == 0, err[-3000:]
        assert json.loads(out.strip().splitlines()[-1]) == {"same": True, "different": True}
    # Every manifest names a library that matches it.
    for manifest_path in (tmp_path / "inductor_cpp").rglob("*.json"):
        manifest = json.loads(manifest_path.read_text())
        data = (manifest_path.parent / manifest["library"]).read_bytes()
        assert len(data) == manifest["size"]


# ---- 5. bounded: disk by LRU eviction, memory by unloading unused libraries -----------------------


def test_size_limit_evicts_least_recently_used_entries(monkeypatch, tmp_path):
    monkeypatch.setenv("TORCHSMITH_CACHE_DIR", str(tmp_path))
    first = _kernel_source(1)
    cpp_build.load_library(first)
    entry_size = sum(p.stat().st_size for p in (tmp_path / "inductor_cpp").rglob("*") if p.is_file())
    monkeypatch.setenv("TORCHSMITH_CACHE_SIZE_MB", str(3.5 * entry_size / 2**20))
    keep = cpp_build.load_library(first)  # noqa: F841 - held: later uses are memory hits
    for k in range(2, 9):
        cpp_build.load_library(first)  # a use from memory counts as a use of the disk entry too
        cpp_build.load_library(_kernel_source(k))
    files = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert sum(p.stat().st_size for p in files) <= 3.5 * entry_size
    kept = {p.name.split(".")[0] for p in files if p.suffix == ".so"}
    assert cpp_build.build_key(first) in kept and cpp_build.build_key(_kernel_source(2)) not in kept
    cache_files.set_size_limit_mb(0.5)
    try:
        assert cache_files.size_limit_bytes() == 2**19
    finally:
        cache_files.set_size_limit_mb(None)


CLOSURES = """
    import gc, json, os, sys
    import torch, torchsmith
    from pathlib import Path
    from torchsmith.inductor.cpp import build as cpp_build

    def rss_mb():
        return int(open("/proc/self/statm").read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20

    x = torch.randn(64)
    n = int(sys.argv[1])
    samples = {}
    for i in range(n):
        k = i if sys.argv[2] == "new-constant" else 3
        f = torchsmith.compile(lambda x: x * k)
        assert torch.equal(f(x), x * k)
        del f
        if i + 1 in (n // 4, n):
            gc.collect()
            samples[i + 1] = rss_mb()
    files = [p for p in Path(os.environ["TORCHSMITH_CACHE_DIR"]).rglob("*") if p.is_file()]
    print(json.dumps({"rss": samples, "loaded": len(cpp_build._LOADED), "compiled": cpp_build.STATS.compiled,
                      "disk": sum(p.stat().st_size for p in files)}))
"""


def test_fresh_closures_with_one_constant_share_one_library(tmp_path):
    report = _last_json(_child(CLOSURES, tmp_path, 30, "same-constant"))
    assert report["compiled"] == 1 and report["loaded"] <= 1


def test_fresh_closures_with_new_constants_stay_bounded(tmp_path):
    limit_mb = 0.3
    report = _last_json(_child(CLOSURES, tmp_path, 48, "new-constant",
                               extra_env={"TORCHSMITH_CACHE_SIZE_MB": str(limit_mb)}))  # fmt: skip
    assert report["compiled"] == 48  # each constant is another program
    assert report["loaded"] <= 2  # libraries of dropped graphs are unloaded
    assert report["disk"] <= limit_mb * 2**20
    rss = report["rss"]
    # 36 more programs compiled and dropped: before, every one stayed loaded (~20 KB each, linear).
    assert rss["48"] - rss["12"] < 2.0, rss
