"""The one place that starts background work: a keyed task runner on ONE warm compute thread
(compute_thread.py says why one thread, how long tasks are cut into steps, and how they are
cancelled).

Why keys and generation numbers: a panel that recomputes on every keystroke submits
many tasks under one key ("attention"); only the newest may draw. Submitting under a key
cancels the previous task's token and bumps the key's generation, and anything an older
task reports (result, progress, error, finished) is dropped on arrival. So a slow result
can never overwrite a newer one, without any locking in the panels. A superseded task that
has not started yet is dropped without running.

Why a `current` predicate too: a key's generation only orders requests of one key, but a
result also belongs to the state it was computed for (the session's model and ablation). A
request carries that state as `current()` (PanelController.submit makes it from the
session's version), and a result or error that arrives when `current()` is False is dropped
here, for every key at once — controllers never compare versions by hand. `on_dropped` tells
a controller that wants to say so ("the model changed during the run").

All callbacks run on the GUI thread: the compute thread emits Qt signals on the runner,
which lives in the GUI thread, so Qt queues them across. A session event sent on the compute
thread waits in a plain inbox (gui_inbox.py) and wakes the runner with one more queued signal,
so the change a task made reaches Qt on the GUI thread in order with what the task reports.

What a task may hold is checked at `submit` (task_check.py): a function of plain data, never
a Qt object. In strict mode (the tests; `GPT_EXPLORER_STRICT_TASKS=1`) a task that holds one
is refused with `TaskHoldsQtObject`; in the app it is logged with where it is held.

A task may stream: a function that returns a generator runs one step per `next()`, and each
value it yields (not None) arrives as `on_item(value)` on the GUI thread, in order (generation
streams its tokens this way), dropped like a result when the state it was computed for is gone.
"""
from __future__ import annotations

import itertools
import logging
import os
import weakref
from dataclasses import dataclass
from typing import Any, Callable

import shiboken6
from PySide6.QtCore import QObject, Signal, Slot

from explorer.runtime.compute_thread import Cancelled, CancelToken, ComputeThread, Job, ProgressFn
from explorer.runtime.gui_inbox import add_waker, drain_all
from explorer.runtime.task_check import TaskHoldsQtObject, qt_objects_held

__all__ = ["MODEL_TASK", "Cancelled", "CancelToken", "ProgressFn", "TaskHoldsQtObject", "TaskRunner", "live_runners"]

log = logging.getLogger("explorer.runtime.workers")

MODEL_TASK = "model"  # the key of every model swap (load or build): a new one supersedes the last


@dataclass
class Task:
    """A submitted task as the GUI thread keeps it: its callbacks never leave this thread (the
    compute thread gets a `Job`: id, key, token and the function)."""
    task_id: int
    key: str
    generation: int
    token: CancelToken
    on_result: Callable[[Any], None] | None
    on_error: Callable[[BaseException], None] | None
    on_progress: Callable[[int, int, str], None] | None
    on_finished: Callable[[], None] | None
    current: Callable[[], bool] | None = None  # False: the state it was computed for is gone
    on_dropped: Callable[[], None] | None = None
    on_item: Callable[[Any], None] | None = None  # each value a generator task yields


_live_runners: "weakref.WeakSet[TaskRunner]" = weakref.WeakSet()


def _waker_of(runner: "TaskRunner"):
    """The runner's waker for gui_inbox: a queued signal to the GUI thread, held weakly (the same
    reach into the runner the compute thread already has to report a task)."""
    ref = weakref.ref(runner)

    def wake() -> bool:
        target = ref()
        if target is None or not shiboken6.isValid(target):
            return False
        try:
            target._events_waiting.emit()
        except RuntimeError:
            return False
        return True

    return wake


def live_runners() -> list["TaskRunner"]:
    """Every TaskRunner still alive (quit waits for all of them; tests check none is busy)."""
    return [r for r in list(_live_runners) if shiboken6.isValid(r)]


class TaskRunner(QObject):
    """Keyed background tasks; see the module docstring for the delivery rules.

    Callback rules: `on_result`/`on_error`/`on_progress`/`on_finished` are called only
    for the key's latest task. `cancel(key)` sets the token but keeps the task current,
    so a cancelled task that returns normally (e.g. partial generation) still delivers
    its result, and `on_finished` always arrives for it. An error with no `on_error`
    is logged and emitted as `taskFailed(title, exc)` (the main window shows a dialog).
    """

    strict_tasks = os.environ.get("GPT_EXPLORER_STRICT_TASKS", "") == "1"  # refuse, not log (tests)
    submitted = Signal(str)  # the key of every task submitted (the bench and tests count them)

    busyChanged = Signal(bool)
    taskFailed = Signal(str, object)  # (key, exception) for tasks without on_error

    # Internal: worker thread -> GUI thread.
    _progressed = Signal(int, int, int, str)
    _resulted = Signal(int, object)
    _itemed = Signal(int, object)
    _events_waiting = Signal()
    _errored = Signal(int, object)
    _finished = Signal(int)

    def __init__(self, parent: QObject | None = None):
        super().__init__(parent)
        self._compute: ComputeThread | None = None  # started by the first submit
        self._ids = itertools.count(1)
        self._tasks: dict[int, Task] = {}  # submitted and not yet finished
        self._generation: dict[str, int] = {}
        self._latest: dict[str, int] = {}  # key -> task id of its latest submission
        self._progressed.connect(self._on_progress)
        self._resulted.connect(self._on_result)
        self._itemed.connect(self._on_item)
        self._events_waiting.connect(drain_all)
        add_waker(_waker_of(self))
        self._errored.connect(self._on_error)
        self._finished.connect(self._on_finished)
        _live_runners.add(self)

    # -- public API ------------------------------------------------------------------
    def submit(self, key: str, fn: Callable[[CancelToken, ProgressFn], Any], *,
               on_result=None, on_error=None, on_progress=None, on_finished=None,
               current: Callable[[], bool] | None = None, on_dropped=None, on_item=None) -> int:
        """Run `fn(token, progress)` on the compute thread under `key` (superseding the key's
        last task). `current()`, checked on the GUI thread when the result or error arrives:
        False drops it (then `on_dropped()`), as the state it was computed for is gone.
        `fn` must hold no Qt object (see the module docstring)."""
        self._check_plain(key, fn)
        self._cancel_tokens(key)
        generation = self._generation.get(key, 0) + 1
        self._generation[key] = generation
        task = Task(next(self._ids), key, generation, CancelToken(), on_result, on_error, on_progress, on_finished,
                    current=current, on_dropped=on_dropped, on_item=on_item)
        was_busy = bool(self._tasks)
        self._tasks[task.task_id] = task
        self._latest[key] = task.task_id
        if self._compute is None:
            self._compute = ComputeThread(self)
            self.destroyed.connect(lambda *_args, compute=self._compute: compute.stop())
        superseded = self._compute.drop_queued_of(key)
        self._compute.put(Job(task.task_id, key, task.token, fn))
        if not was_busy:
            self.busyChanged.emit(True)
        for old in superseded:  # never started: finish them now (their on_finished is dropped as stale)
            self._on_finished(old.task_id)
        self.submitted.emit(key)
        return generation

    def _check_plain(self, key: str, fn) -> None:
        held = qt_objects_held(fn)
        if not held:
            return
        message = (f"task {key!r} holds a Qt object, which must never reach the compute thread: "
                   f"{'; '.join(held)}. Pass the session and plain values to the task instead")
        if self.strict_tasks:
            raise TaskHoldsQtObject(message)
        log.error("%s", message)

    def cancel(self, key: str) -> None:
        self._cancel_tokens(key)

    def cancel_all(self) -> None:
        for task in self._tasks.values():
            task.token.cancel()

    def is_running(self, key: str) -> bool:
        return any(t.key == key for t in self._tasks.values())

    def generation(self, key: str) -> int:
        return self._generation.get(key, 0)

    @property
    def busy(self) -> bool:
        return bool(self._tasks)

    def wait_all(self, timeout_ms: int = 2000) -> bool:
        """Cancel everything and wait for the pool to drain (used on quit and in tests).

        Returns False if some task ignored its token for `timeout_ms`.
        """
        self.cancel_all()
        self._drop_queued()
        done = self._compute is None or self._compute.wait_idle(timeout_ms / 1000)
        if self._compute is not None:
            self._compute.release_spent()
        if not done:
            log.warning("background work still running after %d ms: %s", timeout_ms,
                        ", ".join(sorted({t.key for t in self._tasks.values()})))
        return done

    def stop(self, timeout_ms: int = 1000) -> bool:
        """End the compute thread (after wait_all, on quit), so nothing of ours runs while the
        interpreter and Qt tear down. A later submit starts a new one. True if it ended in time."""
        compute, self._compute = self._compute, None
        if compute is None:
            return True
        ended = compute.stop(timeout_ms / 1000)
        compute.release_spent()
        return ended

    def _drop_queued(self) -> None:
        """Take tasks that never started off the queue: cancelled, they would only return."""
        if self._compute is not None:
            for task in self._compute.drop_queued():
                self._on_finished(task.task_id)

    def active_count(self) -> int:
        """Tasks running right now (a nested interactive task counts next to its host)."""
        return self._compute.running_count() if self._compute is not None else 0

    # -- delivery (GUI thread) -----------------------------------------------------------
    def _cancel_tokens(self, key: str) -> None:
        for task in self._tasks.values():
            if task.key == key:
                task.token.cancel()

    def _current(self, task_id: int) -> Task | None:
        """The task if it is still its key's latest, else None (stale: drop what it says)."""
        task = self._tasks.get(task_id)
        if task is None or self._latest.get(task.key) != task_id:
            return None
        return task

    @Slot(int, int, int, str)
    def _on_progress(self, task_id: int, done: int, total: int, message: str) -> None:
        task = self._current(task_id)
        if task and task.on_progress and not task.token.cancelled:
            task.on_progress(done, total, message)

    def _outdated(self, task: Task, what: str) -> bool:
        """True (and the task told) when the state its request was computed for is gone."""
        if task.current is None or task.current():
            return False
        log.debug("dropped the %s of %r: computed for a state that is no longer current", what, task.key)
        if task.on_dropped is not None:
            task.on_dropped()
        return True

    @Slot(int, object)
    def _on_item(self, task_id: int, value) -> None:
        task = self._current(task_id)
        if task and task.on_item and not self._outdated(task, "item"):
            task.on_item(value)

    @Slot(int, object)
    def _on_result(self, task_id: int, value) -> None:
        task = self._current(task_id)
        if task and not self._outdated(task, "result") and task.on_result:
            task.on_result(value)

    @Slot(int, object)
    def _on_error(self, task_id: int, exc) -> None:
        task = self._current(task_id)
        if task is None:
            log.info("dropped error of a superseded task: %r", exc)
            return
        if self._outdated(task, "error"):
            return
        if task.on_error:
            task.on_error(exc)
        else:
            log.error("task %r failed", task.key, exc_info=(type(exc), exc, exc.__traceback__))
            self.taskFailed.emit(task.key, exc)

    @Slot(int)
    def _on_finished(self, task_id: int) -> None:
        if self._compute is not None:
            self._compute.release_spent()  # what the job ran dies here, on the GUI thread
        task = self._current(task_id)
        self._tasks.pop(task_id, None)
        try:
            if task and task.on_finished:
                task.on_finished()
        finally:
            if not self._tasks:
                self.busyChanged.emit(False)
