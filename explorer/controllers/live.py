"""Debounce + one in flight, for the panels that recompute while the user types.

Why one helper: Attention, Attribution, Generation and Routes each follow a text box live, and
each had its own copy of the same three rules (a single-shot timer, an `_in_flight` flag,
a `_dirty` flag), with small differences nobody chose. The rules:
- an edit (`poke`) restarts a single-shot timer; only its timeout computes, so a burst of
  keys costs one run;
- at most one run at a time: a request while one runs (`now` from a click, a swap, a new
  setting) is remembered, and ONE new run starts when the current one finishes, so a fast
  typist never queues a backlog of forwards on two cores;
- what a finished run computed is judged by the runner (the state it was computed for,
  see workers.py), never here.
"""
from __future__ import annotations

from typing import Callable

from PySide6.QtCore import QObject, QTimer

MIN_DEBOUNCE_MS = 20  # below this, key repeat (~30/s) would start a run per key


class LiveRequest(QObject):
    """`start(done)` submits one run and returns True (it must call `done()` when the run
    finished, whatever the outcome: pass it as the runner's `on_finished`), or returns False
    when there is nothing to run (no model yet)."""

    def __init__(self, start: Callable[[Callable[[], None]], bool], debounce_ms: int,
                 parent: QObject | None = None):
        super().__init__(parent)
        self._start = start
        self._longest_ms = debounce_ms  # follow_work() never waits longer than this
        self._in_flight = False
        self._again = False
        self.timer = QTimer(self)
        self.timer.setSingleShot(True)
        self.timer.setInterval(debounce_ms)
        self.timer.timeout.connect(self.now)

    @property
    def in_flight(self) -> bool:
        return self._in_flight

    def set_debounce(self, ms: int) -> None:
        self.timer.setInterval(int(ms))

    def follow_work(self, work_ms: float) -> None:
        """Wait half as long as the last run took, between MIN_DEBOUNCE_MS and the debounce given
        at the start: a pause shorter than the work it would trigger is worth waiting out, a
        longer wait on cheap work is only latency."""
        self.set_debounce(int(min(self._longest_ms, max(MIN_DEBOUNCE_MS, work_ms / 2))))

    def poke(self) -> None:
        """An edit: run once the typing pauses."""
        self.timer.start()

    def now(self) -> None:
        """Run now, or right after the run in flight."""
        self.timer.stop()
        if self._in_flight:
            self._again = True
            return
        self._in_flight = bool(self._start(self._finished))

    def again_after(self) -> None:
        """Ask for one more run when the one in flight ends (e.g. the zoom wants full resolution)."""
        if self._in_flight:
            self._again = True
        else:
            self.now()

    def stop(self) -> None:
        self.timer.stop()
        self._again = False

    def _finished(self) -> None:
        self._in_flight = False
        if self._again:
            self._again = False
            self.now()
