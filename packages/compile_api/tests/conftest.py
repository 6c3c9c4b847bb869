"""compile_api tests build C++ (backend="inductor") into one cache directory per test session, so runs
never depend on an earlier run's cache; every test starts with no log artifacts on and a fixed seed."""

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


@pytest.fixture(autouse=True)
def quiet_and_seeded():
    import torch

    import torchsmith

    torch.manual_seed(0)
    yield
    torchsmith.set_logs()
