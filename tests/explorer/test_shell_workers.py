"""TaskRunner: stale results dropped, cancel is cooperative and quiet, errors reach on_error."""
from __future__ import annotations

import threading

import pytest

from explorer.workers import Cancelled, CancelToken, TaskRunner


def test_result_arrives_on_gui_thread(qtbot, runner):
    seen = []
    main = threading.get_ident()
    runner.submit("k", lambda token, progress: (progress(1, 2, "half"), threading.get_ident())[1],
                  on_result=lambda v: seen.append(("result", v, threading.get_ident())),
                  on_progress=lambda d, t, m: seen.append(("progress", d, t, m)))
    qtbot.waitUntil(lambda: not runner.busy, timeout=5000)
    assert seen[0] == ("progress", 1, 2, "half")
    kind, worker_thread, delivered_on = seen[1]
    assert kind == "result" and worker_thread != main and delivered_on == main


def test_newer_submission_drops_the_older_result(qtbot, runner):
    release = threading.Event()
    results, finished = [], []

    def slow(token, progress):
        release.wait(5)
        return "old"

    runner.submit("k", slow, on_result=results.append, on_finished=lambda: finished.append("old"))
    runner.submit("k", lambda t, p: "new", on_result=results.append, on_finished=lambda: finished.append("new"))
    qtbot.waitUntil(lambda: results == ["new"], timeout=5000)
    release.set()
    qtbot.waitUntil(lambda: not runner.busy, timeout=5000)
    assert results == ["new"] and finished == ["new"]
    assert runner.generation("k") == 2


def test_superseded_task_sees_its_token_cancelled(qtbot, runner):
    started, saw_cancel = threading.Event(), []

    def loop(token: CancelToken, progress):
        started.set()
        while True:
            if token.cancelled:
                saw_cancel.append(True)
            token.raise_if_cancelled()
            threading.Event().wait(0.005)

    runner.submit("k", loop)
    assert started.wait(5)
    runner.submit("k", lambda t, p: None)
    qtbot.waitUntil(lambda: not runner.busy, timeout=5000)
    assert saw_cancel == [True]


def test_cancelled_is_not_an_error_and_finished_still_arrives(qtbot, runner):
    errors, finished, failed = [], [], []
    runner.taskFailed.connect(lambda key, exc: failed.append(exc))

    def stops(token, progress):
        raise Cancelled()

    runner.submit("k", stops, on_error=errors.append, on_finished=lambda: finished.append(1))
    qtbot.waitUntil(lambda: finished == [1], timeout=5000)
    assert errors == [] and failed == []


def test_error_goes_to_on_error_with_the_exception(qtbot, runner):
    errors = []
    runner.submit("k", lambda t, p: 1 / 0, on_error=errors.append)
    qtbot.waitUntil(lambda: bool(errors), timeout=5000)
    assert isinstance(errors[0], ZeroDivisionError)


def test_error_without_handler_is_emitted_as_task_failed(qtbot, runner):
    with qtbot.waitSignal(runner.taskFailed, timeout=5000) as blocker:
        runner.submit("boom", lambda t, p: (_ for _ in ()).throw(RuntimeError("kaput")))
    key, exc = blocker.args
    assert key == "boom" and isinstance(exc, RuntimeError) and "kaput" in str(exc)


def test_busy_changed_and_wait_all_cancels_everything(qtbot, runner):
    states = []
    runner.busyChanged.connect(states.append)
    started = threading.Event()

    def forever(token, progress):
        started.set()
        while not token.cancelled:
            threading.Event().wait(0.005)
        raise Cancelled()

    runner.submit("a", forever)
    runner.submit("b", forever)
    assert started.wait(5)
    assert runner.is_running("a") and runner.is_running("b")
    assert runner.wait_all(5000)
    qtbot.waitUntil(lambda: not runner.busy, timeout=5000)
    assert states == [True, False]


def test_cancel_token_raises_cancelled():
    token = CancelToken()
    token.raise_if_cancelled()
    token.cancel()
    assert token.cancelled and token()
    with pytest.raises(Cancelled):
        token.raise_if_cancelled()


def test_a_new_runner_is_idle(qtbot):
    r = TaskRunner()
    assert not r.busy and not r.is_running("x") and r.generation("x") == 0
    r.deleteLater()
