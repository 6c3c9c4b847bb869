"""Every fenced Python block of every README and docs/ page runs, so an example cannot rot.

One subprocess runs them all through tests/doc_blocks.py (one fresh child per file); each block is
one test here, failing with its traceback at the Markdown line, or skipped with the reason its
marker gives. The example packages under examples/ (custom_codegen: a backend found by name
through its entry point) are made visible as if installed: their src/ folder and a dist-info folder
written from their pyproject.toml go on the subprocess's path. `nox -s tests_isolated` installs the
real wheel and runs that README there.
"""

import importlib.util
import json
import os
import pathlib
import subprocess
import sys
import tomllib

import pytest

HERE = pathlib.Path(__file__).resolve().parent
_spec = importlib.util.spec_from_file_location("doc_blocks", HERE / "doc_blocks.py")
doc_blocks = importlib.util.module_from_spec(_spec)
sys.modules.setdefault("doc_blocks", doc_blocks)
_spec.loader.exec_module(doc_blocks)

FILES = [path for path in doc_blocks.markdown_files() if doc_blocks.python_blocks(path)]
BLOCKS = [block for path in FILES for block in doc_blocks.python_blocks(path)]


def _as_installed(example: pathlib.Path, site: pathlib.Path) -> list[str]:
    """The path entries under which `example` (a folder with pyproject.toml and src/) imports and
    shows its metadata and entry points as an installed distribution would."""
    project = tomllib.loads((example / "pyproject.toml").read_text())["project"]
    dist_info = site / f"{project['name'].replace('-', '_')}-{project['version']}.dist-info"
    dist_info.mkdir(parents=True)
    (dist_info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: {project['name']}\nVersion: {project['version']}\n")
    groups = project.get("entry-points", {})
    (dist_info / "entry_points.txt").write_text("".join(
        f"[{group}]\n" + "".join(f"{name} = {target}\n" for name, target in entries.items())
        for group, entries in groups.items()))
    return [str(site), str(example / "src")]


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    out = tmp_path_factory.mktemp("doc_blocks") / "results.json"
    site = tmp_path_factory.mktemp("examples_site")
    paths = [entry for example in sorted(doc_blocks.ROOT.glob("examples/*/pyproject.toml"))
             for entry in _as_installed(example.parent, site / example.parent.name)]
    env = dict(os.environ, OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "1"))
    env["PYTHONPATH"] = os.pathsep.join([*paths, *filter(None, [env.get("PYTHONPATH")])])
    # Every package imported once before the per-file children fork: each file then skips ~0.5 s.
    packages = ["torchsmith", *(f"torchsmith.{p}" for p in ("capture", "autograd_aot", "prims", "inductor"))]
    preload = f"--preload={','.join(packages)}"
    command = [sys.executable, str(HERE / "doc_blocks.py"), f"--json={out}", preload]
    done = subprocess.run([*command, *map(str, FILES)], env=env, capture_output=True, text=True, timeout=900)
    if not out.exists():
        pytest.fail(f"tests/doc_blocks.py wrote no results (exit {done.returncode}):\n{done.stderr[-4000:]}")
    return {result["name"]: result for result in json.loads(out.read_text())}


@pytest.mark.parametrize("block", BLOCKS, ids=[block.name for block in BLOCKS])
def test_doc_block_runs(block, results):
    result = results.get(block.name)
    assert result is not None, f"{block.name} was not run"
    if result["status"] == "skipped":
        pytest.skip(f"{block.name}: {result['detail']}")
    assert result["status"] == "passed", f"{block.name} {result['status']}:\n{result['detail']}"


def test_collector_sees_the_documented_examples():
    names = {block.name.rsplit(":", 1)[0] for block in BLOCKS}
    # the pages the issue names; a parsing bug that finds no blocks must not pass quietly
    assert {"README.md", "docs/architecture.md", "examples/custom_codegen/README.md"} <= names
    assert {"docs/writing-a-backend.md", "docs/adding-a-prim.md", "docs/running-a-stage-alone.md"} <= names
    assert {f"packages/{p}/README.md" for p in ("ir", "capture", "autograd_aot", "prims", "inductor",
                                                 "compile_api")} <= names


def test_collector_reads_indented_fences_markers_and_line_numbers(tmp_path):
    page = tmp_path / "page.md"
    page.write_text(
        "text\n\n- item:\n\n  ```python\n  x = 1\n  ```\n\n<!-- doc-test: skip needs a GPU cluster -->\n"
        "```python\nraise RuntimeError\n```\n\n```\nnot python\n```\n\n"
        "```python\nassert x == 2, 'line 19'\n```\n"
    )
    blocks = doc_blocks.python_blocks(page)
    assert [(b.line, b.skip) for b in blocks] == [(6, None), (11, "needs a GPU cluster"), (19, None)]
    statuses = [(r["status"], r["detail"].splitlines()[-1] if r["detail"] else "")
                for r in doc_blocks.run_file(page)]
    assert statuses[:2] == [("passed", ""), ("skipped", "needs a GPU cluster")]
    assert statuses[2][0] == "failed" and "line 19" in statuses[2][1]
    assert f'File "{page}", line 19' in doc_blocks.run_file(page)[2]["detail"]


def test_a_skip_without_a_reason_is_refused(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("<!-- doc-test: skip -->\n```python\npass\n```\n")
    with pytest.raises(doc_blocks.DocBlockError, match="reason"):
        doc_blocks.python_blocks(page)
