"""A window driven through a fixed script of model loads, ablations, typing, scrubbing a run and tab
switches (issue 32), under the suite's faulthandler watchdog (tests/conftest.py): no hang, no error,
every task the runner got held no Qt object (checked at each submit), and every session event reached
Qt on the GUI thread only."""
from __future__ import annotations

import threading

import pytest

from explorer.runtime.task_check import qt_objects_held
from explorer.shell.registry import PANELS
from tests.explorer.test_train_panel import _fake_run

WAIT = 60_000
STEPS = 24
pytestmark = pytest.mark.usefixtures("single_torch_thread")
SMALL = dict(vocab_size=50257, block_size=32, n_layer=2, n_head=2, n_embd=16)


def test_a_scripted_session_never_hangs_and_keeps_qt_on_the_gui_thread(qtbot, window, tmp_path, monkeypatch):
    runner, session = window.runner, window.session
    held: list[str] = []
    submit = type(runner).submit

    def checked_submit(self, key, fn, **kw):
        held.extend(f"{key}: {h}" for h in qt_objects_held(fn))
        return submit(self, key, fn, **kw)

    monkeypatch.setattr(type(runner), "submit", checked_submit)
    threads: set[bool] = set()
    window.ctx.signals.event.connect(lambda _e: threads.add(threading.current_thread() is threading.main_thread()))

    root = tmp_path / "run"
    _fake_run(root)
    names = [spec.name for spec in PANELS]
    actions = [
        lambda i: window.show_panel(names[i % len(names)]),
        lambda i: window.ctx.change_ablation(lambda s, h=i % 2: s.interp.toggle_head(0, h), on_error=pytest.fail),
        lambda i: window.panel("attention").controller.set_prompt(f"step {i} of the soak"),
        lambda i: window.ctx.submit("soak-build", lambda token, progress, n=i: session.build(SMALL, "gpt2", n),
                                    still_current=lambda: True),
        lambda i: window.open_run(str(root)),
        lambda i: _scrub(window, i),
    ]
    for i in range(STEPS):
        actions[i % len(actions)](i)
        qtbot.wait(20)
        qtbot.waitUntil(lambda: not runner.busy, timeout=WAIT)
    assert held == [], held
    assert threads == {True}  # every event reached Qt on the GUI thread
    assert window.errors_shown == []


def _scrub(window, i: int) -> None:
    c = window.panel("train").controller
    if c.follower is not None and c.follower.kept_steps("gpt2"):
        c.view.choose_step((0, 10, 20)[i % 3])
