"""The session's events, handed to Qt on the GUI thread only.

Why: the session announces a change on the thread that made it, usually the compute thread
(a load, an ablation, a training step, all run as tasks). Its event hub used to call a
QObject's bound method there, which emitted a Qt signal from the compute thread and kept a
Qt object reachable from it. Now the hub holds only `GuiInbox.put` — a plain object with a
lock and a deque; the Qt receiver is held weakly and called only on the GUI thread:
- an event sent on the GUI thread is delivered at once (as before: a direct call);
- an event sent on another thread waits in the inbox, and the inbox calls the wakers: the task
  runner's (workers.py) emits one queued signal, which reaches the GUI thread in order with
  what the task reports (progress before the change, result after it), and drains every
  inbox there.
No Qt here: the hub holds a plain object, and the receiver is held weakly and called on the GUI
thread only.
"""
from __future__ import annotations

import collections
import logging
import threading
import weakref
from typing import Callable

log = logging.getLogger("explorer")

_inboxes: "weakref.WeakSet[GuiInbox]" = weakref.WeakSet()
_wakers: list[Callable[[], bool]] = []  # each returns False once its owner is gone (then dropped)
_wakers_lock = threading.Lock()


def add_waker(wake: Callable[[], bool]) -> None:
    """`wake()` is called (on the sending thread) whenever an event waits for the GUI thread; it
    must arrange a `drain_all()` there and return False once it can no longer do so."""
    with _wakers_lock:
        _wakers.append(wake)


def _wake_all() -> None:
    with _wakers_lock:
        wakers = list(_wakers)
    gone = [wake for wake in wakers if not wake()]
    if gone:
        with _wakers_lock:
            for wake in gone:
                if wake in _wakers:
                    _wakers.remove(wake)


class GuiInbox:
    """Events from any thread in, `deliver(event)` called on the GUI thread only (held weakly:
    a bound method of a Qt object that may go away first)."""

    def __init__(self, deliver: Callable[[object], None]):
        self._gui_thread = threading.get_ident()  # made on the GUI thread, like its receiver
        self._deliver = weakref.WeakMethod(deliver)
        self._lock = threading.Lock()
        self._events: collections.deque = collections.deque()
        _inboxes.add(self)

    def put(self, event) -> None:
        """Any thread: keep `event`; on the GUI thread, deliver it (and anything waiting) now."""
        with self._lock:
            self._events.append(event)
        if threading.get_ident() == self._gui_thread:
            self.drain()
        else:
            _wake_all()

    @property
    def pending(self) -> int:
        with self._lock:
            return len(self._events)

    def drain(self) -> None:
        """GUI thread: deliver what is waiting, oldest first."""
        if threading.get_ident() != self._gui_thread:
            return  # never call into Qt from another thread; the runner drains on the GUI thread
        while True:
            with self._lock:
                if not self._events:
                    return
                event = self._events.popleft()
            deliver = self._deliver()
            if deliver is None:  # the receiver is gone (the window closed): nobody to tell
                with self._lock:
                    self._events.clear()
                return
            deliver(event)
            deliver = None


def drain_all() -> None:
    """Deliver every inbox's waiting events (the runner calls this on the GUI thread)."""
    for inbox in list(_inboxes):
        inbox.drain()
