"""One exception root: every package's public errors derive from `torchsmith.ir.TorchsmithError`,
which every package's top level (and `torchsmith`) exports, so `except TorchsmithError` catches
an error from any stage."""

import importlib
import inspect

import pytest

import torchsmith
from torchsmith.ir import TorchsmithError

PACKAGES = ("torchsmith.ir", "torchsmith.capture", "torchsmith.autograd_aot", "torchsmith.prims",
            "torchsmith.inductor", "torchsmith")
ERROR_MODULES = ("torchsmith.ir.errors", "torchsmith.capture.errors", "torchsmith.autograd_aot.errors",
                 "torchsmith.prims.errors", "torchsmith.inductor.errors", "torchsmith.errors")


def _exception_classes(module) -> dict[str, type]:
    """The public exception classes a module holds (warnings are not errors)."""
    found = {}
    for name, obj in vars(module).items():
        if name.startswith("_") or not inspect.isclass(obj):
            continue
        if issubclass(obj, BaseException) and not issubclass(obj, Warning):
            found[f"{module.__name__}.{name}"] = obj
    return found


def _public_errors() -> dict[str, type]:
    found = {}
    for name in PACKAGES + ERROR_MODULES:
        found.update(_exception_classes(importlib.import_module(name)))
    return found


def test_every_public_error_derives_from_the_root():
    errors = _public_errors()
    # the package roots and a few leaves, so the walk above cannot come back empty and pass
    for name in ("torchsmith.ir.errors.IRError", "torchsmith.capture.errors.CaptureError",
                 "torchsmith.autograd_aot.errors.AotAutogradError", "torchsmith.prims.errors.PrimsError",
                 "torchsmith.inductor.errors.InductorError", "torchsmith.errors.StageError",
                 "torchsmith.capture.Unsupported", "torchsmith.inductor.LoweringError",
                 "torchsmith.prims.DecompositionError", "torchsmith.ir.VerifyError"):
        assert name in errors, name
    outside = sorted(name for name, cls in errors.items() if not issubclass(cls, TorchsmithError))
    assert outside == []


@pytest.mark.parametrize("package", PACKAGES)
def test_every_package_exports_the_one_root(package):
    assert importlib.import_module(package).TorchsmithError is TorchsmithError


def test_the_root_keeps_each_error_s_other_bases():
    assert issubclass(torchsmith.InvalidOptionError, ValueError)
    assert torchsmith.TorchsmithError is TorchsmithError
    assert TorchsmithError.__bases__ == (Exception,)


def test_one_except_clause_catches_any_stage_s_error():
    from torchsmith.ir import GraphBuilder, parse_graph
    from torchsmith.prims import decompose

    with pytest.raises(TorchsmithError):
        parse_graph("graph g(%x: f32[4] cpu):\n  return (%y)\n")
    b = GraphBuilder("g")
    x = b.input("x", "f32[4] cpu")
    graph = b.build(b.op("aten.relu.default", x))
    with pytest.raises(TorchsmithError):
        decompose(graph, on_missing="sometimes")
    with pytest.raises(TorchsmithError):
        torchsmith.compile(lambda x: x, mode="no such mode")
