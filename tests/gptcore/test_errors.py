"""The error hierarchy: every stop-on-request exception is a `Cancelled`, every diagnosed
input problem a `UserError`, and the app classifies by type (subclasses included), never by name."""
from __future__ import annotations

import importlib

import pytest

from gptcore.errors import Cancelled, UserError, is_cancellation, is_user_error


def _named(path: str, needs_qt: bool = False):
    """A class by its import path; explorer.runtime.workers is Qt's side of the app: skipped, named,
    where PySide6 is not installed (a GPU machine's image, issue 37; the `qt` marker, tests/conftest.py)."""
    return pytest.param(path, marks=[pytest.mark.qt] if needs_qt else [], id=path.rsplit(":", 1)[1])


def _class(path: str) -> type:
    module, name = path.split(":")
    return getattr(importlib.import_module(module), name)


CANCEL_CLASSES = [_named("gptcore.io.checkpoints:LoadCancelled"), _named("gptcore.model.init:InitCancelled"),
                  _named("gptcore.interp.patching:PatchingCancelled"),
                  _named("gptcore.interp.probes.residual:ProbeCancelled"),
                  _named("explorer.runtime.workers:Cancelled", needs_qt=True)]
USER_ERROR_CLASSES = [_named("gptcore.io.checkpoints:LoadError"), _named("gptcore.model.config:ConfigError"),
                      _named("gptcore.io.convert:ConversionError"), _named("explorer.runtime.devices:BuildRefused")]


@pytest.mark.parametrize("path", CANCEL_CLASSES)
def test_every_cancellation_is_a_cancelled(path):
    cls = _class(path)
    assert issubclass(cls, Cancelled)
    assert is_cancellation(cls("stop")) and not is_user_error(cls("stop"))


@pytest.mark.parametrize("path", USER_ERROR_CLASSES)
def test_every_diagnosed_input_problem_is_a_user_error(path):
    cls = _class(path)
    assert issubclass(cls, UserError) and issubclass(cls, ValueError)  # old `except ValueError` still holds
    assert cls.title and cls.title != UserError.title  # each names its kind of problem


def test_explain_classifies_subclasses_by_type_not_name():
    from explorer.controllers.errors import explain
    from gptcore.model.config import ConfigError

    class RenamedConfigProblem(ConfigError):  # a name-string rule would miss this one
        pass

    expl = explain(RenamedConfigProblem("n_head", "n_head must divide n_embd; pick 4"))
    assert expl.title == "Invalid config" and expl.input_problem
    assert "pick 4" in expl.message


def test_a_cancelled_load_is_cancelled_first():
    from gptcore.io.checkpoints import LoadCancelled, LoadError

    exc = LoadCancelled("cancelled")
    assert isinstance(exc, LoadError)  # callers catching LoadError still catch it
    assert is_cancellation(exc) and not is_user_error(exc)


def test_the_app_quietly_ends_a_task_raising_a_subclassed_cancellation(qtbot):
    from explorer.runtime.workers import TaskRunner
    from gptcore.interp.probes.residual import ProbeCancelled

    class MyStop(ProbeCancelled):
        pass

    runner = TaskRunner()
    errors, failed = [], []
    runner.taskFailed.connect(lambda key, exc: failed.append(exc))

    def work(token, _progress):
        token.cancel()
        raise MyStop("stopped")

    try:
        with qtbot.waitSignal(runner.busyChanged, timeout=5000, check_params_cb=lambda busy: not busy):
            runner.submit("k", work, on_error=errors.append)
    finally:
        runner.wait_all(2000)
        runner.deleteLater()
    assert errors == [] and failed == []
