"""Command line: `python -m torchsmith.capture SCRIPT.py [--fn NAME] [--inputs NAME] [--dynamic]
[--fullgraph] [--out DIR]`.

Runs SCRIPT.py as a module (its `if __name__ == "__main__":` block does not run), then calls the
function it names `fn` (a Python function or an `nn.Module`) under capture with the arguments it
names `example_inputs`:

    import torch

    def fn(x, w):
        return torch.relu(x @ w).sum(1)

    example_inputs = (torch.randn(3, 4), torch.randn(4, 5))

`example_inputs` is a tuple, the positional arguments of one call, or a list of such tuples, one
call each in order (a second call with other sizes shows a recompile with dynamic sizes). The
captured graphs run on the reference interpreter (`torchsmith.ir.interpret`, eager PyTorch).

Prints, for every capture in order, the graph in IR text form, its guards, the constants the guards
and the generated code refer to (`K0`, ...), and the generated Python code that runs around the
graph; then every graph break with its reason and source line. `--out DIR` writes the graphs as JSON
instead (`DIR/NNN-capture-NAME.json`, the names an IR dump uses), for the next stage:
`python -m torchsmith.autograd_aot DIR/001-capture-fn.json`.

A failure (a script that raises, or names no `fn`) is one line on stderr with exit status 2;
`TORCHSMITH_CLI_TRACEBACK=1` shows the traceback instead.
"""

import argparse
import pathlib
import re
import runpy
import sys
import types

import torch

from torchsmith.capture.api import capture
from torchsmith.capture.dispatch import CaptureRecord, CaptureSession
from torchsmith.capture.errors import CaptureError
from torchsmith.ir import format_graph, interpret, save
from torchsmith.ir.cli import run_guarded

_CONSTANT_NAME = re.compile(r"\bK\d+\b")


def load_script(path: str, fn_name: str = "fn", inputs_name: str = "example_inputs") -> tuple:
    """`(fn, calls)` of the script at `path`: the object it binds to `fn_name` and the list of
    argument tuples its `inputs_name` gives (see the module docstring)."""
    file = pathlib.Path(path)
    if not file.is_file():
        raise CaptureError(f"no such script: {path}")
    torch.manual_seed(0)  # scripts that draw random inputs see the same ones on every run
    scope = runpy.run_path(str(path), run_name="__torchsmith_capture__")
    if fn_name not in scope:
        raise CaptureError(
            f"{path} defines no `{fn_name}`: bind the function (or nn.Module) to capture to `{fn_name}`, "
            "or name it with --fn"
        )
    fn = scope[fn_name]
    if not isinstance(fn, (types.FunctionType, torch.nn.Module)):
        raise CaptureError(
            f"{path}: `{fn_name}` is a {type(fn).__name__}; capture takes a function or nn.Module"
        )
    if inputs_name not in scope:
        raise CaptureError(
            f"{path} defines no `{inputs_name}`: bind the arguments of one call to it as a tuple, "
            "e.g. `example_inputs = (torch.randn(3, 4),)`, or name it with --inputs"
        )
    return fn, _calls(scope[inputs_name], f"{path}: `{inputs_name}`")


def _calls(inputs, what: str) -> list[tuple]:
    if isinstance(inputs, tuple):
        return [inputs]
    if isinstance(inputs, list) and inputs and all(isinstance(call, tuple) for call in inputs):
        return list(inputs)
    raise CaptureError(
        f"{what} is a {type(inputs).__name__}; it must be a tuple (the arguments of one call) or a "
        "non-empty list of tuples (one call each)"
    )


def capture_calls(fn, calls: list[tuple], *, dynamic=None, fullgraph: bool = False) -> CaptureSession:
    """Call `fn` under capture with each argument tuple of `calls`, the graphs run by the reference
    interpreter; the session's `records` and `caches` hold what was captured."""
    session = CaptureSession(_interpreter_backend, fullgraph=fullgraph, dynamic=dynamic)
    captured = capture(fn, _interpreter_backend, session=session)
    for args in calls:
        captured(*args)
    return session


def _interpreter_backend(graph, example_inputs):
    return lambda *args: interpret(graph, *args)


def describe_constant(value) -> str:
    """A readable, run-independent description of an object that generated code names `Kn`: no
    addresses, so that the printout is the same on every run."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return repr(value)
    if isinstance(value, (torch.dtype, torch.layout, torch.memory_format)):
        return str(value)
    if isinstance(value, torch.device):
        return f"device({str(value)!r})"
    if isinstance(value, torch.Size):
        return f"Size({list(value)})"
    if isinstance(value, tuple):
        inner = ", ".join(describe_constant(v) for v in value)
        return f"({inner}{',' if len(value) == 1 else ''})"
    if isinstance(value, list):
        return "[" + ", ".join(describe_constant(v) for v in value) + "]"
    if isinstance(value, type):
        return _qualified(value)
    if isinstance(value, types.ModuleType):
        return f"module {value.__name__}"
    if isinstance(value, types.CodeType):
        return f"code {value.co_qualname} (line {value.co_firstlineno})"
    if isinstance(value, types.MethodType):
        return f"method {value.__func__.__qualname__} of a {type(value.__self__).__name__}"
    if isinstance(value, torch.Tensor):
        return f"tensor {str(value.dtype).removeprefix('torch.')}{list(value.shape)} {value.device}"
    if isinstance(value, torch.nn.Module):
        return f"module object {type(value).__qualname__}"
    if isinstance(value, types.FunctionType):
        return f"function {_qualified(value)}"
    if callable(value) and hasattr(value, "__name__"):
        # builtins by module and name: their __qualname__ names torch's internal holder class
        module = getattr(value, "__module__", None)
        return f"function {module}.{value.__name__}" if module and module != "builtins" \
            else f"function {value.__name__}"
    return f"{_qualified(type(value))} object"


def _qualified(obj) -> str:
    module = getattr(obj, "__module__", None)
    name = getattr(obj, "__qualname__", None) or getattr(obj, "__name__", "?")
    return f"{module}.{name}" if module and module != "builtins" else name


def format_record(number: int, record: CaptureRecord, namespace: dict | None) -> str:
    """One capture as text: header, graph, guards, constants and generated code."""
    where = f"{record.code_name} ({record.filename})"
    lines = [f"# capture {number}: {where}"]
    if record.graph is None and record.break_reason is not None and not record.source:
        lines.append(f"# runs eagerly: {record.break_reason}")
        return "\n".join(lines)
    lines.append(format_graph(record.graph).rstrip("\n") if record.graph is not None
                 else "# no graph: the code records no tensor op")
    lines.append("# guards")
    lines += record.guards or ["True"]
    text = "\n".join([*record.guards, record.source])
    names = sorted(set(_CONSTANT_NAME.findall(text)), key=lambda name: int(name[1:]))
    if names and namespace is not None:
        lines.append("# constants")
        lines += [f"{name} = {describe_constant(namespace[name])}" for name in names if name in namespace]
    lines.append("# generated code")
    lines.append(record.source.rstrip("\n"))
    if record.break_reason is not None:
        lines.append(f"# graph break: {record.break_reason}")
    return "\n".join(lines)


def format_session(session: CaptureSession) -> str:
    """Every capture of `session` in order (see `format_record`), then a summary of graph breaks."""
    namespaces = {}
    for cache in session.caches.values():
        for entry in cache.entries:
            namespaces[id(entry.output.source)] = entry.guard_set.ns.values
    blocks = [
        format_record(i, record, namespaces.get(id(record.source)))
        for i, record in enumerate(session.records, 1)
    ]
    breaks = [r for r in session.records if r.break_reason is not None]
    graphs = sum(r.graph is not None for r in session.records)
    summary = [f"# {graphs} graph(s), {len(breaks)} graph break(s)"]
    summary += [f"# break in {r.code_name}: {r.break_reason}" for r in breaks]
    return "\n\n".join(blocks + ["\n".join(summary)]) + "\n"


def write_graphs(session: CaptureSession, directory) -> list[pathlib.Path]:
    """Write each captured graph as JSON into `directory`, numbered in capture order."""
    out = pathlib.Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    graphs = [r.graph for r in session.records if r.graph is not None]
    for number, graph in enumerate(graphs, 1):
        safe = re.sub(r"[^\w.-]+", "_", graph.name).strip("_") or "graph"
        path = out / f"{number:03d}-capture-{safe}.json"
        save(graph, path)
        written.append(path)
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m torchsmith.capture", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("script", help="a Python file defining `fn` and `example_inputs`")
    parser.add_argument("--fn", default="fn", metavar="NAME", help="the name of the function to capture")
    parser.add_argument("--inputs", default="example_inputs", metavar="NAME",
                        help="the name of its arguments: a tuple, or a list of tuples (one call each)")
    sizes = parser.add_mutually_exclusive_group()
    sizes.add_argument("--dynamic", action="store_true", help="capture with symbolic sizes from the start")
    sizes.add_argument("--static", action="store_true", help="never make sizes symbolic")
    parser.add_argument("--fullgraph", action="store_true", help="a graph break is an error")
    parser.add_argument("--out", "-o", metavar="DIR",
                        help="write the graphs as JSON into DIR instead of printing")
    args = parser.parse_args(argv)
    return run_guarded(lambda: _run(args), args.script)


def _run(args) -> int:
    fn, calls = load_script(args.script, args.fn, args.inputs)
    dynamic = True if args.dynamic else (False if args.static else None)
    session = capture_calls(fn, calls, dynamic=dynamic, fullgraph=args.fullgraph)
    if args.out is None:
        print(format_session(session), end="")
        return 0
    for path in write_graphs(session, args.out):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
