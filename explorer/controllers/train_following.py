"""The Train panel's half that follows a run folder (issue 32 split it from train.py along this seam):
opening one (its whole trace read once in a task), following it (a poll task, one in flight, that
reads only what was appended), and what a folder deleted or damaged while followed says.

A mixin of TrainController (explorer/controllers/train.py), which provides `view`, `process`,
`follower`, `timer`, `draw`, `submit`, `ctx` and the run's state fields; nothing here is used alone.
"""
from __future__ import annotations

from pathlib import Path

from PySide6.QtWidgets import QFileDialog

from explorer.session.training.runs import RunFollower, RunFollowError, remember_run
from explorer.controllers.train_settings import run_form_values

OPEN_KEY = "train-open"
POLL_KEY = "train-poll"


class RunFollowing:
    # -- following a run folder -----------------------------------------------------------------------
    def open_run(self, path: str | None = None) -> None:
        """Follow (or replay) the run folder `path` (None: ask for it); its whole trace is read once
        in a worker."""
        if not path:
            start = str(self.follower.root.parent) if self.follower else ""
            path = QFileDialog.getExistingDirectory(self.view, "Open a training run folder", start)
            if not path:
                return
        self.view.set_status(f"reading {path}…")
        training = self.ctx.session.training
        self.move_on("run")
        self.submit(OPEN_KEY, lambda token, progress: training.open(path), still_current=self.while_unchanged("run"),
                    on_result=self._opened, on_error=lambda exc: self._open_failed(path, exc))

    def _opened(self, follower: RunFollower) -> None:
        if self.process.running and self.follower is not None and follower.root != self.follower.root:
            self.view.set_message("a training is running here: stop it before opening another run")
            return
        if self.follower is None or follower.root != self.follower.root:
            self._exit = None
        self._follow(follower)
        if self.view.follows_latest():  # opening a run shows it: its latest kept step in every panel
            self.follow_session = True
            self.draw()

    def _open_failed(self, path, exc: BaseException) -> None:
        text = str(exc) if isinstance(exc, (RunFollowError, ValueError, OSError)) else self.report_error(
            exc, "Opening the run failed").inline
        self.view.set_message(text)
        self.view.set_status(f"could not open {path}")
        self.mark_ready()

    def _follow(self, follower: RunFollower) -> None:
        if self.follower is None or follower.root != self.follower.root:
            self.view.clear_run()  # a new run is followed from its latest step ("latest" ticked again)
            self.shown, self.follow_session, self._step_wanted = None, False, None
            run = self.ctx.session.info.run
            if run is not None and Path(run.root) == follower.root:  # --run put this step in the session already
                self.shown, self._step_wanted = (str(follower.root), run.scheme, run.step), (run.scheme, run.step)
                self.view.set_shown_step(f"step {run.step:,} shown")
            if follower.meta is not None and not self.process.running:
                self.view.set_form_values(run_form_values(follower.meta))  # Start runs the same again
        self.follower = follower
        remember_run(self.ctx.settings, follower.root)
        self.view.set_message("")
        self.draw()
        self.timer.start()
        self.mark_ready()

    def poll(self) -> None:
        """Ask for what the run wrote since the last poll: read on the compute thread (one poll in
        flight at a time), drawn here when it arrives."""
        follower = self.follower
        if follower is None or self._polling:
            return
        self._polling = True
        training = self.ctx.session.training

        def done() -> None:
            self._polling = False

        self.submit(POLL_KEY, lambda token, progress: training.poll(follower), still_current=self.while_unchanged("run"),
                    on_result=lambda changed: self._polled(follower, changed),
                    on_error=lambda exc: self._poll_failed(follower, exc), on_finished=done)

    def _polled(self, follower: RunFollower, changed: bool) -> None:
        if follower is not self.follower:
            return
        if changed:
            self.draw()
        if follower.finished and not self.process.running:
            self.timer.stop()
            self.draw()

    def _poll_failed(self, follower: RunFollower, exc: BaseException) -> None:
        if follower is not self.follower:
            return
        self.timer.stop()
        self.view.set_message(str(exc) if isinstance(exc, RunFollowError)
                              else self.report_error(exc, "Following the run failed").inline)
        self.view.set_status(f"no longer following {follower.root}")

