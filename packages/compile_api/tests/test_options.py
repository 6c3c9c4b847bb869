"""compile()'s arguments: modes, the options dict, backends; a bad value fails at once, listing valid ones."""

import pytest
import torch

import torchsmith
from torchsmith.options import OPTIONS, resolve_options


def recording_backend():
    """A backend that takes options and remembers them."""
    eager = torchsmith.lookup_backend("eager")

    def backend(graph, example_inputs, options=None):
        backend.seen.append(options)
        return eager(graph, example_inputs)

    backend.seen = []
    return backend


def test_unknown_mode_lists_the_modes():
    with pytest.raises(torchsmith.InvalidOptionError) as info:
        torchsmith.compile(lambda x: x, backend="eager", mode="fastest")
    message = str(info.value)
    assert "unknown mode 'fastest'" in message
    for mode in ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs"):
        assert mode in message


def test_unknown_option_lists_the_options_with_their_meaning():
    with pytest.raises(torchsmith.InvalidOptionError) as info:
        torchsmith.compile(lambda x: x, backend="eager", options={"triton.cudagraph": True})
    message = str(info.value)
    assert "unknown option 'triton.cudagraph'" in message
    for key in OPTIONS:
        assert key in message
    assert "OpenMP threads" in message


def test_unknown_backend_lists_the_backends():
    with pytest.raises(torchsmith.BackendError, match=r"unknown backend 'indcutor'; known backends: .*eager"):
        torchsmith.compile(lambda x: x, backend="indcutor")


def test_errors_come_before_the_function_is_given():
    # as a decorator factory: the bad option fails at the @ line, not at the first call
    with pytest.raises(torchsmith.InvalidOptionError):
        torchsmith.compile(backend="eager", options={"nope": 1})


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"fallback": "ignore"}, r"option 'fallback' is one of 'eager', 'raise'; got 'ignore'"),
        ({"max_autotune": 1}, r"option 'max_autotune' takes bool, got 1"),
        ({"cpp.threads": True}, r"option 'cpp.threads' takes int or None, got True"),
        ({"cpp.threads": 0}, r"at least 1"),
        ("fallback=eager", r"options must be a dict"),
    ],
)
def test_option_values_are_checked(options, match):
    with pytest.raises(torchsmith.InvalidOptionError, match=match):
        torchsmith.compile(lambda x: x, backend="eager", options=options)


def test_invalid_dynamic_is_refused():
    with pytest.raises(torchsmith.InvalidOptionError, match="dynamic must be None, True or False"):
        torchsmith.compile(lambda x: x, backend="eager", dynamic="yes")


@pytest.mark.parametrize(
    ("mode", "autotune", "cudagraphs"),
    [
        (None, False, False),
        ("default", False, False),
        ("reduce-overhead", False, True),
        ("max-autotune", True, True),
        ("max-autotune-no-cudagraphs", True, False),
    ],
)
def test_modes_are_presets_of_options(mode, autotune, cudagraphs):
    resolved = resolve_options(mode, None)
    assert resolved["max_autotune"] is autotune and resolved["triton.cudagraphs"] is cudagraphs
    assert resolved["mode"] == (mode or "default") and resolved["fallback"] == "eager"


def test_backends_with_an_options_keyword_receive_the_resolved_dict():
    backend = recording_backend()
    f = torchsmith.compile(lambda x: x * 2, backend=backend, mode="max-autotune",
                           options={"triton.cudagraphs": False, "cpp.threads": 2})
    torch.testing.assert_close(f(torch.ones(2)), torch.full((2,), 2.0))
    (options,) = backend.seen
    assert options == {"fallback": "eager", "max_autotune": True, "triton.cudagraphs": False,
                       "cpp.threads": 2, "check": False, "check.repro_dir": None,
                       "ddp.split_at_buckets": True, "cache.size_limit_mb": None, "mode": "max-autotune"}


def test_the_cache_size_limit_option_bounds_the_disk_caches(monkeypatch):
    from torchsmith.inductor.runtime import cache_files

    monkeypatch.setattr(cache_files, "_size_limit_mb", None)
    f = torchsmith.compile(lambda x: x * 3 + 1, options={"cache.size_limit_mb": 64})
    torch.testing.assert_close(f(torch.ones(4)), torch.full((4,), 4.0))
    assert cache_files.size_limit_bytes() == 64 * 2**20
    with pytest.raises(torchsmith.InvalidOptionError, match="at least 0"):
        torchsmith.compile(lambda x: x, options={"cache.size_limit_mb": -1})


def test_a_backend_without_options_refuses_modes_it_would_ignore():
    with pytest.raises(torchsmith.InvalidOptionError, match=r"backend 'eager' takes no options.*autotune"):
        torchsmith.compile(lambda x: x, backend="eager", mode="max-autotune")
    # the fallback key is compile_api's own, so any backend accepts it
    f = torchsmith.compile(lambda x: x + 1, backend="eager", options={"fallback": "raise"})
    torch.testing.assert_close(f(torch.zeros(1)), torch.ones(1))


def test_the_inductor_backend_takes_options():
    from torchsmith.fallback import accepts_options

    assert accepts_options(torchsmith.lookup_backend("inductor"))


def test_disable_validates_but_compiles_nothing():
    fn = lambda x: x  # noqa: E731
    assert torchsmith.compile(fn, backend="eager", disable=True) is fn
    with pytest.raises(torchsmith.InvalidOptionError):
        torchsmith.compile(fn, backend="eager", disable=True, mode="turbo")


def test_compile_has_torch_compiles_signature():
    import inspect

    ours = inspect.signature(torchsmith.compile).parameters
    theirs = inspect.signature(torch.compile).parameters
    assert list(ours) == [name for name in theirs if name in ours] == [
        "model", "fullgraph", "dynamic", "backend", "mode", "options", "disable"]
    for name in ours:
        assert ours[name].kind == theirs[name].kind, name
        if name != "backend":  # torch's default is None (newer) or "inductor" (older), meaning the inductor
            assert ours[name].default == theirs[name].default, name
    assert ours["backend"].default == "inductor"


def test_public_api_snapshot():
    # an accidental removal or rename fails here; additions are deliberate edits of this list
    assert sorted(torchsmith.__all__) == sorted([
        "AccuracyWarning", "BackendError", "BreakReason", "CaptureError", "ExplainOutput", "FallbackWarning",
        "FullGraphError", "InvalidOptionError", "MODES", "OPTIONS", "StageError", "TorchsmithError",
        "Unsupported",
        "__version__", "allow_in_graph", "compile", "disable", "dump_ir", "explain", "fx_backend",
        "list_backends", "lookup_backend", "mark_dynamic", "mark_static", "register_backend",
        "register_fx_backend", "reset", "set_logs",
    ])
    for name in torchsmith.__all__:
        assert hasattr(torchsmith, name), name



def test_cpp_threads_reaches_the_inductor_and_results_stay_eagers():
    def f(x):
        return (x * 2).relu().sum(1)

    x = torch.randn(64, 33)
    # fallback="raise": a refused option or a failed compile raises instead of running eagerly
    out = torchsmith.compile(f, options={"cpp.threads": 1, "fallback": "raise"})(x)
    torch.testing.assert_close(out, f(x))
