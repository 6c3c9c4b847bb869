"""Checks the monorepo layout that docs/architecture.md fixes and that no test would notice breaking.

- every package has pyproject.toml, README.md, tests/ and src/torchsmith/;
- stage packages are PEP 420 portions (no src/torchsmith/__init__.py); compile_api alone owns it,
  and it begins by extending the namespace path;
- the torchsmith packages a package declares follow the pipeline's order in docs/architecture.md;
- a package's source imports no torchsmith package that it does not declare.

Run from anywhere: `python scripts/check_layout.py` (the lint session does). Needs only Python.
"""

from __future__ import annotations

import ast
import pathlib
import re
import sys
import tomllib

PACKAGES_DIR = pathlib.Path(__file__).resolve().parent.parent / "packages"
NAMESPACE_FIRST_LINE = '__path__ = __import__("pkgutil").extend_path(__path__, __name__)'

# Which torchsmith packages each package may depend on (folder names). Every stage may use ir;
# no stage uses compile_api. Change this table and docs/architecture.md together.
ALLOWED_DEPENDENCIES = {
    "ir": set(),
    "capture": {"ir"},
    "prims": {"ir"},
    "autograd_aot": {"ir", "prims"},
    "inductor": {"ir", "prims"},
    "compile_api": {"ir", "capture", "prims", "autograd_aot", "inductor"},
}


def requirement_name(requirement: str) -> str:
    return re.match(r"[A-Za-z0-9._-]+", requirement).group(0).lower().replace("_", "-")


def imported_torchsmith_packages(source: pathlib.Path) -> set[str]:
    """The names X of every `torchsmith.X` the file imports ('' for bare `torchsmith`)."""
    found = set()
    for node in ast.walk(ast.parse(source.read_text(), filename=str(source))):
        if isinstance(node, ast.Import):
            modules = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module == "torchsmith":
                modules = [f"torchsmith.{alias.name}" for alias in node.names]
            else:
                modules = [node.module]
        else:
            continue
        for module in modules:
            parts = module.split(".")
            if parts[0] == "torchsmith":
                found.add(parts[1] if len(parts) > 1 else "")
    return found


def check() -> list[str]:
    folders = sorted(path.name for path in PACKAGES_DIR.iterdir() if path.is_dir())
    if set(folders) != set(ALLOWED_DEPENDENCIES):
        return [f"packages/ holds {folders}; expected {sorted(ALLOWED_DEPENDENCIES)}"]

    projects = {f: tomllib.loads((PACKAGES_DIR / f / "pyproject.toml").read_text()) for f in folders}
    folder_of_distribution = {p["project"]["name"]: f for f, p in projects.items()}

    problems = []
    for folder in folders:
        where = f"packages/{folder}"
        root = PACKAGES_DIR / folder
        for required in ["README.md", "tests", "src/torchsmith"]:
            if not (root / required).exists():
                problems.append(f"{where}: missing {required}")
        init = root / "src/torchsmith/__init__.py"
        if folder == "compile_api":
            if not init.exists() or not init.read_text().startswith(NAMESPACE_FIRST_LINE + "\n"):
                problems.append(f"{where}: src/torchsmith/__init__.py must begin with {NAMESPACE_FIRST_LINE}")
        elif init.exists():
            problems.append(f"{where}: a stage is a namespace portion; remove src/torchsmith/__init__.py")

        declared = {
            folder_of_distribution[name]
            for name in map(requirement_name, projects[folder]["project"].get("dependencies", []))
            if name in folder_of_distribution
        }
        for extra in sorted(declared - ALLOWED_DEPENDENCIES[folder]):
            problems.append(f"{where}: depends on {extra}, which docs/architecture.md does not allow")

        if folder == "compile_api":
            continue  # it owns torchsmith/ itself and may use every stage
        usable = declared | {folder}
        for source in sorted((root / "src").rglob("*.py")):
            for name in sorted(imported_torchsmith_packages(source) - usable):
                shown = f"torchsmith.{name}" if name else "torchsmith"
                problems.append(
                    f"{source.relative_to(PACKAGES_DIR.parent)}: imports {shown}, "
                    f"which {where}/pyproject.toml does not declare"
                )
    return problems


def main() -> int:
    problems = check()
    for problem in problems:
        print(problem, file=sys.stderr)
    print(f"layout: {len(problems)} problem(s)" if problems else "layout: ok")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
