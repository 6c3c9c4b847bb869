"""logging and warnings calls in captured code: one graph break each (as under torch.compile), the
call run natively once per call of the compiled function, never captured piece by piece."""

import logging
import warnings

import pytest
import torch

_LOG = logging.getLogger("torchsmith.test.capture_logging")


def _reasons(compiled) -> list[str]:
    return [str(r.break_reason) for r in compiled.session.records if r.break_reason]


def test_logger_warning_is_one_break_and_logs_every_call(compile_with, backend, caplog):
    def f(x):
        y = x + 1
        _LOG.warning("value %s", 3)
        return y * 2

    x = torch.randn(3)
    compiled = compile_with(f)
    with caplog.at_level(logging.WARNING, logger=_LOG.name):
        for _ in range(2):
            torch.testing.assert_close(compiled(x), (x + 1) * 2)
    assert [r.getMessage() for r in caplog.records] == ["value 3", "value 3"]
    assert len(backend.graphs) == 2
    assert len(_reasons(compiled)) == 1, _reasons(compiled)


def test_disabled_logger_call_is_no_break(compile_with, backend):
    def f(x):
        _LOG.debug("not shown")
        return x * 2

    x = torch.randn(3)
    compiled = compile_with(f)
    torch.testing.assert_close(compiled(x), x * 2)
    assert len(backend.graphs) == 1
    assert _reasons(compiled) == []


def test_warnings_warn_is_one_break_and_warns_every_call(compile_with, backend):
    def f(x):
        y = x.sin()
        warnings.warn("careful", FutureWarning, stacklevel=2)
        return y.cos()

    x = torch.randn(4)
    compiled = compile_with(f)
    for _ in range(2):
        with pytest.warns(FutureWarning, match="careful"):
            torch.testing.assert_close(compiled(x), x.sin().cos())
    assert len(backend.graphs) == 2
    assert len(_reasons(compiled)) == 1, _reasons(compiled)


def test_a_logger_enabled_later_recompiles_and_logs(compile_with, backend, caplog):
    logger = logging.getLogger("torchsmith.test.capture_logging.later")
    logger.setLevel(logging.WARNING)

    def f(x):
        logger.log(logging.INFO, "now shown")
        return x - 1

    x = torch.randn(2)
    compiled = compile_with(f)
    with caplog.at_level(logging.INFO, logger=logger.name):
        logger.setLevel(logging.WARNING)
        torch.testing.assert_close(compiled(x), x - 1)
        assert caplog.records == []
        logger.setLevel(logging.INFO)
        torch.testing.assert_close(compiled(x), x - 1)
    assert [r.getMessage() for r in caplog.records] == ["now shown"]
    assert any("'torchsmith.test.capture_logging.later'.log()" in r for r in _reasons(compiled))
