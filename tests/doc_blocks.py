"""Run the fenced Python blocks of Markdown files, as a reader would paste them into a fresh Python.

    python tests/doc_blocks.py README.md docs/adding-a-prim.md     # exit status 1 if one fails
    python tests/doc_blocks.py --preload=torchsmith --json=results.json README.md

The blocks of one file run in order in one namespace (a later block may use what an earlier one
defined, as the prose around them reads), in a fresh process per file (forked from one that has
imported torch already, so a block that registers a prim or a backend leaves nothing behind for the
next file), in a temporary working directory. Tracebacks point at the Markdown file's own lines.

A block is skipped only where a marker on the line before its fence says why:

    <!-- doc-test: skip <reason> -->          never run here (the reason is printed)
    <!-- doc-test: requires cuda -->          run only where torch.cuda.is_available()

`tests/test_doc_blocks.py` runs every README and docs page through this file; `nox -s
tests_isolated` runs each package's README with only that package installed. A torchsmith
FallbackWarning or AccuracyWarning raised by a block fails it: an example must not pass by quietly
running eagerly. This file needs
nothing beyond the standard library and torch, so it runs in those environments too.
"""

import dataclasses
import importlib
import json
import os
import pathlib
import re
import sys
import tempfile
import time
import traceback
import warnings

ROOT = pathlib.Path(__file__).resolve().parents[1]
# Folders that hold no documentation: environments, build output and generated result tables.
EXCLUDED_DIRS = {".git", ".nox", ".ci-venv", ".ci-results", ".venv", "build", "results", "node_modules"}
FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<ticks>`{3,}|~{3,})[ \t]*(?P<info>[^`\s]*)[^`]*$")
MARKER = re.compile(r"^\s*<!--\s*doc-test:\s*(?P<kind>skip|requires)\s+(?P<arg>.*?)\s*-->\s*$")
PYTHON_INFOS = {"python", "py"}
REQUIREMENTS = {"cuda": lambda: __import__("torch").cuda.is_available()}
# An example that quietly ran eagerly after a stage failed (torchsmith.FallbackWarning) or whose
# stages disagree (torchsmith.AccuracyWarning) has rotted: those warnings fail the block. Matched by
# message, since this file does not import torchsmith (a package README runs without compile_api).
FAILING_WARNINGS = (r"torchsmith: stage ", r"torchsmith accuracy check: ")


class DocBlockError(Exception):
    """A Markdown file this runner cannot read: an unclosed fence or an unknown marker."""


@dataclasses.dataclass(frozen=True, slots=True)
class Block:
    """One fenced Python block: the file, the line of its first code line, and its dedented code."""

    path: pathlib.Path
    line: int
    code: str
    skip: str | None = None
    requires: str | None = None

    @property
    def name(self) -> str:
        try:
            shown = self.path.relative_to(ROOT)
        except ValueError:
            shown = self.path
        return f"{shown.as_posix()}:{self.line}"


def markdown_files(root: pathlib.Path = ROOT) -> list[pathlib.Path]:
    """Every Markdown file of the repository outside environments, builds and result tables."""
    found = []
    for path in sorted(root.rglob("*.md")):
        parts = path.relative_to(root).parts[:-1]
        if not any(part in EXCLUDED_DIRS or part.startswith(".") for part in parts):
            found.append(path)
    return found


def python_blocks(path: pathlib.Path) -> list[Block]:
    """The fenced Python blocks of `path`, with the skip marker written before each one."""
    lines = path.read_text().splitlines()
    blocks, index = [], 0
    while index < len(lines):
        opening = FENCE.match(lines[index])
        if not opening:
            index += 1
            continue
        indent, ticks = opening["indent"], opening["ticks"]
        end = index + 1
        while end < len(lines) and not re.match(rf"^[ \t]*{re.escape(ticks)}[ \t]*$", lines[end]):
            end += 1
        if end == len(lines):
            raise DocBlockError(f"{path}:{index + 1}: the fence opened here is never closed")
        if opening["info"].lower() in PYTHON_INFOS:
            body = [line[len(indent):] if line.startswith(indent) else line.lstrip()
                    for line in lines[index + 1:end]]
            skip, requires = _marker(path, lines, index)
            blocks.append(Block(path, index + 2, "\n".join(body) + "\n", skip, requires))
        index = end + 1
    return blocks


def _marker(path: pathlib.Path, lines: list[str], fence_index: int) -> tuple[str | None, str | None]:
    previous = fence_index - 1
    while previous >= 0 and not lines[previous].strip():
        previous -= 1
    if previous < 0 or "doc-test" not in lines[previous]:
        return None, None
    marker = MARKER.match(lines[previous])
    if marker is None:
        raise DocBlockError(f"{path}:{previous + 1}: unreadable doc-test marker {lines[previous].strip()!r}; "
                            "write <!-- doc-test: skip REASON --> or <!-- doc-test: requires cuda -->")
    if marker["kind"] == "skip":
        if not marker["arg"]:
            raise DocBlockError(f"{path}:{previous + 1}: a skipped block needs its reason in the marker")
        return marker["arg"], None
    if marker["arg"] not in REQUIREMENTS:
        raise DocBlockError(f"{path}:{previous + 1}: unknown requirement {marker['arg']!r}; "
                            f"known: {', '.join(sorted(REQUIREMENTS))}")
    return None, marker["arg"]


def run_file(path: pathlib.Path) -> list[dict]:
    """Run the blocks of `path` in order in one namespace; one result per block: `name`, `status`
    (passed, failed, skipped or not run after an earlier failure) and `detail`."""
    namespace = {"__name__": "__main__"}
    for message in FAILING_WARNINGS:
        warnings.filterwarnings("error", message=message)
    results, failed = [], None
    for block in python_blocks(path):
        result = {"name": block.name, "status": "passed", "detail": ""}
        if failed is not None:
            result.update(status="not run", detail=f"an earlier block of the file failed ({failed})")
        elif block.skip:
            result.update(status="skipped", detail=block.skip)
        elif block.requires and not REQUIREMENTS[block.requires]():
            result.update(status="skipped", detail=f"requires {block.requires}, not present here")
        else:
            # Blank lines ahead of the code make tracebacks show the Markdown file's line numbers.
            source = "\n" * (block.line - 1) + block.code
            try:
                exec(compile(source, str(block.path), "exec"), namespace)
            except BaseException:  # a block's SystemExit or KeyboardInterrupt is its failure too
                failed = block.name
                result.update(status="failed", detail=traceback.format_exc())
        results.append(result)
    return results


def run_files_forked(paths: list[pathlib.Path]) -> list[dict]:
    """`run_file` for each path in a child forked from this process, in a temporary directory."""
    results = []
    for path in paths:
        started = time.perf_counter()
        read_end, write_end = os.pipe()
        child = os.fork()
        if child == 0:  # the child: run, report as JSON through the pipe, leave without cleanup
            os.close(read_end)
            status = 0
            try:
                with tempfile.TemporaryDirectory(prefix="doc-blocks-") as workdir:
                    os.chdir(workdir)
                    report = run_file(path)
            except BaseException:
                report = [{"name": str(path), "status": "failed", "detail": traceback.format_exc()}]
            try:
                with os.fdopen(write_end, "w") as pipe:
                    json.dump(report, pipe)
            except BaseException:
                status = 1
            finally:
                os._exit(status)
        os.close(write_end)
        with os.fdopen(read_end) as pipe:
            text = pipe.read()
        _, wait_status = os.waitpid(child, 0)
        if not text:
            code = os.waitstatus_to_exitcode(wait_status)
            results.append({"name": str(path), "status": "failed",
                            "detail": f"the process running the file's blocks died (exit status {code})"})
        else:
            report = json.loads(text)
            for result in report:
                result["file_seconds"] = round(time.perf_counter() - started, 2)
            results.extend(report)
    return results


def main(argv: list[str]) -> int:
    if not argv or argv[0] in {"-h", "--help"}:
        print(__doc__)
        return 0 if argv else 2
    json_out, preload = None, ["torch"]
    while argv and argv[0].startswith("--"):
        option, _, value = argv.pop(0).partition("=")
        if option == "--json":
            json_out = value
        elif option == "--preload":
            preload += [name for name in value.split(",") if name]
        else:
            print(f"unknown option {option}; see --help")
            return 2
    # Imported once here, so each forked child starts with them loaded (the children still register
    # what their blocks define in their own copy of every table).
    for module in preload:
        importlib.import_module(module)

    results = run_files_forked([pathlib.Path(arg).resolve() for arg in argv])
    if json_out:
        pathlib.Path(json_out).write_text(json.dumps(results))
    for result in results:
        print(f"{result['status']:>8}  {result['name']}"
              + (f": {result['detail']}" if result["status"] in {"skipped", "not run"} else ""))
        if result["status"] == "failed":
            print(result["detail"])
    seconds = {r["name"].rsplit(":", 1)[0]: r["file_seconds"] for r in results if "file_seconds" in r}
    print("seconds per file: " + ", ".join(f"{name} {s:.1f}" for name, s in seconds.items()))
    if not results:
        print("no Python blocks in", ", ".join(argv))
        return 1
    return 1 if any(r["status"] in {"failed", "not run"} for r in results) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
