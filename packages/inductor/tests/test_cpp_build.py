"""The disk cache: a second process loads the library it finds instead of running the compiler."""

import json
import os
import subprocess
import sys

import pytest

from torchsmith.inductor import BuildError, load_library
from torchsmith.inductor.cpp.build import CXX_FLAGS, build_key, cache_dir

SOURCE = 'extern "C" long torchsmith_cache_probe(long a) { return a * 3 + 1; }\n'

SECOND_PROCESS = """
import json, sys
from torchsmith.inductor import BUILD_STATS, load_library
library = load_library(sys.argv[1])
print(json.dumps({"value": library.torchsmith_cache_probe(4), "compiled": BUILD_STATS.compiled,
                  "disk_hits": BUILD_STATS.disk_hits}))
"""


def test_second_process_hits_the_disk_cache():
    assert load_library(SOURCE).torchsmith_cache_probe(2) == 7
    key = build_key(SOURCE)
    assert (cache_dir() / key[:2] / f"{key}.json").exists()
    assert len(list((cache_dir() / key[:2]).glob(f"{key}.*.so"))) == 1
    done = subprocess.run(
        [sys.executable, "-c", SECOND_PROCESS, SOURCE],
        capture_output=True,
        text=True,
        env=dict(os.environ),
        check=True,
    )
    report = json.loads(done.stdout)
    assert report == {"value": 13, "compiled": 0, "disk_hits": 1}


def test_key_depends_on_source_and_flags():
    assert build_key(SOURCE) != build_key(SOURCE + "\n")
    assert build_key(SOURCE) != build_key(SOURCE, CXX_FLAGS[1:])


def test_compiler_errors_are_reported_with_the_source_path():
    with pytest.raises(BuildError, match=r"compilation failed[\s\S]*error"):
        load_library('extern "C" int broken( { }\n')
