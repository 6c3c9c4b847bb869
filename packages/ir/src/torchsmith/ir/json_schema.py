"""The checked-in description of the JSON form (`schema.json`), derived from the serializer's tables,
and a small validator for documents (a subset of JSON Schema, enough for this description).

    >>> problems = validate_document(to_json(graph))  # doctest: +SKIP
    >>> problems
    []

`describe_schema()` builds the description from `serialize_tables`; a test holds the checked-in
file equal to it. After changing a table: bump `SCHEMA_VERSION` in serialize_tables.py (minor for new
optional fields, major otherwise) and run `python -m torchsmith.ir.json_schema --write-schema`.
"""

import hashlib
import json
import re
import sys
from pathlib import Path

from torchsmith.ir.serialize import SCHEMA_VERSION, version_text
from torchsmith.ir.serialize_tables import ARG_KINDS, DEFINITIONS, OBJECTS, TYPE_OBJECTS

SCHEMA_PATH = Path(__file__).with_name("schema.json")
REGENERATE = "python -m torchsmith.ir.json_schema --write-schema"

_RULES = (
    "Every argument is an object with exactly one key naming its kind. Values are referred to by name "
    "and must be defined (as a graph input or an earlier node output) before use. A minor version only "
    "adds optional fields: a reader of major version M reads every M.x document and ignores fields it "
    "does not know; a document of another major version is refused."
)


def _object_schema(name: str) -> dict:
    spec = OBJECTS[name]
    properties = {}
    for field in spec.fields:
        properties[field.name] = dict(field.schema, description=field.doc) if field.doc else field.schema
    return {
        "description": spec.doc,
        "type": "object",
        "properties": properties,
        "required": list(spec.required),
        "additionalProperties": False,
    }


def describe_schema() -> dict:
    """The JSON Schema-style description of the document, derived from the serializer's tables."""
    defs = {name: _object_schema(name) for name in OBJECTS}
    defs["type"] = {
        "description": "the type of a value",
        "oneOf": [{"$ref": f"#/$defs/{n}"} for n in TYPE_OBJECTS],
    }
    defs["arg"] = {
        "description": "an op argument: an object with one key, its kind",
        "oneOf": [
            {
                "description": kind.doc or kind.tag,
                "type": "object",
                "properties": {kind.tag: kind.payload},
                "required": [kind.tag],
                "additionalProperties": False,
            }
            for kind in ARG_KINDS
        ],
    }
    defs.update(DEFINITIONS)
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "torchsmith.ir graph document",
        "description": _RULES,
        "schema_version": version_text(SCHEMA_VERSION),
        "$ref": "#/$defs/document",
        "$defs": defs,
    }


def schema_text(schema: dict | None = None) -> str:
    return json.dumps(describe_schema() if schema is None else schema, indent=2) + "\n"


def write_schema(path: Path = SCHEMA_PATH) -> None:
    """Write the derived description to the checked-in file."""
    Path(path).write_text(schema_text(), encoding="utf-8")


def _without_descriptions(node):
    if isinstance(node, dict):
        return {k: _without_descriptions(v) for k, v in node.items() if k != "description"}
    if isinstance(node, list):
        return [_without_descriptions(v) for v in node]
    return node


def schema_digest(schema: dict | None = None) -> str:
    """A digest of what the description says about the format, leaving out its prose, so that
    rewording a description needs no new version but any change to the format does."""
    form = _without_descriptions(describe_schema() if schema is None else schema)
    form.pop("schema_version", None)
    return hashlib.sha256(json.dumps(form, sort_keys=True).encode()).hexdigest()


def schema_file_problem(path: Path = SCHEMA_PATH) -> str | None:
    """None when the checked-in file matches the code, else what to do about it."""
    try:
        checked_in = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as e:
        return f"cannot read the checked-in schema {path} ({e}); regenerate it with `{REGENERATE}`"
    derived = describe_schema()
    if checked_in == derived:
        return None
    same_version = checked_in.get("schema_version") == derived["schema_version"]
    same_version = same_version and schema_digest(checked_in) != schema_digest(derived)
    bump = (
        f"the JSON form changed but SCHEMA_VERSION is still {derived['schema_version']}: bump it in "
        "torchsmith/ir/serialize_tables.py (minor if only optional fields were added, else major), then "
        if same_version
        else ""
    )
    return f"{path} does not match the serializer's tables: {bump}regenerate it with `{REGENERATE}`"


# ---- validator ---------------------------------------------------------------------------------

_JSON_TYPES = {
    "object": lambda x: type(x) is dict,
    "array": lambda x: type(x) is list,
    "string": lambda x: type(x) is str,
    "integer": lambda x: type(x) is int,
    "number": lambda x: type(x) in (int, float),
    "boolean": lambda x: type(x) is bool,
    "null": lambda x: x is None,
}


def validate_document(doc, schema: dict | None = None) -> list[str]:
    """Problems of `doc` against the description (`describe_schema()` by default), each as
    `path: what`; an empty list means the document is valid. Supports the keywords the
    description uses: $ref, type, properties, required, additionalProperties, items,
    prefixItems, minItems, maxItems, oneOf, enum, const, pattern."""
    schema = describe_schema() if schema is None else schema
    problems: list[str] = []
    _check(doc, schema, schema, "", problems)
    return problems


def _resolve(node: dict, root: dict) -> dict:
    while "$ref" in node:
        node = root["$defs"][node["$ref"].removeprefix("#/$defs/")]
    return node


def _check(x, node: dict, root: dict, path: str, problems: list[str]) -> None:
    node = _resolve(node, root)
    where = path.lstrip(".") or "document"
    if "type" in node and not _JSON_TYPES[node["type"]](x):
        problems.append(f"{where}: expected {node['type']}, got {type(x).__name__}")
        return
    if "const" in node and not _same(x, node["const"]):
        problems.append(f"{where}: expected {node['const']!r}, got {x!r}")
    if "enum" in node and not any(_same(x, e) for e in node["enum"]):
        problems.append(f"{where}: {x!r} is not one of {node['enum']}")
    if "pattern" in node and type(x) is str and not re.search(node["pattern"], x):
        problems.append(f"{where}: {x!r} does not match {node['pattern']}")
    if "oneOf" in node:
        matches = [alt for alt in node["oneOf"] if not _problems(x, alt, root)]
        if len(matches) != 1:
            detail = _closest(x, node["oneOf"], root, path)
            problems.append(detail or f"{where}: matches {len(matches)} of the alternatives, not exactly one")
    if type(x) is dict:
        properties = node.get("properties", {})
        for name in node.get("required", ()):
            if name not in x:
                problems.append(f"{where}: missing required field {name!r}")
        extra = node.get("additionalProperties", True)
        for key, item in x.items():
            if key in properties:
                _check(item, properties[key], root, f"{path}.{key}", problems)
            elif extra is False:
                problems.append(f"{where}: unexpected field {key!r}")
            elif isinstance(extra, dict):
                _check(item, extra, root, f"{path}.{key}", problems)
    if type(x) is list:
        if len(x) < node.get("minItems", 0) or len(x) > node.get("maxItems", len(x)):
            problems.append(f"{where}: has {len(x)} items")
        prefix = node.get("prefixItems", [])
        for i, item in enumerate(x):
            sub = prefix[i] if i < len(prefix) else node.get("items")
            if sub is not None:
                _check(item, sub, root, f"{path}[{i}]", problems)


def _problems(x, node: dict, root: dict) -> list[str]:
    found: list[str] = []
    _check(x, node, root, "", found)
    return found


def _closest(x, alternatives: list, root: dict, path: str) -> str | None:
    """For a tagged object that fails, report the problems inside the alternative of its tag."""
    if type(x) is not dict or len(x) != 1:
        return None
    (tag,) = x
    for alt in alternatives:
        alt = _resolve(alt, root)
        if tag in alt.get("properties", {}):
            inner: list[str] = []
            _check(x, alt, root, path, inner)
            return "; ".join(inner) or None
    return f"{path.lstrip('.') or 'document'}: unknown kind {tag!r}"


def _same(a, b) -> bool:
    return type(a) is type(b) and a == b


def main(argv: list[str]) -> int:
    """`python -m torchsmith.ir.json_schema --write-schema | --check-schema`."""
    if argv == ["--write-schema"]:
        write_schema()
        print(f"wrote {SCHEMA_PATH} (schema {version_text()})")
        return 0
    if argv == ["--check-schema"]:
        problem = schema_file_problem()
        print(problem or f"{SCHEMA_PATH} matches the code (schema {version_text()})")
        return 1 if problem else 0
    print("usage: python -m torchsmith.ir.json_schema --write-schema | --check-schema", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
