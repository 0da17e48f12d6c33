"""Cyclic garbage is collected on the GUI thread, never on the compute thread.

Why: Python's collector runs in whichever thread happens to allocate past its threshold. If a
cycle holding Qt objects (a panel and the lambda connected to its own signal) is found on the
compute thread, their C++ destructors run there: a QObject's destructor takes Qt's signal lock,
then waits for the GIL, which the GUI thread may hold while it connects a signal and waits for
that same lock — the app freezes (the test suite hung exactly so once, through a reference that
died on the wrong thread; runtime/compute_thread.py hands those back). So automatic collection is
turned off and a timer on the GUI thread collects what is due, with the thresholds Python would
have used, so memory behaves as before. Reference counting frees everything else at once, as ever.
"""
from __future__ import annotations

import gc

from PySide6.QtCore import QObject, QTimer

__all__ = ["GuiThreadCollector"]


class GuiThreadCollector(QObject):
    """Turns automatic collection off while it lives (`stop()` turns it back on)."""

    def __init__(self, parent: QObject | None = None, interval_ms: int = 500):
        super().__init__(parent)
        self._thresholds = gc.get_threshold()  # (gen0, gen1, gen2), Python's own triggers
        self._was_enabled = gc.isenabled()
        self._timer = QTimer(self)
        self._timer.setInterval(interval_ms)
        self._timer.timeout.connect(self.collect_due)
        gc.disable()
        self._timer.start()

    def collect_due(self) -> int:
        """Collect the oldest generation whose count passed its threshold (and the younger ones
        with it), as the automatic collector would have; returns the objects found unreachable."""
        counts = gc.get_count()
        due = [g for g in (2, 1, 0) if self._thresholds[g] and counts[g] > self._thresholds[g]]
        return gc.collect(due[0]) if due else 0

    def stop(self) -> None:
        """Back to Python's automatic collection, after collecting what is due here."""
        self._timer.stop()
        self.collect_due()
        if self._was_enabled:
            gc.enable()
