"""Environments and checks for the torchsmith monorepo.

    nox -s tests            every package and the cross-package tests/ in one environment
    nox -s tests_isolated   each package alone, with only its declared dependencies, and its README
    nox -s tests_pythons    capture's tests and the conformance suite on Python 3.12 and 3.13
    nox -s zoo              every transformers architecture of tests/zoo (`tests` runs a fast subset)
    nox -s lint             ruff, and the layout rules of docs/architecture.md
    nox -s bench            every benchmarks/bench_*.py
    nox -s demo             the demo

Arguments after `--` go to pytest (tests, tests_isolated) or to each benchmark script (bench).
Environments are pip virtualenvs: uv would not see the CPU build of torch on the dev machines'
disk and would download a multi-GB CUDA build. For the same reason torch is always installed
first, pinned by TORCHSMITH_TORCH (default torch==2.13.0), so that the packages' own `torch>=2.11`
is already satisfied when pip reads it.
"""

from __future__ import annotations

import json
import os
import pathlib
import re
import tomllib

import nox

ROOT = pathlib.Path(__file__).resolve().parent
PACKAGES_DIR = ROOT / "packages"
PACKAGES = ["ir", "capture", "autograd_aot", "prims", "inductor", "compile_api"]
# `tests` runs on the Python nox runs under (3.11 on the dev machines); these run what depends on
# the bytecode version (capture and the conformance suite) on the other supported ones.
OTHER_PYTHONS = ["3.12", "3.13"]
TORCH = os.environ.get("TORCHSMITH_TORCH", "torch==2.13.0")
RUFF = "ruff==0.17.6"
# The C++ extensions (guards' tensor checks, kernel calls) off: sessions that do not test them
# skip their build.
NO_NATIVE = {"TORCHSMITH_NATIVE_GUARDS": "0", "TORCHSMITH_NATIVE_CALLS": "0"}
DEMO_MODULE = "torchsmith.demo"
# The example plug-in backend, installed as a wheel into the isolated environment that holds every
# package (compile_api's) and used by name there.
PLUGIN_EXAMPLE = "custom_codegen"
PLUGIN_HOST = "compile_api"

nox.options.default_venv_backend = "virtualenv"
nox.options.reuse_venv = "yes"
nox.options.sessions = ["tests", "lint"]


def _distribution_to_folder() -> dict[str, str]:
    return {_project(folder)["name"]: folder for folder in PACKAGES}


def _project(folder: str) -> dict:
    return tomllib.loads((PACKAGES_DIR / folder / "pyproject.toml").read_text())["project"]


def _with_torchsmith_dependencies(folder: str) -> list[str]:
    """`folder` and every torchsmith package it needs, transitively, read from pyproject.toml."""
    folder_of = _distribution_to_folder()
    needed, pending = [], [folder]
    while pending:
        current = pending.pop()
        if current in needed:
            continue
        needed.append(current)
        for requirement in _project(current).get("dependencies", []):
            name = re.match(r"[A-Za-z0-9._-]+", requirement).group(0).lower().replace("_", "-")
            if name in folder_of:
                pending.append(folder_of[name])
    return needed


def _install_torch(session: nox.Session) -> None:
    # --no-compile: byte-compiling all of torch's files takes longer than unpacking the wheel, and
    # Python compiles the few modules a run imports on its own.
    session.install("--no-compile", TORCH)


def _install_all_editable(session: nox.Session, extras: str = "") -> None:
    _install_torch(session)
    # One pip command, so pip resolves torchsmith-* to these folders and never looks for them on PyPI.
    session.install(*[arg for folder in PACKAGES for arg in ("-e", f"{PACKAGES_DIR / folder}{extras}")])


@nox.session
def tests(session: nox.Session) -> None:
    """All packages (editable) and the cross-package tests in one environment."""
    _install_all_editable(session, extras="[test]")
    # GPT-2 and BERT for tests/test_training_e2e.py; after torch, and with torch's pin repeated so
    # pip keeps the torch already there instead of resolving another build
    session.install("transformers", TORCH)
    # torch's OpInfo database (tests/opinfo) imports torch's test utilities, which need expecttest
    session.install("expecttest")
    # Triton kernels run in Triton's interpreter on CPU in the inductor's test_triton_* files.
    session.install("triton==3.6.0")
    # tests/adversarial fuzzes the IR readers with hypothesis (bounded example counts)
    session.install("hypothesis>=6")
    # the slowest tests listed: CI runs this session against a 30-minute limit
    session.run("pytest", "--durations=25", *session.posargs)


@nox.session(python=OTHER_PYTHONS)
def tests_pythons(session: nox.Session) -> None:
    """capture's tests and the conformance suite on another Python. No CPU build of torch lies on
    disk for these Pythons, so pip takes PyPI's (with its CUDA libraries, unused here) on the first
    run; pyenv users make the interpreters visible with PYENV_VERSION=3.11.7:3.12.1:3.13.0."""
    _install_all_editable(session, extras="[test]")
    junit = os.environ.get("TORCHSMITH_JUNIT_DIR")  # .ci/run counts the tests of every session
    report = [f"--junitxml={junit}/tests_python{session.python}.xml"] if junit else []
    # Every backend on 3.12; on the newest Python the conformance programs run under the eager
    # backend only (capture is the one stage that reads bytecode), which keeps CI's time in bounds.
    backends = "eager" if session.python == OTHER_PYTHONS[-1] else "eager,aot_eager,inductor"
    # The C++ extensions are built and tested in `tests`; a build per Python costs CI ~30 s each.
    session.run("pytest", "packages/capture/tests", "tests/conformance", *report, *session.posargs,
                env={"TORCHSMITH_CONFORMANCE_BACKENDS": backends, **NO_NATIVE})


@nox.session
def zoo(session: nox.Session) -> None:
    """Every architecture of tests/zoo against eager and torch.compile (`tests` runs the fast ones)."""
    _install_all_editable(session, extras="[test]")
    session.install("transformers", TORCH)  # after torch, with its pin, so pip keeps that build
    # the slowest rows show where the zoo's time goes (benchmarks/bench_zoo.py times the models)
    session.run("pytest", "tests/zoo", "--durations=20", *session.posargs, env={"TORCHSMITH_ZOO": "full"})


@nox.session
@nox.parametrize("package", PACKAGES, ids=PACKAGES)
def tests_isolated(session: nox.Session, package: str) -> None:
    """One package built as a wheel and installed alone with its declared dependencies: its tests,
    then its README's example as a user of that package alone runs it. compile_api's environment,
    which holds every stage, also takes examples/custom_codegen's wheel and runs its README, where
    the plug-in backend is the fresh process's first torchsmith call, by name."""
    _install_torch(session)
    folders = _with_torchsmith_dependencies(package)
    # Local folders in one pip command: pip builds and installs wheels from them (every time, so a
    # reused environment never runs stale code) and never looks for torchsmith-* on PyPI.
    session.install(f"{PACKAGES_DIR / package}[test]", *[str(PACKAGES_DIR / f) for f in folders[1:]])
    if package == "inductor":
        session.install("triton==3.6.0")  # the Triton tests run in Triton's interpreter on CPU
    allowed = {_project(folder)["name"] for folder in folders}
    if package == PLUGIN_HOST:
        allowed.add(_example_project(PLUGIN_EXAMPLE)["name"])  # installed below, on an earlier run
    listing = session.run("python", "-m", "pip", "list", "--format=json", silent=True)
    names = {distribution["name"] for distribution in json.loads(listing)}
    stray = sorted(name for name in names if name.startswith("torchsmith") and name not in allowed)
    if stray:
        session.error(f"the environment for {package} also holds {stray}: rerun with --no-reuse-venv")
    # the C++ extensions are built and tested in `tests` (a build costs CI ~30 s)
    session.run("pytest", f"packages/{package}/tests", *session.posargs, env=NO_NATIVE)
    # tests/doc_blocks.py needs only torch; each README runs in a fresh child, in a temporary folder,
    # with the compile cache inside this environment rather than the user's ~/.cache.
    readme_env = {"TORCHSMITH_CACHE_DIR": os.path.join(session.create_tmp(), "readme-cache")}
    session.run("python", "tests/doc_blocks.py", f"packages/{package}/README.md", env=readme_env)
    if package == PLUGIN_HOST:
        # Its declared dependencies are the torchsmith wheels already here: pip builds this wheel
        # (hatchling) and installs it without fetching anything else.
        session.install(str(ROOT / "examples" / PLUGIN_EXAMPLE))
        session.run("python", "tests/doc_blocks.py", f"examples/{PLUGIN_EXAMPLE}/README.md", env=readme_env)


def _example_project(example: str) -> dict:
    return tomllib.loads((ROOT / "examples" / example / "pyproject.toml").read_text())["project"]


@nox.session
def lint(session: nox.Session) -> None:
    """ruff over the whole tree, then the layout rules (scripts/check_layout.py)."""
    session.install(RUFF)
    session.run("ruff", "check", ".", *session.posargs)
    session.run("python", "scripts/check_layout.py")


@nox.session
def bench(session: nox.Session) -> None:
    """Every benchmarks/bench_*.py; each writes its numbers under benchmarks/results/."""
    scripts = sorted((ROOT / "benchmarks").glob("bench_*.py"))
    if not scripts:
        session.log("no benchmarks/bench_*.py yet: nothing to run")
        return
    _install_all_editable(session)
    # GPT-2 and BERT for bench_aot_memory, the zoo for bench_zoo; after torch, with its pin, so torch stays
    session.install("transformers", TORCH)
    session.install("expecttest")  # bench_opinfo reads torch's OpInfo database
    for script in scripts:
        session.run("python", str(script.relative_to(ROOT)), *session.posargs)


@nox.session
def demo(session: nox.Session) -> None:
    """The demo: python -m torchsmith.demo compiles a small GPT (random weights) and prints eager vs
    compiled time, graphs, breaks and kernels. Arguments after `--` go to it (`-- --report DIR`)."""
    _install_all_editable(session)
    probe = f"import importlib.util; print(importlib.util.find_spec({DEMO_MODULE!r}) is not None)"
    found = session.run("python", "-c", probe, silent=True)
    if found.strip() != "True":
        session.skip(f"{DEMO_MODULE} is not written yet")
    session.run("python", "-m", DEMO_MODULE, *session.posargs)
