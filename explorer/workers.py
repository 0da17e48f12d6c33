"""The one place that starts background work: a QThreadPool behind a keyed task runner.

Why keys and generation numbers: a panel that recomputes on every keystroke submits
many tasks under one key ("attention"); only the newest may draw. Submitting under a key
cancels the previous task's token and bumps the key's generation, and anything an older
task reports (result, progress, error, finished) is dropped on arrival. So a slow result
can never overwrite a newer one, without any locking in the panels.

Why a cancel token and not thread termination: Python threads cannot be killed safely.
Long work (generation, downloads) calls `token.raise_if_cancelled()` between steps;
`Cancelled` ends the task quietly (it is not an error).

All callbacks run on the GUI thread: the worker emits Qt signals on the runner, which
lives in the GUI thread, so Qt queues them across.
"""
from __future__ import annotations

import itertools
import logging
import threading
import weakref
from dataclasses import dataclass
from typing import Any, Callable

import shiboken6
from PySide6.QtCore import QObject, QRunnable, QThreadPool, Signal, Slot

log = logging.getLogger("explorer.workers")

ProgressFn = Callable[[int, int, str], None]  # (done, total, message); safe from the worker thread
MODEL_TASK = "model"  # the key of every model swap (load or build): a new one supersedes the last


_live_runners: "weakref.WeakSet[TaskRunner]" = weakref.WeakSet()


def live_runners() -> list["TaskRunner"]:
    """Every TaskRunner still alive (quit waits for all of them; tests check none is busy)."""
    return [r for r in list(_live_runners) if shiboken6.isValid(r)]


class Cancelled(Exception):
    """Raised inside a task when its token was cancelled; not reported as an error."""


class CancelToken:
    """A thread-safe flag the GUI sets and the worker polls."""

    def __init__(self):
        self._event = threading.Event()

    @property
    def cancelled(self) -> bool:
        return self._event.is_set()

    def cancel(self) -> None:
        self._event.set()

    def raise_if_cancelled(self) -> None:
        if self._event.is_set():
            raise Cancelled()

    def __call__(self) -> bool:  # lets gptcore functions take the token as a `cancel()` predicate
        return self._event.is_set()


def _is_cancellation(exc: BaseException) -> bool:
    """gptcore raises its own `...Cancelled` errors when a cancel() predicate turns true."""
    return any(cls.__name__.endswith("Cancelled") for cls in type(exc).__mro__)


@dataclass
class _Task:
    task_id: int
    key: str
    generation: int
    token: CancelToken
    on_result: Callable[[Any], None] | None
    on_error: Callable[[BaseException], None] | None
    on_progress: Callable[[int, int, str], None] | None
    on_finished: Callable[[], None] | None
    started: bool = False


class _Runnable(QRunnable):
    """Runs fn on a pool thread and reports through the runner's signals (queued to the GUI)."""

    def __init__(self, runner: "TaskRunner", task: _Task, fn):
        super().__init__()
        self.setAutoDelete(True)
        self._runner, self._task, self._fn = runner, task, fn

    def run(self) -> None:
        runner, task = self._runner, self._task
        tid = task.task_id
        task.started = True

        def emit(signal_name: str, *args) -> None:
            # The runner may be gone if the app quit without waiting (a task that ignored its
            # token): there is no one left to tell, so say nothing rather than raise here.
            if shiboken6.isValid(runner):
                try:
                    getattr(runner, signal_name).emit(*args)
                except RuntimeError:
                    pass

        def progress(done: int, total: int, message: str = "") -> None:
            emit("_progressed", tid, int(done), int(total), str(message))

        try:
            task.token.raise_if_cancelled()
            value = self._fn(task.token, progress)
        except Cancelled:
            pass
        except BaseException as exc:  # noqa: BLE001 - every failure must reach the GUI, never kill the pool
            if task.token.cancelled and _is_cancellation(exc):
                pass  # a library's own "cancelled" exception after our token was set
            else:
                emit("_errored", tid, exc)
        else:
            emit("_resulted", tid, value)
        emit("_finished", tid)
        # Let go of the task's closures now: the Python wrapper of an auto-deleted runnable can
        # outlive its run (PySide may keep it until the pool thread is reused or expires), and
        # with it whatever the task captured (a generation run, a captured result).
        self._runner = self._task = self._fn = None
        value = None


class TaskRunner(QObject):
    """Keyed background tasks; see the module docstring for the delivery rules.

    Callback rules: `on_result`/`on_error`/`on_progress`/`on_finished` are called only
    for the key's latest task. `cancel(key)` sets the token but keeps the task current,
    so a cancelled task that returns normally (e.g. partial generation) still delivers
    its result, and `on_finished` always arrives for it. An error with no `on_error`
    is logged and emitted as `taskFailed(title, exc)` (the main window shows a dialog).
    """

    busyChanged = Signal(bool)
    taskFailed = Signal(str, object)  # (key, exception) for tasks without on_error

    # Internal: worker thread -> GUI thread.
    _progressed = Signal(int, int, int, str)
    _resulted = Signal(int, object)
    _errored = Signal(int, object)
    _finished = Signal(int)

    def __init__(self, parent: QObject | None = None, max_threads: int = 4):
        super().__init__(parent)
        self._pool = QThreadPool(self)
        self._pool.setMaxThreadCount(max_threads)
        self._ids = itertools.count(1)
        self._tasks: dict[int, _Task] = {}  # submitted and not yet finished
        self._generation: dict[str, int] = {}
        self._latest: dict[str, int] = {}  # key -> task id of its latest submission
        self._progressed.connect(self._on_progress)
        self._resulted.connect(self._on_result)
        self._errored.connect(self._on_error)
        self._finished.connect(self._on_finished)
        _live_runners.add(self)

    # -- public API ------------------------------------------------------------------
    def submit(self, key: str, fn: Callable[[CancelToken, ProgressFn], Any], *,
               on_result=None, on_error=None, on_progress=None, on_finished=None) -> int:
        self._cancel_tokens(key)
        generation = self._generation.get(key, 0) + 1
        self._generation[key] = generation
        task = _Task(next(self._ids), key, generation, CancelToken(), on_result, on_error, on_progress, on_finished)
        was_busy = bool(self._tasks)
        self._tasks[task.task_id] = task
        self._latest[key] = task.task_id
        self._pool.start(_Runnable(self, task, fn))
        if not was_busy:
            self.busyChanged.emit(True)
        return generation

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
        done = self._pool.waitForDone(timeout_ms)
        if not done:
            log.warning("background work still running after %d ms: %s", timeout_ms,
                        ", ".join(sorted({t.key for t in self._tasks.values()})))
        return done

    def _drop_queued(self) -> None:
        """Take tasks that never started off the queue: cancelled, they would only return."""
        self._pool.clear()
        for task_id in [t.task_id for t in self._tasks.values() if not t.started]:
            self._on_finished(task_id)

    def active_count(self) -> int:
        """Threads of this runner's pool running a task right now."""
        return self._pool.activeThreadCount()

    # -- delivery (GUI thread) -----------------------------------------------------------
    def _cancel_tokens(self, key: str) -> None:
        for task in self._tasks.values():
            if task.key == key:
                task.token.cancel()

    def _current(self, task_id: int) -> _Task | None:
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

    @Slot(int, object)
    def _on_result(self, task_id: int, value) -> None:
        task = self._current(task_id)
        if task and task.on_result:
            task.on_result(value)

    @Slot(int, object)
    def _on_error(self, task_id: int, exc) -> None:
        task = self._current(task_id)
        if task is None:
            log.info("dropped error of a superseded task: %r", exc)
            return
        if task.on_error:
            task.on_error(exc)
        else:
            log.error("task %r failed", task.key, exc_info=(type(exc), exc, exc.__traceback__))
            self.taskFailed.emit(task.key, exc)

    @Slot(int)
    def _on_finished(self, task_id: int) -> None:
        task = self._current(task_id)
        self._tasks.pop(task_id, None)
        try:
            if task and task.on_finished:
                task.on_finished()
        finally:
            if not self._tasks:
                self.busyChanged.emit(False)
