"""Train controller: starts `python -m gptcore.train` as a child, follows its run folder, and puts
the step the user scrubs to into the session so every other panel shows the model as it was then.

Following: a run folder is read by explorer/session/training_follow.py. Opening one reads its whole trace
once in a worker (a finished run's trace can be megabytes); after that a QTimer polls every
POLL_MS on the GUI thread, which reads only what was appended since (a few KB). A folder deleted
or damaged while followed shows the reader's message above the charts and keeps them.

Scrubbing: a step's weights load in a worker (explorer/session/training_models.py) under one runner key,
so a fast drag keeps only the last step; the session then announces a TrainingStepShown (or a
ModelSwapped, the first time) and the window's status bar says which step is shown.
"""
from __future__ import annotations

import shutil
from pathlib import Path

from PySide6.QtCore import QObject, QTimer
from PySide6.QtWidgets import QFileDialog

from explorer.views.train.panel import TrainPanel
from explorer.session.events import ModelSwapped
from explorer.runtime.train_process import TrainProcess
from explorer.session.training_follow import RunFollower, RunFollowError, new_run_dir, remember_run
from explorer.controllers.base import PanelController
from explorer.controllers.train_settings import command_settings, form_defaults, induction_preset_available, preset_values, run_form_values

POLL_MS = 500
OPEN_KEY = "train-open"
STEP_KEY = "train-step"
USE_KEY = "train-use"
SAVE_KEY = "train-save"
CENSUS_SHOWN = ("previous_token", "induction", "position_copy")


class TrainController(PanelController):
    @classmethod
    def make_view(cls, ctx) -> TrainPanel:
        from gptcore.model.init import INIT_SCHEMES

        view = TrainPanel(INIT_SCHEMES)
        view.form.set_values(form_defaults("cpu"))
        view.form.set_corpora({"induction": induction_preset_available()})
        return view

    def __init__(self, ctx, view: TrainPanel, parent: QObject | None = None):
        super().__init__(ctx, view, parent)
        self.follower: RunFollower | None = None
        self.process = TrainProcess(self)
        self.process.finished.connect(self._process_finished)
        self.process.output.connect(self._process_output)
        self.shown: tuple[str, str, int] | None = None  # (run, scheme, step) the session shows
        self.follow_session = False  # True once the user put a step of this run into the session
        self.extra_model: dict = {}  # config fields beyond the form's, from "Train this config…"
        self._step_requested: tuple[str, int] | None = None
        self.timer = QTimer(self)
        self.timer.setInterval(POLL_MS)
        self.timer.timeout.connect(self.poll)
        form = view.form
        form.startRequested.connect(self.start)
        form.stopRequested.connect(self.stop)
        form.pauseRequested.connect(self.pause)
        form.resumeRequested.connect(self.resume)
        form.openRunRequested.connect(self.open_run_dialog)
        form.presetRequested.connect(lambda name: form.set_values(form_defaults(name)))
        form.browseRequested.connect(self._browse)
        form.corpusChanged.connect(lambda kind: kind == "induction" and form.set_values(preset_values("induction")))
        form.modelFromSessionRequested.connect(self.use_session_shape)
        view.charts.censusSchemeChanged.connect(lambda _name: self.draw())
        view.stepChosen.connect(self.choose_step)
        view.latestRequested.connect(self.follow_latest)
        view.useModelRequested.connect(self.use_final_model)
        view.saveRequested.connect(self.save_checkpoint)
        run = getattr(ctx, "run", None)
        if run:
            self.open_run(run)
        else:
            QTimer.singleShot(0, self.mark_ready)  # an empty panel is its own first data

    # -- starting and stopping ---------------------------------------------------------------------
    def start(self, values: dict) -> None:
        try:
            settings = {**self.extra_model, **command_settings(values)}
        except ValueError as exc:
            self.view.set_message(str(exc))
            return
        out_dir = new_run_dir()
        try:
            out_dir.parent.mkdir(parents=True, exist_ok=True)
            self.process.start(str(out_dir), settings)
        except (OSError, RuntimeError) as exc:
            self.view.set_message(self.report_error(exc, "Could not start the training").inline)
            return
        self._follow(RunFollower(out_dir))
        self.view.form.set_running(True)
        self.view.set_status(f"starting: {' '.join(self.process.command[1:])}")

    def start_with(self, overrides: dict) -> None:
        """Start with the form's values changed by `overrides` (tests, 'Train this config…')."""
        self.view.form.set_values(overrides)
        self.start({**self.view.form.values(), **{k: v for k, v in overrides.items() if k in ("corpus", "path")}})

    def stop(self) -> None:
        self.view.set_status("stopping: the run saves a checkpoint first…")
        self.process.stop()

    def pause(self) -> None:
        self.process.pause()
        self.view.form.set_running(True, paused=True)
        self.view.set_status("paused (the child process is stopped; Resume continues it)")

    def resume(self) -> None:
        self.process.resume()
        self.view.form.set_running(True, paused=False)

    def _process_output(self, line: str) -> None:
        if line.startswith("error:"):
            self.view.set_message(line[len("error:"):].strip())

    def _process_finished(self, code: int, tail: str) -> None:
        self.view.form.set_running(False)
        if code not in (0, 130):
            errors = [line for line in tail.splitlines() if line.startswith("error:")]
            why = errors[-1][len("error:"):].strip() if errors else (tail.splitlines() or ["no output"])[-1]
            self.view.set_message(f"the training stopped with exit status {code}: {why}")
        self.poll()
        if self.follower is not None and self.follower.state == "waiting":
            self.timer.stop()  # it never wrote its run folder: nothing more will come

    # -- following a run folder -----------------------------------------------------------------------
    def open_run_dialog(self) -> None:
        start = str(self.follower.root.parent) if self.follower else ""
        path = QFileDialog.getExistingDirectory(self.view, "Open a training run folder", start)
        if path:
            self.open_run(path)

    def open_run(self, path) -> None:
        """Follow (or replay) the run folder `path`; its whole trace is read once in a worker."""
        follower = RunFollower(path)
        self.view.set_status(f"reading {follower.root}…")

        def read(token, progress):
            follower.poll()
            return follower

        self.ctx.runner.submit(OPEN_KEY, read, on_result=self._follow,
                               on_error=lambda exc: self._open_failed(follower, exc))

    def _open_failed(self, follower: RunFollower, exc: BaseException) -> None:
        text = str(exc) if isinstance(exc, (RunFollowError, ValueError, OSError)) else self.report_error(
            exc, "Opening the run failed").inline
        self.view.set_message(text)
        self.view.set_status(f"could not open {follower.root}")
        self.mark_ready()

    def _follow(self, follower: RunFollower) -> None:
        if self.follower is None or follower.root != self.follower.root:
            self.view.clear_run()
            self.shown, self.follow_session = None, False
            if follower.meta is not None and not self.process.running:
                self.view.form.set_values(run_form_values(follower.meta))  # Start runs the same again
        self.follower = follower
        remember_run(self.ctx.settings, follower.root)
        self.view.set_message("")
        self.draw()
        self.timer.start()
        self.mark_ready()

    def poll(self) -> None:
        follower = self.follower
        if follower is None:
            return
        try:
            changed = follower.poll()
        except RunFollowError as exc:
            self.timer.stop()
            self.view.set_message(str(exc))
            self.view.set_status(f"no longer following {follower.root}")
            return
        if changed:
            self.draw()
        if follower.finished and not self.process.running:
            self.timer.stop()

    # -- drawing ----------------------------------------------------------------------------------------
    def scheme(self) -> str:
        f = self.follower
        shown = self.view.charts.shown_scheme()
        return shown if f and shown in f.series else (f.schemes[0] if f and f.schemes else "")

    def draw(self) -> None:
        f, view = self.follower, self.view
        if f is None:
            return
        view.charts.set_schemes(f.schemes)
        view.charts.set_losses({name: (s.train_step, s.train_loss, s.eval_step, s.eval_val)
                                for name, s in f.series.items()})
        scheme = self.scheme()
        s = f.series.get(scheme)
        if s is not None:
            view.charts.set_lr(s.train_step, s.lr)
            view.charts.set_grad_norms(s.train_step, s.grad_norms)
            steps, maps = [], {}
            for name in CENSUS_SHOWN:
                steps_n, stack = f.census_stack(scheme, name)
                if stack:
                    steps, maps[name] = steps_n, stack
            view.charts.set_census(steps, maps)
            if s.samples:
                view.set_sample(s.probe_step[-1], *s.samples[-1])
        view.charts.set_icl({name: (x.probe_step, x.icl) for name, x in f.series.items()})
        tokens_s, left = f.rate()
        rate = f"{tokens_s:,.0f} tokens/s" if tokens_s else ""
        if left and f.state == "running":
            rate += f" · ETA {_duration(left)}"
        if f.memory_mb is not None:  # the run's own figure: also for a run started elsewhere
            rate += f" · peak memory {f.memory_mb:,.0f} MB"
        elif self.process.running:
            rss = self.process.rss_bytes()
            rate += f" · child {rss / 2**20:,.0f} MiB" if rss else f" · child pid {self.process.pid}"
        view.set_progress(f.step, f.max_iters, rate, {"running": "", "waiting": "starting"}.get(f.state, f.state))
        view.set_status(f.describe())
        kept = f.kept_steps(scheme)
        view.set_steps(kept, scheme)
        view.set_run_loaded(bool(kept))
        if self.follow_session and view.latest_box.isChecked() and kept and (
                self.shown is None or self.shown[1:] != (scheme, kept[-1])):
            self.choose_step(scheme, kept[-1])

    # -- the session's model --------------------------------------------------------------------------
    def choose_step(self, scheme: str, step: int) -> None:
        """Make the run's `step` the session's model (a copy: training goes on) in a worker."""
        f = self.follower
        if f is None or scheme not in f.series or self.ctx.session is None:
            return
        from explorer.session.training_models import show_step, step_name

        self.follow_session = True
        self._step_requested = (scheme, step)
        name = step_name(step, f.max_iters, f.latest_val(scheme, step), f.corpus_label(), scheme, len(f.schemes))
        weights, root, session = f.weights_path(scheme, step), f.root, self.ctx.session
        self.view.set_shown_step(f"loading step {step:,}…")
        self.ctx.runner.submit(STEP_KEY, lambda token, progress: show_step(session, root, scheme, step, weights, name,
                                                                           cancel=token),
                               on_result=self._step_shown, on_error=self._step_failed)

    def _step_shown(self, shown) -> None:
        self.shown = (shown.run, shown.scheme, shown.step)
        self.view.set_shown_step(f"step {shown.step:,} shown")
        self.ctx.show_message(f"every panel now shows {shown.name}", 5000)

    def _step_failed(self, exc: BaseException) -> None:
        from gptcore.errors import Cancelled

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
        """The run's latest full checkpoint (ckpt.pt) becomes the session's model, loaded as a file."""
        path = self._latest_ckpt()
        if path is None:
            self.view.set_message("this run has no ckpt.pt yet (one is written at each eval); wait for the first eval")
            return
        self.follow_session = False
        session = self.ctx.session
        self.ctx.runner.submit(USE_KEY, lambda token, progress: session.load(str(path), cancel=token),
                               on_result=lambda info: self.ctx.show_message(f"the session's model is now {info.name}"),
                               on_error=lambda exc: self.view.set_message(
                                   self.report_error(exc, "Using the run's model failed").inline))

    def _latest_ckpt(self) -> Path | None:
        f = self.follower
        if f is None or f.meta is None:
            return None
        name = (f.meta.get("checkpoints") or {}).get(self.scheme()) or (
            "ckpt.pt" if len(f.schemes) <= 1 else f"ckpt-{self.scheme()}.pt")
        path = f.root / name
        return path if path.is_file() else None

    def save_checkpoint(self, kind: str = "ckpt") -> None:
        src = self._latest_ckpt()
        if src is None:
            self.view.set_message("this run has no ckpt.pt yet (one is written at each eval)")
            return
        if kind == "hf":
            target, _ = QFileDialog.getSaveFileName(self.view, "A new folder for the Hugging Face GPT-2 model",
                                                    self.ctx.file_path(f"{self.follower.root.name}-hf"))
            if target:
                self.save_hf(target)
            return
        target, _ = QFileDialog.getSaveFileName(self.view, "Save the run's nanoGPT checkpoint",
                                                self.ctx.file_path("ckpt.pt"), "nanoGPT checkpoint (*.pt)")
        if target:
            try:
                shutil.copy2(src, target)
                self.ctx.remember_folder_of(target)
                self.ctx.show_message(f"saved {target} (nanoGPT's ckpt.pt: model, optimizer, model_args, iter_num)")
            except OSError as exc:
                self.view.set_message(f"could not save {target}: {exc.strerror or exc}; choose another folder")

    def use_config(self, config: dict) -> None:
        """A model config (the Config panel's): the form's shape fields, plus every other field that
        differs from nanoGPT's CPU recipe passed on as --key=value (the corpus sets vocab_size)."""
        from gptcore.model.config import GPTConfig
        from gptcore.training.config import CPU_RECIPE_MODEL

        shown = ("n_layer", "n_head", "n_embd", "block_size", "bias", "dropout")
        self.view.form.set_values({k: config[k] for k in shown if k in config})
        base = GPTConfig(**CPU_RECIPE_MODEL).to_dict()
        self.extra_model = {k: v for k, v in config.items()
                            if k not in shown and k != "vocab_size" and base.get(k, object()) != v}
        extra = ", ".join(f"{k}={v}" for k, v in self.extra_model.items())
        self.view.set_status(f"model from the Config panel: {config.get('n_layer')} layers × {config.get('n_embd')} "
                             f"wide, {config.get('n_head')} heads" + (f" (also {extra})" if extra else "")
                             + "; the corpus sets the vocabulary")

    def save_hf(self, target) -> None:
        """The run's latest ckpt.pt as a Hugging Face GPT-2 folder at `target` (new or empty), in a worker;
        the run's char_vocab.json goes with it so this app reads the text."""
        src, target = self._latest_ckpt(), Path(target)
        if target.exists() and (not target.is_dir() or any(target.iterdir())):
            self.view.set_message(f"{target} already exists and is not an empty folder; choose a new folder name")
            return
        vocab = [p for p in (self.follower.root / "char_vocab.json",) if p.is_file()]

        def work(token, progress):
            from gptcore.io.export_hf import save_hf_folder
            from gptcore.io.loading import load

            model, _info = load(str(src), device="cpu")
            return save_hf_folder(model, target, extra_files=vocab)

        self.ctx.runner.submit(SAVE_KEY, work, on_result=lambda folder: self.ctx.show_message(
            f"saved {folder} (config.json + model.safetensors: transformers' GPT2LMHeadModel opens it)", 8000),
            on_error=lambda exc: self.view.set_message(self.report_error(exc, "Saving the folder failed").inline))

    def use_session_shape(self) -> None:
        config = self.ctx.session.config if self.ctx.session is not None else None
        if config is not None:
            self.view.form.set_values({k: getattr(config, k) for k in ("n_layer", "n_head", "n_embd", "block_size",
                                                                      "bias", "dropout")})

    def _browse(self, kind: str) -> None:
        if kind == "folder":
            path = QFileDialog.getExistingDirectory(self.view, "A nanoGPT data folder (train.bin, val.bin)",
                                                    self.ctx.file_path(""))
        else:
            path, _ = QFileDialog.getOpenFileName(self.view, "A UTF-8 text file", self.ctx.file_path(""),
                                                  "Text (*.txt *.md *.py);;All files (*)")
        if path:
            self.ctx.remember_folder_of(path)
            self.view.form.set_corpus_path(kind, path)

    # -- the contract ----------------------------------------------------------------------------------
    def invalidate(self, event) -> None:
        if isinstance(event, ModelSwapped) and self.follower is not None:
            from explorer.session.training_models import is_run_model

            if not is_run_model(event.new, self.follower.root) and (self.follow_session or self.shown):
                self.follow_session, self.shown = False, None
                self.view.set_shown_step("another model is loaded")

    def shutdown(self) -> None:
        self.timer.stop()
        self.process.shutdown()
        for key in (OPEN_KEY, STEP_KEY, USE_KEY, SAVE_KEY):
            self.ctx.runner.cancel(key)
        super().shutdown()


def _duration(seconds: float) -> str:
    seconds = int(seconds)
    if seconds >= 3600:
        return f"{seconds // 3600} h {seconds % 3600 // 60:02d} min"
    if seconds >= 60:
        return f"{seconds // 60} min {seconds % 60:02d} s"
    return f"{seconds} s"
