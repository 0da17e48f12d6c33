"""The compute thread under the task runner (workers.py): one long-lived thread that runs
every task, cut into steps, and the cancel token a task polls.

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

Why a cancel token and not thread termination: Python threads cannot be killed safely.
Long work (generation, downloads) calls `token.raise_if_cancelled()` between steps;
`Cancelled` ends the task quietly (it is not an error). A task that ignores its token holds
the compute thread (and so every later task) until it returns.

Split from workers.py along the thread/GUI seam: nothing here is Qt but the runner it tells
(through the runner's signals, by name), so the delivery rules stay in one file and the
threading in another.
"""
from __future__ import annotations

import collections
import threading
import types
import weakref
from dataclasses import dataclass
from typing import Callable

import shiboken6

from gptcore import errors as gptcore_errors

ProgressFn = Callable[[int, int, str], None]  # (done, total, message); safe from the worker thread


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
class Job:
    """What the compute thread holds of a task: never its callbacks. Those are bound methods of
    controllers and closures over views, and they stay with the runner on the GUI thread: a Qt
    object whose last reference dies on this thread is deleted here, and its destructor takes Qt's
    signal lock then waits for the GIL the GUI thread holds while it connects a signal (a deadlock
    seen in the test suite)."""
    task_id: int
    key: str
    token: "CancelToken"
    fn: Callable | None


class ComputeThread:
    """The long-lived thread that runs every task (see the module docstring).

    It holds the runner weakly: when the runner is deleted, the thread ends at its next
    idle check, and a task finishing after that has nobody to tell."""

    IDLE_CHECK_S = 1.0

    def __init__(self, runner):  # a TaskRunner (held weakly)
        self._runner = weakref.ref(runner)
        self._cond = threading.Condition()
        self._queue: collections.deque[Job] = collections.deque()
        self._running: list[Job] = []  # the job stack: outermost first, nested ones after
        self._spent: list = []  # what ran (functions, results, errors): released on the GUI thread
        self._stopped = False
        self._thread = threading.Thread(target=self._loop, name="explorer-compute", daemon=True)
        self._thread.start()

    # -- GUI side -------------------------------------------------------------------------
    def put(self, job: Job) -> None:
        with self._cond:
            self._queue.append(job)
            self._cond.notify()

    def release_spent(self) -> None:
        """Drop what finished jobs left behind, here on the GUI thread (see `Job`): the runner
        calls it when a job's `_finished` arrives, which the thread emits after handing it over."""
        with self._cond:
            spent, self._spent = self._spent, []
        del spent  # the last references, if any, die on this (the caller's) thread

    def drop_queued(self) -> list[Job]:
        with self._cond:
            dropped = list(self._queue)
            self._queue.clear()
            return dropped

    def drop_queued_of(self, key: str) -> list[Job]:
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
                job = self._queue.popleft()
            self._run(job)
            job = None

    def _runner_gone(self) -> bool:
        runner = self._runner()
        return runner is None or not shiboken6.isValid(runner)

    def _take_interactive(self) -> Job | None:
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
        while (job := self._take_interactive()) is not None:
            self._run(job)

    def _emit(self, signal_name: str, *args) -> None:
        # The runner may be gone if the app quit without waiting (a task that ignored its
        # token): there is no one left to tell, so say nothing rather than raise here.
        runner = self._runner()
        if runner is not None and shiboken6.isValid(runner):
            try:
                getattr(runner, signal_name).emit(*args)
            except RuntimeError:
                pass

    def _run(self, job: Job) -> None:
        tid = job.task_id
        with self._cond:
            self._running.append(job)

        def progress(done: int, total: int, message: str = "") -> None:
            self._emit("_progressed", tid, int(done), int(total), str(message))
            self.serve_between_steps()

        fn, job.fn = job.fn, None  # let go of the closure once run (it may hold big results)
        outcome: tuple[str, object] | None = None
        try:
            job.token.raise_if_cancelled()
            value = fn(job.token, progress)
            if isinstance(value, types.GeneratorType):
                value = self._step_through(value, job.token, tid)
            outcome = ("_resulted", value)
        except Cancelled:
            pass
        except BaseException as exc:  # noqa: BLE001 - every failure must reach the GUI, never kill the thread
            if not (job.token.cancelled and gptcore_errors.is_cancellation(exc)):
                outcome = ("_errored", exc)  # not gptcore's own cancellation after our token was set
        with self._cond:  # hand over before telling anyone: the GUI thread drops them (see `Job`)
            self._spent.append((fn, outcome))
        fn = value = None
        if outcome is not None:
            signal_name, payload = outcome
            outcome = None
            self._emit(signal_name, tid, payload)
            payload = None
        self._emit("_finished", tid)  # before the job leaves `_running`: once wait_idle() sees the
        with self._cond:              # thread idle, it touches the runner no more (quit may delete it)
            self._running.remove(job)
            self._cond.notify_all()

    def _step_through(self, steps: types.GeneratorType, token: CancelToken, task_id: int):
        """A generator task: one `next()` per step, waiting work served between steps."""
        try:
            while True:
                token.raise_if_cancelled()
                item = next(steps)
                if item is not None:  # a streamed value (a generated token): on_item, in order
                    self._emit("_itemed", task_id, item)
                    item = None
                self.serve_between_steps()
        except StopIteration as stop:
            return stop.value
        finally:
            steps.close()
