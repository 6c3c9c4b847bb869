"""Every test session builds C++ into its own cache directory, so runs never depend on earlier ones."""

import os

import pytest


@pytest.fixture(scope="session", autouse=True)
def private_cache_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("torchsmith_cache")
    old = os.environ.get("TORCHSMITH_CACHE_DIR")
    os.environ["TORCHSMITH_CACHE_DIR"] = str(path)
    yield path
    if old is None:
        os.environ.pop("TORCHSMITH_CACHE_DIR", None)
    else:
        os.environ["TORCHSMITH_CACHE_DIR"] = old


@pytest.fixture(autouse=True)
def seeded():
    """Random inputs are the same on every run, so a failure reproduces."""
    import torch

    torch.manual_seed(0)
