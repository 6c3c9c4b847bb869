"""The torchsmith namespace ties the separately installed packages together."""

import importlib
import importlib.metadata

import pytest

import torchsmith

STAGES = {
    "ir": "torchsmith-ir",
    "capture": "torchsmith-capture",
    "autograd_aot": "torchsmith-autograd-aot",
    "prims": "torchsmith-prims",
    "inductor": "torchsmith-inductor",
}


def test_torchsmith_exposes_its_version():
    assert torchsmith.__version__ == importlib.metadata.version("torchsmith")


@pytest.mark.parametrize("stage", sorted(STAGES))
def test_stage_is_importable_through_the_namespace(stage):
    module = importlib.import_module(f"torchsmith.{stage}")
    assert getattr(torchsmith, stage) is module


@pytest.mark.parametrize("stage", sorted(STAGES))
def test_stage_version_matches_its_distribution(stage):
    about = importlib.import_module(f"torchsmith.{stage}.__about__")
    assert about.__version__ == importlib.metadata.version(STAGES[stage])
