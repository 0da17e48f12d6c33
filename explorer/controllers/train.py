"""Train controller: starts `python -m gptcore.train` as a child, follows its run folder, and puts
the step the user scrubs to into the session so every other panel shows the model as it was then.

It only wires its view (the `TrainView` protocol, explorer/views/train/protocol.py) to the session's
training domain (`session.training`, explorer/session/training/domain.py) and the child process
(explorer/runtime/train_process.py). Following: opening a run folder reads its whole trace once in
a task (a finished run's trace can be megabytes); after that a QTimer asks every POLL_MS for a poll
task (one at a time), which reads only what was appended since (a few KB) on the compute thread;
the charts are drawn from the follower on the GUI thread under its lock. The follower is the
session's (`session.training` keeps one per run folder), so Routes reads the same records. A
folder deleted or damaged while followed shows the reader's message above the charts and keeps
them. Behind another tab the panel keeps following (the latest step may move every panel's model)
but draws its charts only when shown.

Opening a run (--run, File → Open run…) or starting one puts its latest kept step into the session
while "latest" is ticked, so the status bar, badge and banner describe the run from the start.

Scrubbing: a step's weights load in a worker under one runner key, so a fast drag keeps only the
last step; the session then announces a TrainingStepShown (or a ModelSwapped, the first time) and
the window's status bar, badge and banner describe that step. Every task goes through
`PanelController.submit`; saving goes through the one export entry point (`export_with_dialog`).
"""
from __future__ import annotations

from PySide6.QtCore import QObject, QTimer
from PySide6.QtWidgets import QFileDialog

from gptcore.model.init import INIT_SCHEMES

from explorer.controllers.base import PanelController
from explorer.controllers.train_following import OPEN_KEY, POLL_KEY, RunFollowing
from explorer.controllers.train_settings import (command_settings, form_defaults, induction_preset_available,
                                                 preset_values, rate_text, run_state_word)
from explorer.views.train.protocol import TrainView
from explorer.runtime.train_process import TrainProcess
from explorer.session.events import ModelSwapped
from explorer.session.training.domain import follower_step_name, is_run_model
from explorer.session.training.runs import RunFollower, new_run_dir
from explorer.views.train.panel import TrainPanel

POLL_MS = 500
STEP_KEY = "train-step"
USE_KEY = "train-use"
CENSUS_SHOWN = ("previous_token", "induction", "position_copy")
SHAPE_FIELDS = ("n_layer", "n_head", "n_embd", "block_size", "bias", "dropout")


class TrainController(RunFollowing, PanelController[TrainView]):
    view_class = TrainPanel
    view_args = (INIT_SCHEMES,)
    task_keys = (OPEN_KEY, POLL_KEY, STEP_KEY, USE_KEY)
    background_keys = task_keys  # following a run goes on behind other tabs (it is what moves the model)
    invalidate_when_hidden = True  # another model loaded: stop putting this run's steps into the session

    def __init__(self, ctx, view: TrainView, parent: QObject | None = None):
        super().__init__(ctx, view, parent)
        view.set_form_values(form_defaults("cpu"))
        view.set_corpora({"induction": induction_preset_available()})
        self.follower: RunFollower | None = None
        self.process = TrainProcess(self)
        self.process.finished.connect(self._process_finished)
        self.process.output.connect(self._process_output)
        self.shown: tuple[str, str, int] | None = None  # (run, scheme, step) the session shows
        self.follow_session = False  # True once the user put a step of this run into the session
        self.extra_model: dict = {}  # config fields beyond the form's, from "Train this config…"
        self._exit: int | None = None  # the exit status of the child that wrote the followed run
        self._stopping = False
        self._step_wanted: tuple[str, int] | None = None  # the step asked for last (loading, or shown)
        self._polling = False  # a poll task is in flight
        self._charts_stale = False  # the follower changed while the panel was hidden
        self.timer = QTimer(self)
        self.timer.setInterval(POLL_MS)
        self.timer.timeout.connect(self.poll)
        for signal, slot in ((view.startRequested, self.start), (view.stopRequested, self.stop),
                             (view.pauseRequested, self.pause), (view.resumeRequested, self.resume),
                             (view.openRunRequested, self.open_run), (view.browseRequested, self._browse),
                             (view.modelFromSessionRequested, self.use_session_shape),
                             (view.stepChosen, self.choose_step), (view.latestRequested, self.follow_latest),
                             (view.useModelRequested, self.use_final_model), (view.saveRequested, self.save_checkpoint),
                             (view.censusSchemeChanged, lambda _name: self.draw())):
            signal.connect(slot)
        view.presetRequested.connect(lambda name: view.set_form_values(form_defaults(name)))
        view.corpusChanged.connect(lambda kind: kind == "induction" and view.set_form_values(preset_values(kind)))
        run = getattr(ctx, "run", None)
        if run:
            self.open_run(run)
        else:
            QTimer.singleShot(0, self.mark_ready)  # an empty panel is its own first data

    # -- starting and stopping ---------------------------------------------------------------------
    def start(self, values: dict) -> None:
        try:
            # The app's device, named: a training started here runs where the app runs (`--device cpu` on a
            # machine with a GPU keeps it on the CPU), not wherever the child's own "auto" would pick.
            settings = {"device": str(self.ctx.session.device), **self.extra_model, **command_settings(values)}
        except ValueError as exc:
            self.view.set_message(str(exc))
            return
        out_dir = new_run_dir()
        self.move_on("run")
        try:
            out_dir.parent.mkdir(parents=True, exist_ok=True)
            self.process.start(str(out_dir), settings)
        except (OSError, RuntimeError) as exc:
            self.view.set_message(self.report_error(exc, "Could not start the training").inline)
            return
        self._exit, self._stopping = None, False
        self.view.set_running(True)
        self._follow(self.ctx.session.training.follow(out_dir))
        self.follow_session = True  # its steps become every panel's model as they are kept (while "latest")
        self.view.set_status(f"starting: {' '.join(self.process.command[1:])}")

    def start_with(self, overrides: dict) -> None:
        """Start with the form's values changed by `overrides` (tests, 'Train this config…')."""
        self.view.set_form_values(overrides)
        self.start(self.view.form_values())

    def stop(self) -> None:
        self._stopping = True
        self.process.stop()
        self.draw()
        self.view.set_status("stopping: the run saves a checkpoint first…")

    def pause(self) -> None:
        self.process.pause()
        self.view.set_running(True, paused=True)
        self.draw()
        self.view.set_status("paused (the child process is stopped; Resume continues it)")

    def resume(self) -> None:
        self.process.resume()
        self.view.set_running(True, paused=False)
        self.draw()

    def _process_output(self, line: str) -> None:
        if line.startswith("error:"):
            self.view.set_message(line[len("error:"):].strip())

    def _process_finished(self, code: int, tail: str) -> None:
        self._exit = code
        self.view.set_running(False)
        if code not in (0, 130):
            errors = [line for line in tail.splitlines() if line.startswith("error:")]
            why = errors[-1][len("error:"):].strip() if errors else (tail.splitlines() or ["no output"])[-1]
            self.view.set_message(f"the training stopped with exit status {code}: {why}")
        self.poll()
        self.draw()
        if self.follower is not None and self.follower.state == "waiting":
            self.timer.stop()  # it never wrote its run folder: nothing more will come

    def state_word(self) -> str:
        """The run's state in one word, from the child process when it is ours, else from the trace."""
        p = self.process
        return run_state_word(self.follower, p.running, p.running and p.paused, self._stopping, self._exit)

    # -- drawing ----------------------------------------------------------------------------------------
    def scheme(self) -> str:
        f = self.follower
        shown = self.view.shown_scheme()
        return shown if f and shown in f.series else (f.schemes[0] if f and f.schemes else "")

    def refresh(self) -> None:
        """Shown again after the run moved on behind another tab: draw what it wrote meanwhile."""
        self.draw()

    def draw(self) -> None:
        """The run's charts and state (only while shown: behind another tab the panel is marked
        stale and draws when shown), and its latest step into the session while "latest" is ticked."""
        f = self.follower
        if f is None:
            return
        with f.lock:  # a poll task may be reading into it on the compute thread
            if self.is_shown:
                self._draw_view(f)
            else:
                self._stale = True
            self._follow_latest(f)

    def _draw_view(self, f: RunFollower) -> None:
        view = self.view
        self._draw_charts(f)
        state = self.state_word()
        p = self.process
        view.set_progress(f.step, f.max_iters, rate_text(f, p.running, p.paused, p.rss_bytes() if p.running else 0,
                                                         p.pid), state)
        view.set_status(f.describe(state))
        view.set_note(f.note)
        scheme = self.scheme()
        kept = f.kept_steps(scheme)
        view.set_steps(kept, scheme)
        view.set_run_loaded(bool(kept) or f.ckpt_path(scheme) is not None)

    def _follow_latest(self, f: RunFollower) -> None:
        scheme = self.scheme()
        kept = f.kept_steps(scheme)
        if self.follow_session and self.view.follows_latest() and kept and (
                self.shown is None or self.shown[1:] != (scheme, kept[-1])) and self._step_wanted != (scheme, kept[-1]):
            self.choose_step(scheme, kept[-1])

    def _draw_charts(self, f: RunFollower) -> None:
        view = self.view
        view.set_run_charts(f.schemes, {name: (s.train_step, s.train_loss, s.eval_step, s.eval_val)
                                        for name, s in f.series.items()},
                            {name: (s.probe_step, s.icl) for name, s in f.series.items()})
        self._draw_step_parts(f)

    def _draw_step_parts(self, f: RunFollower) -> None:
        """What follows the step every panel shows: the scheme's charts with the head census at that step,
        and the sample of that step."""
        view = self.view
        scheme = self.scheme()
        s = f.series.get(scheme)
        if s is None:
            return
        steps, maps = [], {}
        for name in CENSUS_SHOWN:
            steps_n, stack = f.census_stack(scheme, name)
            if stack:
                steps, maps[name] = steps_n, stack
        at = self._shown_step(f, scheme)
        view.set_scheme_charts(s.train_step, s.lr, s.grad_norms, steps, maps, at)
        if s.samples:  # the sample of the step every panel shows (the latest probe at or before it)
            probes = [i for i, step in enumerate(s.probe_step) if at is None or step <= at] or [len(s.samples) - 1]
            view.set_sample(s.probe_step[probes[-1]], *s.samples[probes[-1]])

    def _shown_step(self, f: RunFollower, scheme: str) -> int | None:
        """The step of this run and scheme every panel shows, or None (another model, or none yet)."""
        shown = self.shown
        return shown[2] if shown is not None and shown[:2] == (str(f.root), scheme) else None

    # -- the session's model --------------------------------------------------------------------------
    def choose_step(self, scheme: str, step: int) -> None:
        """Make the run's `step` the session's model (a copy: training goes on) in a worker."""
        f = self.follower
        if f is None or scheme not in f.series:
            return
        self.follow_session = True
        self._step_wanted = (scheme, step)
        name = follower_step_name(f, scheme, step)
        training = self.ctx.session.training
        self.view.set_shown_step(f"loading step {step:,}…")
        self.submit(STEP_KEY, lambda token, progress: training.show_step(f, scheme, step, name=name, cancel=token),
                    still_current=lambda: self.follower is f, on_result=self._step_shown, on_error=self._step_failed)

    def _step_shown(self, shown) -> None:
        self.shown = (shown.run, shown.scheme, shown.step)
        self.view.set_shown_step(f"step {shown.step:,} shown")
        self.ctx.show_message(f"every panel now shows {shown.name}", 5000)
        f = self.follower  # the head census and the sample follow the step shown; the rest is drawn already
        if f is not None:
            with f.lock:
                if self.is_shown:
                    self._draw_step_parts(f)
                else:
                    self._stale = True
                self._follow_latest(f)

    def _step_failed(self, exc: BaseException) -> None:
        from gptcore.errors import Cancelled

        self._step_wanted = None
        if isinstance(exc, Cancelled):
            return
        expl = self.report_error(exc, "Showing the training step failed")
        self.view.set_shown_step("step not shown")
        self.view.set_message(expl.inline)

    def follow_latest(self) -> None:
        f = self.follower
        scheme = self.scheme()
        kept = f.kept_steps(scheme) if f else []
        if kept:
            self.choose_step(scheme, kept[-1])

    def use_final_model(self) -> None:
        """The run's latest full checkpoint (ckpt.pt) becomes the session's model: the run's step it was
        saved at, with the run's facts (the banner, Features' SAEs and corpus follow)."""
        f, scheme = self.follower, self.scheme()
        if f is None or f.ckpt_path(scheme) is None:
            self.view.set_message("this run has no ckpt.pt yet (one is written at each eval); wait for the first eval")
            return
        self.follow_session = False  # this model, not the run's next kept step (the slider resumes following)
        training = self.ctx.session.training
        self.submit(USE_KEY, lambda token, progress: training.use_final(f, scheme, cancel=token),
                    still_current=lambda: self.follower is f, on_result=self._step_shown,
                    on_error=lambda exc: self.view.set_message(
                        self.report_error(exc, "Using the run's model failed").inline))

    def save_checkpoint(self, kind: str = "ckpt") -> None:
        """Save… → the run's latest model as nanoGPT's ckpt.pt or a Hugging Face folder (asks where)."""
        f, scheme = self.follower, self.scheme()
        if f is None or f.ckpt_path(scheme) is None:
            self.view.set_message("this run has no ckpt.pt yet (one is written at each eval)")
            return
        suggested = f"{f.root.name}-hf" if kind == "hf" else "ckpt.pt"
        self.export_with_dialog(suggested, _writer(self.ctx.session.training, kind, f, scheme), self.view.set_message)

    def save_to(self, kind: str, path) -> bool:
        """Save without asking (what the dialog's choice leads to; tests call it)."""
        return self.export_to(str(path), _writer(self.ctx.session.training, kind, self.follower, self.scheme()), self.view.set_message)


    def use_config(self, config: dict) -> None:
        """A model config (the Config panel's): the form's shape fields, plus every other field that
        differs from nanoGPT's CPU recipe passed on as --key=value (the corpus sets vocab_size)."""
        from gptcore.model.config import GPTConfig
        from gptcore.training.config import CPU_RECIPE_MODEL

        self.view.set_form_values({k: config[k] for k in SHAPE_FIELDS if k in config})
        base = GPTConfig(**CPU_RECIPE_MODEL).to_dict()
        self.extra_model = {k: v for k, v in config.items()
                            if k not in SHAPE_FIELDS and k != "vocab_size" and base.get(k, object()) != v}
        extra = ", ".join(f"{k}={v}" for k, v in self.extra_model.items())
        self.view.set_status(f"model from the Config panel: {config.get('n_layer')} layers × {config.get('n_embd')} "
                             f"wide, {config.get('n_head')} heads" + (f" (also {extra})" if extra else "")
                             + "; the corpus sets the vocabulary")

    def use_session_shape(self) -> None:
        config = self.ctx.session.config if self.ctx.session is not None else None
        if config is not None:
            self.view.set_form_values({k: getattr(config, k) for k in SHAPE_FIELDS})

    def _browse(self, kind: str) -> None:
        if kind == "folder":
            path = QFileDialog.getExistingDirectory(self.view, "A nanoGPT data folder (train.bin, val.bin)",
                                                    self.ctx.file_path(""))
        else:
            path, _ = QFileDialog.getOpenFileName(self.view, "A UTF-8 text file", self.ctx.file_path(""),
                                                  "Text (*.txt *.md *.py);;All files (*)")
        if path:
            self.ctx.remember_folder_of(path)
            self.view.set_corpus(kind, path)

    # -- the contract ----------------------------------------------------------------------------------
    def invalidate(self, event) -> None:
        if isinstance(event, ModelSwapped) and self.follower is not None:
            if not is_run_model(event.new, self.follower.root) and (self.follow_session or self.shown):
                self.follow_session, self.shown, self._step_wanted = False, None, None
                self.view.set_shown_step("another model is loaded")

    def shutdown(self) -> None:
        self.timer.stop()
        self.process.shutdown()
        super().shutdown()


def _writer(training, kind: str, f: RunFollower, scheme: str):
    """What export_to calls with the chosen path: the run's latest model saved as `kind`."""
    save = training.save_hf if kind == "hf" else training.save_ckpt
    return lambda path: save(f, scheme, path)
