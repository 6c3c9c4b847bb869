"""torchsmith.autograd_aot installs, imports on its own and reports its version."""

import importlib.metadata
import re
import subprocess
import sys

import torchsmith.autograd_aot

DISTRIBUTION = "torchsmith-autograd-aot"

# Imports the stage with a bare namespace standing in for `torchsmith`, so compile_api's
# torchsmith/__init__.py never runs: this is how the stage is seen where compile_api is not installed.
IMPORT_WITHOUT_COMPILE_API = """
import os, sys, types
namespace = types.ModuleType("torchsmith")
portions = [os.path.join(entry, "torchsmith") for entry in sys.path]
namespace.__path__ = [portion for portion in portions if os.path.isdir(portion)]
sys.modules["torchsmith"] = namespace
import torchsmith.autograd_aot
print(torchsmith.autograd_aot.__version__)
"""


def test_version_is_a_release_number():
    assert re.fullmatch(r"\d+\.\d+\.\d+", torchsmith.autograd_aot.__version__)


def test_version_matches_installed_metadata():
    assert importlib.metadata.version(DISTRIBUTION) == torchsmith.autograd_aot.__version__


def test_declares_no_dependency_on_compile_api():
    requirements = importlib.metadata.requires(DISTRIBUTION) or []
    names = {re.match(r"[A-Za-z0-9._-]+", requirement).group(0).lower() for requirement in requirements}
    assert "torchsmith" not in names


def test_imports_without_compile_api():
    result = subprocess.run(
        [sys.executable, "-c", IMPORT_WITHOUT_COMPILE_API], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == torchsmith.autograd_aot.__version__
