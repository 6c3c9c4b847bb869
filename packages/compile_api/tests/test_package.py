"""The torchsmith distribution owns the namespace's __init__ and finds every other portion."""

import importlib
import importlib.metadata
import pathlib
import re

import pytest

import torchsmith

STAGES = ["ir", "capture", "autograd_aot", "prims", "inductor"]


def test_version_is_a_release_number():
    assert re.fullmatch(r"\d+\.\d+\.\d+", torchsmith.__version__)


def test_version_matches_installed_metadata():
    assert importlib.metadata.version("torchsmith") == torchsmith.__version__


def test_init_extends_the_namespace_path_first():
    source = pathlib.Path(torchsmith.__file__).read_text()
    assert source.startswith('__path__ = __import__("pkgutil").extend_path(__path__, __name__)\n')


def test_has_a_docstring():
    assert torchsmith.__doc__ and torchsmith.__doc__.startswith("torchsmith:")


@pytest.mark.parametrize("stage", STAGES)
def test_stage_portions_are_found_through_the_namespace(stage):
    module = importlib.import_module(f"torchsmith.{stage}")
    assert pathlib.Path(next(iter(module.__path__))).name == stage
