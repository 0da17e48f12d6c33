"""The one stale rule: a request carries the state it was computed for and the runner drops
what arrives for a state that is gone; one helper gives debounce + one run in flight."""
from __future__ import annotations

from explorer.controllers.live import LiveRequest
from explorer.runtime.workers import TaskRunner


def _runner():
    return TaskRunner()


def _finish(qtbot, runner) -> None:
    qtbot.waitUntil(lambda: not runner.busy, timeout=10_000)
    runner.wait_all(2000)
    runner.deleteLater()


def test_a_result_for_a_state_that_is_gone_is_dropped_and_said(qtbot):
    runner = _runner()
    state = {"version": 1}
    asked_at = state["version"]
    got, dropped, finished = [], [], []

    def work(token, progress):
        state["version"] = 2  # the model swapped while it ran
        return "computed for version 1"

    runner.submit("k", work, current=lambda: state["version"] == asked_at, on_result=got.append,
                  on_error=got.append, on_dropped=lambda: dropped.append(True), on_finished=lambda: finished.append(1))
    _finish(qtbot, runner)
    assert got == [] and dropped == [True] and finished == [1]


def test_an_error_for_a_state_that_is_gone_is_dropped_too(qtbot):
    runner = _runner()
    errors, failed = [], []
    runner.taskFailed.connect(lambda key, exc: failed.append(exc))

    def work(token, progress):
        raise ValueError("token 'x' is outside the OLD model's vocabulary")

    runner.submit("k", work, current=lambda: False, on_error=errors.append)
    _finish(qtbot, runner)
    assert errors == [] and failed == []


def test_a_current_result_is_delivered(qtbot):
    runner = _runner()
    got = []
    runner.submit("k", lambda token, progress: 42, current=lambda: True, on_result=got.append)
    _finish(qtbot, runner)
    assert got == [42]


def test_live_request_debounces_and_keeps_one_run_in_flight(qtbot):
    starts, pending = [], []

    def start(done) -> bool:
        starts.append(len(starts))
        pending.append(done)
        return True

    live = LiveRequest(start, debounce_ms=10)
    for _ in range(5):  # a burst of keys
        live.poke()
    qtbot.waitUntil(lambda: starts == [0], timeout=2000)
    live.now()  # a click while the run is in flight: remembered, not started
    live.now()
    assert starts == [0] and live.in_flight
    pending.pop()()  # the run ends: exactly one more starts
    assert starts == [0, 1]
    pending.pop()()
    assert starts == [0, 1] and not live.in_flight


def test_live_request_with_nothing_to_run_is_not_in_flight():
    live = LiveRequest(lambda done: False, debounce_ms=10)
    live.now()
    assert not live.in_flight


def test_a_view_switched_to_during_a_sweep_gets_its_own_sweep_when_that_one_ends(qtbot, panel_context):
    """Residual: switching to a view with no data while a sweep runs starts no second sweep at
    once, but the view must not stay empty: its sweep starts when the running one ends."""
    from explorer.controllers.base import PanelPage
    from explorer.controllers.residual import ResidualController

    page = PanelPage(panel_context, ResidualController, autorun=False)
    qtbot.addWidget(page)
    page.view.set_shape(2, 64, 4)
    page.view.batch_box.setValue(2)
    page.view.length_box.setValue(8)
    drawn = []
    page.controller.drawn.connect(lambda view, _result: drawn.append(view))
    page.view.run_button.click()  # a norms sweep, in flight
    assert panel_context.runner.is_running("residual")
    page.view.set_view("gradients")  # no data there yet
    qtbot.waitUntil(lambda: drawn == ["norms", "gradients"], timeout=60_000)
    qtbot.waitUntil(lambda: not panel_context.runner.busy, timeout=60_000)


def test_the_debounce_follows_half_the_last_run_within_its_bounds(qapp):
    """Attention and Routes wait half as long as their last computation took (issue 29: a routes
    keystroke at 32 tokens), never under MIN_DEBOUNCE_MS nor over the debounce they were given."""
    from explorer.controllers.live import MIN_DEBOUNCE_MS

    live = LiveRequest(lambda done: False, debounce_ms=80)
    for work_ms, expected in ((10, MIN_DEBOUNCE_MS), (100, 50), (1000, 80)):
        live.follow_work(work_ms)
        assert live.timer.interval() == expected
    immediate = LiveRequest(lambda done: False, debounce_ms=0)  # tests that want no wait keep none
    immediate.follow_work(1000)
    assert immediate.timer.interval() == 0
    live.deleteLater()
    immediate.deleteLater()
