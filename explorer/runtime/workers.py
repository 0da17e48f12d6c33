"""The one place that starts background work: a keyed task runner on ONE warm compute thread.

Why one thread: every task of the app is torch work (captures, generation, sweeps, loads).
On a few cores, torch's OpenMP team is fastest when the same thread keeps it: a pool that
hands each task to whichever thread is free wakes a cold team per task (libgomp lets a
team sleep once more threads than CPUs have run parallel regions), and two tasks at once
fight over the cores and over the model's hook points. So tasks run one after another on a
long-lived thread, and long tasks are cut into steps:
- a task that reports progress (generation per token, the residual sweep per scheme and
  seed, loading per file) yields at each `progress(...)` call: queued tasks of *other* keys
  (a keystroke's capture, a slider's distribution) run right there, between two steps;
- a task may also return a generator: each `next()` is one step, interactive work runs
  between steps, and the generator's `return` value is the task's result.
So a long task never holds typing up for more than one of its steps.

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

Why a cancel token and not thread termination: Python threads cannot be killed safely.
Long work (generation, downloads) calls `token.raise_if_cancelled()` between steps;
`Cancelled` ends the task quietly (it is not an error). A task that ignores its token holds
the compute thread (and so every later task) until it returns.

All callbacks run on the GUI thread: the compute thread emits Qt signals on the runner,
which lives in the GUI thread, so Qt queues them across.
"""
from __future__ import annotations

import collections
import itertools
import logging
import threading
import types
import weakref
from dataclasses import dataclass
from typing import Any, Callable

import shiboken6
from PySide6.QtCore import QObject, Signal, Slot

from gptcore import errors as gptcore_errors

log = logging.getLogger("explorer.runtime.workers")

ProgressFn = Callable[[int, int, str], None]  # (done, total, message); safe from the worker thread
MODEL_TASK = "model"  # the key of every model swap (load or build): a new one supersedes the last


_live_runners: "weakref.WeakSet[TaskRunner]" = weakref.WeakSet()


def live_runners() -> list["TaskRunner"]:
    """Every TaskRunner still alive (quit waits for all of them; tests check none is busy)."""
    return [r for r in list(_live_runners) if shiboken6.isValid(r)]


class Cancelled(gptcore_errors.Cancelled):
    """Raised inside a task when its token was cancelled; not reported as an error (a
    gptcore `Cancelled`, so one isinstance test recognises every cancellation)."""


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
    fn: Callable | None = None
    current: Callable[[], bool] | None = None  # False: the state it was computed for is gone
    on_dropped: Callable[[], None] | None = None
    started: bool = False


class _ComputeThread:
    """The long-lived thread that runs every task (see the module docstring).

    It holds the runner weakly: when the runner is deleted, the thread ends at its next
    idle check, and a task finishing after that has nobody to tell."""

    IDLE_CHECK_S = 1.0

    def __init__(self, runner: "TaskRunner"):
        self._runner = weakref.ref(runner)
        self._cond = threading.Condition()
        self._queue: collections.deque[_Task] = collections.deque()
        self._running: list[_Task] = []  # the task stack: outermost first, nested ones after
        self._stopped = False
        self._thread = threading.Thread(target=self._loop, name="explorer-compute", daemon=True)
        self._thread.start()

    # -- GUI side -------------------------------------------------------------------------
    def put(self, task: _Task) -> None:
        with self._cond:
            self._queue.append(task)
            self._cond.notify()

    def drop_queued(self) -> list[_Task]:
        with self._cond:
            dropped = list(self._queue)
            self._queue.clear()
            return dropped

    def drop_queued_of(self, key: str) -> list[_Task]:
        """Take the key's not-yet-started tasks off the queue (superseded: they would only return)."""
        with self._cond:
            dropped = [t for t in self._queue if t.key == key]
            for task in dropped:
                self._queue.remove(task)
            return dropped

    def running_count(self) -> int:
        with self._cond:
            return len(self._running)

    def wait_idle(self, timeout_s: float) -> bool:
        with self._cond:
            return self._cond.wait_for(lambda: not self._running and not self._queue, timeout_s)

    def stop(self, timeout_s: float = 0.0) -> bool:
        """Ask the thread to end after the task it runs; wait up to `timeout_s` for it. True if it ended."""
        with self._cond:
            self._stopped = True
            self._cond.notify_all()
        if timeout_s > 0 and threading.current_thread() is not self._thread:
            self._thread.join(timeout_s)
        return not self._thread.is_alive()

    # -- the compute thread ---------------------------------------------------------------
    def _loop(self) -> None:
        while True:
            with self._cond:
                while not self._queue and not self._stopped:
                    if not self._cond.wait(self.IDLE_CHECK_S) and self._runner_gone():
                        self._stopped = True
                if self._stopped:
                    return
                task = self._queue.popleft()
            self._run(task)

    def _runner_gone(self) -> bool:
        runner = self._runner()
        return runner is None or not shiboken6.isValid(runner)

    def _take_interactive(self) -> _Task | None:
        """The oldest queued task whose key is not running already (never nest a key in itself)."""
        with self._cond:
            busy = {t.key for t in self._running}
            for task in self._queue:
                if task.key not in busy:
                    self._queue.remove(task)
                    return task
        return None

    def serve_between_steps(self) -> None:
        """Run what is waiting, nested inside the running task's step boundary. Only on the
        compute thread itself: a library may report progress from helper threads (parallel
        downloads), and work run there would leave the one thread and could overlap."""
        if threading.get_ident() != self._thread.ident:
            return
        while (task := self._take_interactive()) is not None:
            self._run(task)

    def _emit(self, signal_name: str, *args) -> None:
        # The runner may be gone if the app quit without waiting (a task that ignored its
        # token): there is no one left to tell, so say nothing rather than raise here.
        runner = self._runner()
        if runner is not None and shiboken6.isValid(runner):
            try:
                getattr(runner, signal_name).emit(*args)
            except RuntimeError:
                pass

    def _run(self, task: _Task) -> None:
        tid = task.task_id
        task.started = True
        with self._cond:
            self._running.append(task)

        def progress(done: int, total: int, message: str = "") -> None:
            self._emit("_progressed", tid, int(done), int(total), str(message))
            self.serve_between_steps()

        fn, task.fn = task.fn, None  # let go of the closure once run (it may hold big results)
        value = None
        try:
            task.token.raise_if_cancelled()
            value = fn(task.token, progress)
            if isinstance(value, types.GeneratorType):
                value = self._step_through(value, task.token)
        except Cancelled:
            pass
        except BaseException as exc:  # noqa: BLE001 - every failure must reach the GUI, never kill the thread
            if task.token.cancelled and gptcore_errors.is_cancellation(exc):
                pass  # gptcore's own cancellation (a load, a probe) after our token was set
            else:
                self._emit("_errored", tid, exc)
        else:
            self._emit("_resulted", tid, value)
        value = None
        self._emit("_finished", tid)  # before the task leaves `_running`: once wait_idle() sees the
        with self._cond:              # thread idle, it touches the runner no more (quit may delete it)
            self._running.remove(task)
            self._cond.notify_all()

    def _step_through(self, steps: types.GeneratorType, token: CancelToken):
        """A generator task: one `next()` per step, waiting work served between steps."""
        try:
            while True:
                token.raise_if_cancelled()
                next(steps)
                self.serve_between_steps()
        except StopIteration as stop:
            return stop.value
        finally:
            steps.close()


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

    def __init__(self, parent: QObject | None = None, max_threads: int = 1):
        """`max_threads` is kept for callers of the pool version; all work runs on one thread."""
        super().__init__(parent)
        self._compute: _ComputeThread | None = None  # started by the first submit
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
               on_result=None, on_error=None, on_progress=None, on_finished=None,
               current: Callable[[], bool] | None = None, on_dropped=None) -> int:
        """Run `fn(token, progress)` on the compute thread under `key` (superseding the key's
        last task). `current()`, checked on the GUI thread when the result or error arrives:
        False drops it (then `on_dropped()`), as the state it was computed for is gone."""
        self._cancel_tokens(key)
        generation = self._generation.get(key, 0) + 1
        self._generation[key] = generation
        task = _Task(next(self._ids), key, generation, CancelToken(), on_result, on_error, on_progress, on_finished,
                     fn=fn, current=current, on_dropped=on_dropped)
        was_busy = bool(self._tasks)
        self._tasks[task.task_id] = task
        self._latest[key] = task.task_id
        if self._compute is None:
            self._compute = _ComputeThread(self)
            self.destroyed.connect(lambda *_args, compute=self._compute: compute.stop())
        superseded = self._compute.drop_queued_of(key)
        self._compute.put(task)
        if not was_busy:
            self.busyChanged.emit(True)
        for old in superseded:  # never started: finish them now (their on_finished is dropped as stale)
            self._on_finished(old.task_id)
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
        done = self._compute is None or self._compute.wait_idle(timeout_ms / 1000)
        if not done:
            log.warning("background work still running after %d ms: %s", timeout_ms,
                        ", ".join(sorted({t.key for t in self._tasks.values()})))
        return done

    def stop(self, timeout_ms: int = 1000) -> bool:
        """End the compute thread (after wait_all, on quit), so nothing of ours runs while the
        interpreter and Qt tear down. A later submit starts a new one. True if it ended in time."""
        compute, self._compute = self._compute, None
        return compute is None or compute.stop(timeout_ms / 1000)

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

    def _outdated(self, task: _Task, what: str) -> bool:
        """True (and the task told) when the state its request was computed for is gone."""
        if task.current is None or task.current():
            return False
        log.debug("dropped the %s of %r: computed for a state that is no longer current", what, task.key)
        if task.on_dropped is not None:
            task.on_dropped()
        return True

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
        task = self._current(task_id)
        self._tasks.pop(task_id, None)
        try:
            if task and task.on_finished:
                task.on_finished()
        finally:
            if not self._tasks:
                self.busyChanged.emit(False)
