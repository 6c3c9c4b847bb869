"""torch_startup patches the closures of torch's `_disable_dynamo` wrappers by their free variable
names; on a torch whose wrapper looks different it must change nothing and raise nothing."""

import functools
import subprocess
import sys
import textwrap

import pytest

CHANGED_WRAPPERS = {
    "other free variables": """
        import functools
        def _disable_dynamo(fn=None, recursive=True):
            func, deep = fn, recursive
            @functools.wraps(fn)
            def inner(*args, **kwargs):
                disable_fn = getattr(func, "__dynamo_disable", None)
                return (disable_fn or func)(*args, **kwargs) if deep or True else None
            return inner
    """,
    "no cache attribute": """
        def _disable_dynamo(fn=None, recursive=True):
            @functools.wraps(fn)
            def inner(*args, **kwargs):
                marker = recursive
                return fn(*args, **kwargs)
            return inner
    """,
    "raises when probed": """
        def _disable_dynamo(fn=None, recursive=True):
            raise RuntimeError("a different torch")
    """,
    "not a function": """
        _disable_dynamo = None
    """,
}


def test_a_changed_wrapper_is_left_alone():
    # one fresh process for all the simulated torches: none may leak into this test process
    cases = "\n".join(
        f"def case_{k}():\n{textwrap.indent(textwrap.dedent(wrapper), '    ')}    return _disable_dynamo\n"
        for k, wrapper in enumerate(CHANGED_WRAPPERS.values())
    )
    code = cases + textwrap.dedent(
        f"""
        import functools, sys, torch, torch._compile
        from torchsmith.ir import torch_startup
        before = torch._compile._disable_dynamo
        for k in range({len(CHANGED_WRAPPERS)}):
            torch._compile._disable_dynamo = globals()[f"case_{{k}}"]()
            assert torch_startup.defer_dynamo_import() == 0, k
            assert torch_startup.defer_dynamo_import(lambda: None) == 0, k
        torch._compile._disable_dynamo = before
        a = torch.empty(4, 8, device="meta")
        assert torch.nn.functional.gelu(a).shape == (4, 8)
        print("ok")
        """
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"


def test_a_closure_with_unexpected_contents_is_skipped():
    from torchsmith.ir import torch_startup

    code = torch_startup._inner_code()
    if code is None:
        pytest.skip("this torch's wrapper is not the one torch_startup patches")
    fake = type(lambda: None)(code, {}, None, None, (_cell("not callable"), _cell("not a bool")))
    assert torch_startup._wrapped_function(fake, code) is None
    assert torch_startup._wrapped_function(functools.partial(print), code) is None


def _cell(value):
    return (lambda: value).__closure__[0]
