"""The training as a child process: `python -m gptcore.train` writing a run folder the panel follows.

Why a child process and not a thread: training holds the CPU for minutes; in the app's own
process it would fight the GUI for the interpreter and for OpenMP's threads. As a child it is
exactly the command a terminal would run (so a run the app started and one started elsewhere are
the same thing), the OS schedules it apart, and Pause is SIGSTOP/SIGCONT.

Threads: on 2 cores with the GUI beside it, OpenMP spin-waiting made 2 threads 3–6× slower than 1
(shared/DESIGN.md), so the child gets OMP_WAIT_POLICY=PASSIVE and one thread fewer than the cores
(at least 1). Stop is SIGTERM (the run saves a checkpoint and exits 0), then a kill if it does not
go within `STOP_WAIT_MS`; quitting the app does the same, so no child outlives the window.
"""
from __future__ import annotations

import os
import signal
import sys
from collections import deque

from PySide6.QtCore import QObject, QProcess, QProcessEnvironment, Signal

STOP_WAIT_MS = 5000  # a save at the CPU recipe takes ~0.1 s; a busy disk gets this long
KILL_WAIT_MS = 2000
TAIL_LINES = 40


def child_threads(cores: int | None = None) -> int:
    """Threads for the training child: leave one core to the GUI (1 on 2 cores)."""
    cores = cores or os.cpu_count() or 1
    return max(1, cores - 1)


def train_command(out_dir: str, settings: dict) -> list[str]:
    """The argv after the interpreter: `-m gptcore.train --out_dir=… --key=value …` (None values left out)."""
    args = ["-m", "gptcore.train", f"--out_dir={out_dir}"]
    for key, value in settings.items():
        if value is None or value == "":
            continue
        if isinstance(value, bool):
            value = "True" if value else "False"
        args.append(f"--{key}={value}")
    return args


class TrainProcess(QObject):
    """One child training at a time. Signals: `started(pid)`, `finished(exit code, last output lines)`."""

    started = Signal(int)
    finished = Signal(int, str)
    output = Signal(str)  # each line the child prints (progress lines, errors)

    def __init__(self, parent: QObject | None = None, python: str | None = None):
        super().__init__(parent)
        self.python = python or sys.executable
        self._proc: QProcess | None = None
        self.paused = False
        self.tail: deque[str] = deque(maxlen=TAIL_LINES)
        self.pid = 0
        self.command: list[str] = []

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.state() != QProcess.ProcessState.NotRunning

    def start(self, out_dir: str, settings: dict, threads: int | None = None) -> None:
        if self.running:
            raise RuntimeError("a training is already running; stop it before starting another")
        proc = QProcess(self)
        env = QProcessEnvironment.systemEnvironment()
        n = str(threads or child_threads())
        for key, value in (("OMP_WAIT_POLICY", "PASSIVE"), ("OMP_NUM_THREADS", n), ("MKL_NUM_THREADS", n),
                           ("PYTHONUNBUFFERED", "1")):
            env.insert(key, value)
        proc.setProcessEnvironment(env)
        proc.setProcessChannelMode(QProcess.ProcessChannelMode.MergedChannels)
        proc.readyReadStandardOutput.connect(self._read)
        proc.finished.connect(self._finished)
        proc.errorOccurred.connect(self._error)
        self.tail.clear()
        self.paused = False
        self.command = [self.python, *train_command(out_dir, settings)]
        self._proc = proc
        proc.start(self.command[0], self.command[1:])
        if not proc.waitForStarted(10000):
            self._proc = None
            raise RuntimeError(f"could not start the training ({proc.errorString()}): {' '.join(self.command)}")
        self.pid = int(proc.processId())
        self.started.emit(self.pid)

    def _read(self) -> None:
        proc = self._proc
        if proc is None:
            return
        text = bytes(proc.readAllStandardOutput()).decode("utf-8", errors="replace")
        for line in text.replace("\r", "\n").splitlines():
            if line.strip():
                self.tail.append(line)
                self.output.emit(line)

    def _finished(self, code: int, status) -> None:
        self._read()
        if status == QProcess.ExitStatus.CrashExit and code == 0:
            code = -1
        self._proc = None
        self.paused = False
        self.finished.emit(int(code), "\n".join(self.tail))

    def _error(self, error) -> None:
        if error == QProcess.ProcessError.FailedToStart and self._proc is not None:
            self.tail.append(f"could not start {self.python}: {self._proc.errorString()}")

    def rss_bytes(self) -> int:
        """The child's resident memory (Linux /proc; 0 where unknown or not running)."""
        if not self.running:
            return 0
        try:
            with open(f"/proc/{self.pid}/statm", encoding="ascii") as fh:
                return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
        except (OSError, ValueError, IndexError):
            return 0

    # -- control ------------------------------------------------------------------------------------
    @staticmethod
    def can_pause() -> bool:
        return hasattr(signal, "SIGSTOP")

    def pause(self) -> None:
        if self.running and not self.paused and self.can_pause():
            os.kill(self.pid, signal.SIGSTOP)
            self.paused = True

    def resume(self) -> None:
        if self.running and self.paused and self.can_pause():
            os.kill(self.pid, signal.SIGCONT)
            self.paused = False

    def stop(self, wait: bool = False) -> None:
        """SIGTERM (the run saves and exits); with `wait`, block until it is gone, killing it after
        STOP_WAIT_MS. Without `wait` a timer-free check happens when the process finishes."""
        proc = self._proc
        if proc is None or not self.running:
            return
        if self.paused:
            self.resume()  # a stopped process cannot handle SIGTERM
        proc.terminate()
        if wait:
            self.wait_or_kill(STOP_WAIT_MS)

    def wait_or_kill(self, wait_ms: int) -> None:
        proc = self._proc
        if proc is None:
            return
        if not proc.waitForFinished(wait_ms):
            proc.kill()
            proc.waitForFinished(KILL_WAIT_MS)

    def shutdown(self) -> None:
        """The app is closing: no child may outlive it."""
        self.stop(wait=True)
