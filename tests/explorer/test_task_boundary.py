"""Background work is plain data (issue 32): a task that holds a Qt object is refused at submit,
the session's events reach Qt only on the GUI thread, and a streaming task's items arrive in
order and are dropped when the state they were computed for is gone."""
from __future__ import annotations

import functools
import threading

import pytest
from PySide6.QtCore import QObject
from PySide6.QtWidgets import QLabel

from explorer.runtime.gui_inbox import GuiInbox, drain_all
from explorer.runtime.task_check import TaskHoldsQtObject, qt_objects_held
from explorer.runtime.workers import TaskRunner

WAIT = 30_000


class _Holder(QObject):
    def work(self, token, progress):
        return 1


def test_the_check_finds_qt_objects_in_self_closures_defaults_partials_and_containers(qtbot):
    label = QLabel("x")
    qtbot.addWidget(label)
    holder = _Holder()

    def inner(token, progress):
        return label.text()

    def outer(token, progress):  # holds `inner`, which holds the label: two closures deep
        return inner(token, progress)

    cases = {
        "bound self": holder.work,
        "closure": lambda token, progress: label.text(),
        "nested closure": outer,
        "default": lambda token, progress, w=label: w,
        "partial argument": functools.partial(lambda w, token, progress: w, label),
        "container": lambda token, progress, parts=(1, [label]): parts,
        "bound signal": label.windowTitleChanged.emit,
    }
    for what, fn in cases.items():
        assert qt_objects_held(fn), what
    plain = [lambda token, progress: 1, functools.partial(lambda n, token, progress: n, 3),
             lambda token, progress, ids=tuple(range(500)): ids]
    assert all(qt_objects_held(fn) == [] for fn in plain)
    assert "QLabel" in qt_objects_held(outer)[0]


def test_submit_refuses_a_task_holding_a_widget_in_strict_mode_and_logs_it_otherwise(qtbot, runner, monkeypatch, caplog):
    label = QLabel("x")
    qtbot.addWidget(label)
    assert TaskRunner.strict_tasks  # the tests run strict (tests/explorer/conftest.py)
    with pytest.raises(TaskHoldsQtObject, match="QLabel"):
        runner.submit("bad", lambda token, progress: label.text())
    assert not runner.busy  # nothing was queued
    monkeypatch.setattr(TaskRunner, "strict_tasks", False)
    with qtbot.waitSignal(runner.busyChanged, timeout=WAIT, check_params_cb=lambda busy: not busy):
        runner.submit("bad", lambda token, progress: label.text())
    assert any("holds a Qt object" in r.getMessage() for r in caplog.records)


def test_every_task_the_window_submits_holds_no_qt_object(qtbot, window, hf_checkpoint):
    """The window's own tasks (loads) and a panel's, checked by the runner itself in strict mode:
    a load and an ablation go through without TaskHoldsQtObject."""
    with qtbot.waitSignal(window.modelChanged, timeout=WAIT):
        window.load_model(str(hf_checkpoint()))
    window.ctx.change_ablation(lambda session: session.interp.toggle_head(0, 0), on_error=pytest.fail)
    qtbot.waitUntil(lambda: window.session.interp.ablation.active, timeout=WAIT)
    qtbot.waitUntil(lambda: not window.runner.busy, timeout=WAIT)


def test_events_sent_off_the_gui_thread_wait_until_drained_on_it(qapp):
    got: list[tuple[str, bool]] = []

    class Receiver(QObject):
        def take(self, event):
            got.append((event, threading.current_thread() is threading.main_thread()))

    receiver = Receiver()
    inbox = GuiInbox(receiver.take)
    assert qt_objects_held(inbox.put) == []  # the session's hub holds this: nothing of Qt
    worker = threading.Thread(target=inbox.put, args=("from the compute thread",))
    worker.start()
    worker.join()
    assert got == [] and inbox.pending == 1  # not delivered on the thread that sent it
    drain_all()
    assert got == [("from the compute thread", True)]
    inbox.put("on the GUI thread")  # delivered at once, as a direct call
    assert got[-1] == ("on the GUI thread", True)
    del receiver  # the receiver gone: events wait for no one
    inbox.put("late")
    assert inbox.pending == 0


def test_a_session_change_made_in_a_task_is_announced_before_the_task_result(qtbot, panel_context):
    session, runner = panel_context.session, panel_context.runner
    order: list[str] = []
    panel_context.signals.event.connect(lambda event: order.append(type(event).__name__))
    with qtbot.waitSignal(runner.busyChanged, timeout=WAIT, check_params_cb=lambda busy: not busy):
        runner.submit("change", lambda token, progress: session.settings_changed("a test setting"),
                      on_result=lambda _v: order.append("result"))
    assert order == ["SettingsChanged", "result"]


def test_a_streaming_task_delivers_its_items_in_order_and_drops_them_when_stale(qtbot, runner):
    items: list[int] = []

    def stream(token, progress):
        for i in range(5):
            yield i
        return "done"

    results = []
    with qtbot.waitSignal(runner.busyChanged, timeout=WAIT, check_params_cb=lambda busy: not busy):
        runner.submit("stream", stream, on_item=items.append, on_result=results.append)
    assert items == [0, 1, 2, 3, 4] and results == ["done"]

    items.clear()
    state = {"current": True}

    def moved_on(token, progress):
        yield 1
        state["current"] = False  # the state the run was computed for goes away mid-stream
        yield 2

    with qtbot.waitSignal(runner.busyChanged, timeout=WAIT, check_params_cb=lambda busy: not busy):
        runner.submit("stream", moved_on, on_item=items.append, current=lambda: state["current"])
    assert 2 not in items
