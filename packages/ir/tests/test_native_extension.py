"""Where native extensions are built and what is loaded from there (`native_extension`)."""

import os
import stat
from pathlib import Path

import pytest

from torchsmith.ir.native_extension import NativeExtension, NoNative

SOURCE = Path(__file__)  # any file: these tests build nothing


def _extension():
    return NativeExtension("torchsmith_test_extension", SOURCE, "test extension",
                           switch="TORCHSMITH_TEST_NATIVE")


def test_a_library_whose_recorded_hash_differs_is_not_loaded(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCHSMITH_NATIVE_DIR", str(tmp_path / "native"))
    extension = _extension()
    plan = extension.build_plan()
    plan["library"].write_bytes(b"not a library")
    plan["digest"].write_text("0" * 64)
    assert extension.load_verified(plan) is False
    assert extension.loaded() is None


def test_a_library_that_is_not_an_extension_is_not_loaded(tmp_path, monkeypatch):
    import hashlib

    monkeypatch.setenv("TORCHSMITH_NATIVE_DIR", str(tmp_path / "native"))
    extension = _extension()
    plan = extension.build_plan()
    plan["library"].write_bytes(b"not a library")
    plan["digest"].write_text(hashlib.sha256(b"not a library").hexdigest())
    assert extension.load_verified(plan) is False


def test_a_directory_others_may_write_is_refused(tmp_path, monkeypatch):
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o777)
    monkeypatch.setenv("TORCHSMITH_NATIVE_DIR", str(shared))
    with pytest.raises(NoNative, match="not private"):
        _extension().build_plan()
    private = tmp_path / "private"
    monkeypatch.setenv("TORCHSMITH_NATIVE_DIR", str(private))
    _extension().build_plan()
    assert stat.S_IMODE(os.stat(private).st_mode) == 0o700


def test_the_switch_turns_it_off(monkeypatch):
    monkeypatch.setenv("TORCHSMITH_TEST_NATIVE", "0")
    extension = _extension()
    extension.request()
    assert not extension.enabled() and extension.wait(0) is False and extension.loaded() is None


def test_a_callback_waits_for_the_extension_and_runs_once_it_is_published():
    extension = _extension()
    extension._building = True  # as while the build runs
    called = []
    extension.when_ready(lambda: called.append(extension.loaded()))
    assert called == []
    extension.publish("module")
    assert called == ["module"]
    extension.when_ready(lambda: called.append("now"))
    assert called == ["module", "now"]
