"""`python -m torchsmith`: run a user's script and show what every `torchsmith.compile` in it did.

    python -m torchsmith explain train.py --epochs 1     # graphs, breaks (file:line, reason), guards, times
    python -m torchsmith report train.py --out reports/  # one HTML page per compiled function
    python -m torchsmith backends                        # the registered backends
    python -m torchsmith pipeline                        # backend="inductor"'s stages and their steps

The script runs as `python SCRIPT.py args...` would (as `__main__`, its folder first on sys.path,
`sys.argv` set); every function or module it compiles is watched by `torchsmith.report`. The
output is written when the script ends, also when it fails (the exit status is then 1).
"""

import argparse
import contextlib
import os
import runpy
import sys
import traceback

import torchsmith
import torchsmith.compiler
from torchsmith import report


@contextlib.contextmanager
def watching(directory=None):
    """Inside the block, `torchsmith.compile` attaches a report to everything it compiles (pages
    go to `directory` when given). Yields the list the reports are added to."""
    original = torchsmith.compiler.compile
    before = len(report.reports())

    def compile_and_watch(model=None, **kwargs):
        if model is None:  # used as @torchsmith.compile(...)
            return lambda fn: compile_and_watch(fn, **kwargs)
        compiled = original(model, **kwargs)
        if compiled is model:  # disable=True
            return compiled
        return report.attach(compiled, directory, fn=model, backend=kwargs.get("backend", "inductor"))

    compile_and_watch.__doc__ = original.__doc__
    torchsmith.compile = torchsmith.compiler.compile = compile_and_watch
    found: list = []
    try:
        yield found
    finally:
        torchsmith.compile = torchsmith.compiler.compile = original
        found.extend(report.reports()[before:])


def run_script(path: str, args: list[str]) -> int:
    """Run `path` as the main program with `args`; its exit status (1 when it raised)."""
    if not os.path.isfile(path):
        print(f"torchsmith: no such script: {path}", file=sys.stderr)
        return 2
    saved_argv, saved_path = sys.argv[:], sys.path[:]
    sys.argv = [path, *args]
    sys.path.insert(0, os.path.dirname(os.path.abspath(path)))
    try:
        runpy.run_path(path, run_name="__main__")
        return 0
    except SystemExit as e:
        return e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    except Exception:
        # The user's error, shown as Python would; what was compiled before it is still reported.
        traceback.print_exc()
        return 1
    finally:
        sys.argv, sys.path[:] = saved_argv, saved_path


def explain_command(script: str, args: list[str], out=print) -> int:
    """`explain`: run the script, then print each compiled function's explain text."""
    with watching() as found:
        status = run_script(script, args)
    out(f"\n==== torchsmith explain: {script} compiled {len(found)} function(s)")
    for item in found:
        out(report.explain_text(item))
    return status


def report_command(script: str, args: list[str], directory: str, out=print) -> int:
    """`report`: run the script, write one HTML page per compiled function into `directory`."""
    with watching(directory) as found:
        status = run_script(script, args)
    written = [report.write_report(item) for item in found]
    for item in found:
        item.dirty = False  # written just above: nothing left for the exit-time flush
    out(f"\n==== torchsmith report: {script} compiled {len(found)} function(s)")
    for path in written:
        if path is not None:
            out(f"  wrote {path}")
    if found:
        out(f"  index: {os.path.join(directory, 'index.html')}")
    return status


def main(argv=None) -> int:
    """Entry point of `python -m torchsmith`."""
    parser = argparse.ArgumentParser(prog="python -m torchsmith", description=__doc__.split("\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    explain = commands.add_parser("explain", help="run SCRIPT and print graphs, breaks, guards and times")
    explain.add_argument("script")
    explain.add_argument("args", nargs=argparse.REMAINDER, help="arguments for the script")
    write = commands.add_parser("report", help="run SCRIPT and write an HTML report per compiled function")
    write.add_argument("--out", default="torchsmith_report",
                       help="folder for the pages (default %(default)s)")
    write.add_argument("script")
    write.add_argument("args", nargs=argparse.REMAINDER, help="arguments for the script")
    commands.add_parser("backends", help="list the registered backends")
    commands.add_parser("pipeline", help='print backend="inductor" as its stages\' steps')
    options = parser.parse_args(argv)
    if options.command == "backends":
        print("\n".join(torchsmith.list_backends()))
        return 0
    if options.command == "pipeline":
        from torchsmith.inductor_backend import pipeline_text

        print(pipeline_text())
        return 0
    if options.command == "explain":
        return explain_command(options.script, options.args)
    args = list(options.args)
    # `report SCRIPT --out DIR args...` reads as naturally as `report --out DIR SCRIPT args...`
    if args[:1] == ["--out"] and len(args) >= 2:
        options.out, args = args[1], args[2:]
    elif args[:1] and args[0].startswith("--out="):
        options.out, args = args[0].split("=", 1)[1], args[1:]
    return report_command(options.script, args, options.out)


if __name__ == "__main__":
    sys.exit(main())
