"""IR dumps: `TORCHSMITH_DUMP_IR=DIR` writes the graph entering every stage, numbered in order.

Built from the compile events (`torchsmith.ir.events`). File names say the order, the level and the
graph, for instance for a training step under `backend="inductor"`::

    001-capture-forward.json      the torch.* graph capture produced (the input of autograd_aot)
    002-aten-functional.json      the functional ATen graph (joint forward+backward when training)
    003-prims-joint.json          the same after decomposition to prims (the input of the partition)
    004-prims-forward.json        the forward of the partition (the input of the code generator)
    005-prims-backward.json
    006-loops-forward.json        the inductor's loop IR (torchsmith.inductor.loop_ir.serialize)
    006-loops-forward.txt         the same in its text form, to read
    007-code-forward.cpp          generated source

With `TORCHSMITH_DUMP_IR_STEPS=1` the pass runner (`torchsmith.ir.passes`) also writes the IR after
every step of every stage's pipeline there, as text (`NNN-<stage>-<step>.txt`), in the same numbering.

Graphs are `torchsmith.ir.serialize` JSON: `torchsmith.ir.load(path)` reads one back, and the stage
command lines (`python -m torchsmith.autograd_aot`, `python -m torchsmith.prims decompose`,
`python -m torchsmith.inductor compile`) take them as input; `python -m torchsmith.inductor codegen`
takes a loop IR file, perhaps edited by hand.

    >>> with torchsmith.dump_ir("/tmp/ir"):   # doctest: +SKIP
    ...     compiled(x)
"""

import json
import os
import pathlib
from contextlib import contextmanager

from torchsmith.ir import events
from torchsmith.ir.dump_folder import reserve_dump_path

_LANGUAGE_SUFFIX = {"c++": "cpp", "triton": "py", "python": "py"}


class IRDumper:
    """An event subscriber writing each stage's input graph into `directory` (see the module doc)."""

    def __init__(self, directory):
        self.directory = pathlib.Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.written: list[pathlib.Path] = []

    def __call__(self, event: events.Event) -> None:
        payload = event.payload
        what = (event.stage, event.kind)
        if what == ("capture", "graph"):
            self._graph("capture", _short_name(payload.get("code_name") or payload["graph"].name),
                        payload["graph"])
        elif what in (("autograd_aot", "graph"), ("prims", "graph")):
            graph, name = payload["graph"], payload.get("name") or payload["graph"].name
            self._graph(_level(graph), "functional" if name == "aten" else name, graph)
        elif what == ("inductor", "loops"):
            self._loops(payload.get("name", "graph"), payload["program"])
        elif what == ("inductor", "code"):
            suffix = _LANGUAGE_SUFFIX.get(payload.get("language", ""), "txt")
            self._text("code", payload.get("name", "graph"), suffix, payload["source"])

    def _path(self, level: str, name: str, suffix: str) -> pathlib.Path:
        # numbered after every file there: an earlier run's, and the pass runner's step dumps
        return reserve_dump_path(self.directory, level, name, suffix)

    def _graph(self, level: str, name: str, graph) -> None:
        from torchsmith.ir import dumps

        path = self._path(level, name, "json")
        path.write_text(dumps(graph, indent=1))
        self.written.append(path)

    def _text(self, level: str, name: str, suffix: str, text: str) -> None:
        self._write(self._path(level, name, suffix), text)

    def _write(self, path: pathlib.Path, text: str) -> None:
        path.write_text(text if text.endswith("\n") else text + "\n")
        self.written.append(path)

    def _loops(self, name: str, program) -> None:
        json_path = self._path("loops", name, "json")
        try:
            from torchsmith.inductor.loop_ir.serialize import program_to_json

            self._write(json_path, json.dumps(program_to_json(program), indent=1))
        except Exception as e:  # an inductor of another version: the text form still helps
            json_path.unlink(missing_ok=True)
            self._write(json_path.with_suffix(".error.txt"), f"no JSON form of this loop IR: {e}")
        self._write(json_path.with_suffix(".txt"), _program_text(program))


def _short_name(qualname: str) -> str:
    """`outer.<locals>.Model.forward` -> `Model.forward`; `<lambda>` -> `lambda`."""
    parts = [p.strip("<>") for p in qualname.split(".") if p != "<locals>"]
    return ".".join(parts[-2:])


def _level(graph) -> str:
    """The level of a graph: prims once decomposed (a few ATen library ops may stay), else aten."""
    return "prims" if any(node.op.startswith("prims.") for node in graph.nodes) else "aten"


def _program_text(program) -> str:
    try:
        from torchsmith.inductor import format_program

        return format_program(program)
    except Exception:  # an older or newer loop IR: its own text form will do
        return str(program)


@contextmanager
def dump_ir(directory):
    """Write every stage's input graph into `directory` while the `with` block runs; yields the
    `IRDumper`, whose `written` lists the files in order."""
    dumper = IRDumper(directory)
    unsubscribe = events.subscribe(dumper)
    try:
        yield dumper
    finally:
        unsubscribe()


_ENVIRONMENT_DUMPER: list = []


def configure_from_environment() -> None:
    """Start dumping to `TORCHSMITH_DUMP_IR`, if set (for the whole process)."""
    directory = os.environ.get("TORCHSMITH_DUMP_IR")
    if directory and not _ENVIRONMENT_DUMPER:
        dumper = IRDumper(directory)
        events.subscribe(dumper)
        _ENVIRONMENT_DUMPER.append(dumper)
