"""Cross-package tests build C++ (backend="inductor") into one cache directory per test session:
runs never depend on an earlier run's cache, and programs within a run share what they built."""

import os

import pytest


@pytest.fixture(scope="session", autouse=True)
def session_cache_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("torchsmith_cache")
    old = os.environ.get("TORCHSMITH_CACHE_DIR")
    os.environ["TORCHSMITH_CACHE_DIR"] = str(path)
    yield path
    if old is None:
        os.environ.pop("TORCHSMITH_CACHE_DIR", None)
    else:
        os.environ["TORCHSMITH_CACHE_DIR"] = old
