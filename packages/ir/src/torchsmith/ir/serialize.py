"""The JSON form of graphs: a versioned document that every stage and tool can read and write.

    {"schema_version": "1.0", "producer": "torchsmith-ir 0.1.0",
     "graph": {"name": "mlp",
               "inputs": [{"name": "x", "type": {"kind": "tensor", "shape": ["s0", 64], "dtype": "f32",
                                                 "device": "cpu", "strides": [64, 1]}}],
               "nodes": [{"op": "aten.gelu.default", "args": [{"value": "x"}],
                          "kwargs": {"approximate": {"str": "tanh"}},
                          "outputs": [{"name": "y", "type": {...}}], "source": "model.py:12"}],
               "outputs": ["y"]}}

Every argument is an object with one key naming its kind (`{"int": 3}`, `{"float": 3.0}`,
`{"float": "nan"}`, `{"value": "x"}`, `{"list": [...]}`), so ints, bools and floats stay distinct
and the round trip is exact. Dims are JSON ints, or the canonical text of a symbolic expression.

Versions: `major.minor`. A minor version only adds optional fields, so this code reads any 1.x
document (fields it does not know are ignored); a document of another major version is refused
with `SchemaVersionError`. The tables in `serialize_tables` drive the writer and reader and derive the
checked-in `schema.json` (see `torchsmith.ir.json_schema`); regenerate it after a change with
`python -m torchsmith.ir.json_schema --write-schema`, after bumping `SCHEMA_VERSION`.
"""

import json
import re
from pathlib import Path

from torchsmith.ir.__about__ import __version__
from torchsmith.ir.errors import SchemaVersionError, SerializationError
from torchsmith.ir.gc_pause import paused_gc
from torchsmith.ir.graph import Graph
from torchsmith.ir.json_codec import Reader, Writer
from torchsmith.ir.serialize_tables import SCHEMA_VERSION, Malformed, json_kind, version_text

__all__ = ["SCHEMA_VERSION", "dumps", "from_json", "load", "loads", "save", "to_json"]

_VERSION_RE = re.compile(r"^(\d+)\.(\d+)$")


def to_json(graph: Graph) -> dict:
    """The JSON document (plain dicts and lists) of `graph`; `from_json` reads it back exactly."""
    with paused_gc():
        return _to_json(graph)


def _to_json(graph: Graph) -> dict:
    try:
        body = Writer().graph(graph)
    except Malformed as e:
        raise SerializationError(f"cannot write graph {graph.name}: {e.at('graph').describe()}") from None
    return {"schema_version": version_text(), "producer": f"torchsmith-ir {__version__}", "graph": body}


def read_version(doc: dict) -> tuple[int, int]:
    """The schema version of a document; raises SchemaVersionError for another major version."""
    text = doc.get("schema_version")
    match = _VERSION_RE.match(text) if type(text) is str else None
    if match is None:
        raise SerializationError(
            f"schema_version: expected a 'major.minor' string such as {version_text()!r}, "
            f"got {json_kind(text)}; "
            "is this a torchsmith.ir graph document?"
        )
    version = (int(match[1]), int(match[2]))
    if version[0] != SCHEMA_VERSION[0]:
        producer = doc.get("producer")
        by = f" by {producer}" if type(producer) is str else ""
        if version[0] > SCHEMA_VERSION[0]:
            advice = (f"upgrade torchsmith-ir (pip install -U torchsmith-ir) to a release that reads schema "
                      f"{version[0]}.x, or write the graph again with this torchsmith-ir")
        else:
            advice = (f"write the graph again with this torchsmith-ir, or read it with an older release "
                      f"that reads schema {version[0]}.x")
        raise SchemaVersionError(
            f"this graph was written{by} in JSON schema version {text}, but torchsmith-ir {__version__} "
            f"reads schema {SCHEMA_VERSION[0]}.x (up to {version_text()}): {advice}"
        )
    return version


def from_json(doc) -> Graph:
    """Read a graph from its JSON document (as `to_json` writes it, or any 1.x document).

    Raises SchemaVersionError for a document of another major version, and SerializationError
    naming the place in the document (e.g. `graph.nodes[3].args[1]`) for anything malformed.
    """
    if type(doc) is not dict:
        raise SerializationError(f"expected an object with schema_version and graph, got {json_kind(doc)}")
    reader = Reader(read_version(doc))
    if "graph" not in doc:
        raise SerializationError("the document has no 'graph' field")
    try:
        with paused_gc():
            return reader.graph(doc["graph"])
    except Malformed as e:
        raise SerializationError(e.at("graph").describe()) from None
    except RecursionError:
        raise SerializationError("graph: arguments are nested too deeply to read") from None
    except (KeyError, TypeError, ValueError, AttributeError, IndexError) as e:  # safety net: no bare errors
        raise SerializationError(f"graph: cannot read it ({type(e).__name__}: {e})") from None


def dumps(graph: Graph, indent: int | None = None) -> str:
    """The JSON text of `graph` (compact unless `indent` is given)."""
    separators = (",", ":") if indent is None else (",", ": ")
    doc = to_json(graph)
    with paused_gc():
        return json.dumps(doc, indent=indent, separators=separators, allow_nan=False)


def loads(text: str | bytes) -> Graph:
    """Read a graph from JSON text."""
    try:
        with paused_gc():
            doc = json.loads(text)
    except json.JSONDecodeError as e:
        raise SerializationError(f"not valid JSON: {e.msg} at line {e.lineno}, column {e.colno}") from None
    except (UnicodeDecodeError, RecursionError) as e:
        raise SerializationError(f"not readable JSON: {e}") from None
    return from_json(doc)


def save(graph: Graph, path) -> None:
    """Write `graph` as JSON to `path`."""
    Path(path).write_text(dumps(graph) + "\n", encoding="utf-8")


def load(path) -> Graph:
    """Read a graph saved with `save`."""
    return loads(Path(path).read_text(encoding="utf-8"))
