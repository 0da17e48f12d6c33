"""Cyclic garbage is collected on the GUI thread only (explorer/runtime/gui_gc.py)."""
from __future__ import annotations

import gc
import threading
import weakref

from explorer.runtime.gui_gc import GuiThreadCollector


class _Cycle:
    def __init__(self):
        self.me = self


def test_a_cycle_dropped_on_the_compute_thread_is_freed_on_the_gui_thread(qtbot, runner):
    """The compute thread allocates far past Python's gen-0 threshold after dropping a cycle (and
    keeps what it allocated, so the count stays past it): automatic collection would free the
    cycle there; with the collector it dies on this thread, at the timer's next tick."""
    died_on, kept = [], []

    def work(token, progress):
        cycle = _Cycle()
        weakref.finalize(cycle, lambda: died_on.append(threading.get_ident()))
        del cycle
        kept.extend([i] for i in range(50 * gc.get_threshold()[0]))  # gen 0 would be due
        return len(kept)

    runner.submit("k", work)
    qtbot.waitUntil(lambda: bool(died_on), timeout=5000)
    assert died_on == [threading.get_ident()]
    assert not gc.isenabled()  # the fixture's collector is on for this test


def test_the_tick_collects_a_due_generation_and_stop_restores_automatic_collection(qapp):
    gc.enable()  # as outside this test's own collector (the fixture's)
    collector = GuiThreadCollector(qapp, interval_ms=10_000)  # its timer will not fire in this test
    try:
        assert not gc.isenabled()
        cycle = _Cycle()
        alive = weakref.ref(cycle)
        del cycle
        keep = [_Cycle.__new__(_Cycle) for _ in range(2 * gc.get_threshold()[0])]  # gen 0 is due
        assert alive() is not None  # nothing collects by itself now
        assert collector.collect_due() >= 1 and alive() is None  # the tick frees the cycle
        del keep
    finally:
        collector.stop()
        collector.deleteLater()
    assert gc.isenabled()
    gc.disable()  # back to the fixture's collector
