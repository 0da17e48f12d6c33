"""The main window's model-loading half: every model swap the window starts, as one task.

Starting the session, loading a checkpoint, the default model and the background GPT-2
download all run as the runner's MODEL_TASK (so a newer request supersedes an older one),
with the same feedback: an activity note and Cancel button in the status bar, a progress
dialog for loads that take longer than half a second, and failures as the error dialog
(a cancel is not a failure). Whatever fails, the current model stays.

The swap itself is announced by the session (`ModelSwapped`); the window and every panel
follow that event, so nothing here tells anyone. Errors go through the one error path,
`ctx.report_error(exc, title, after=…, inline=False)` (a load has no place of its own to
show them, so the dialog opens even for a diagnosed bad file).

`ModelLoading` is mixed into MainWindow, which provides `session`, `ctx`, `runner`,
`settings`, `cancel_button`, `auto_download`, `_progress`, `show_message`,
`set_activity`, `_show_session`, `fall_back_on_failed_start` and `ask_head_count`.

A nanoGPT char model whose meta.pkl (its characters) is not where its config['dataset'] says
opens with token ids, and the MetaDialog says why and offers to open the file.

A file that does not record its head count (the book's model.pth) is never loaded on a guess:
the HeadCountDialog asks, and the load runs again with the count chosen (`--n-head` gives it
up front; screenshot mode, which cannot ask, reports the error and exits 2).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QFileDialog, QProgressDialog

from explorer.controllers.errors import log_exception
from gptcore.errors import is_cancellation as _cancelled

from explorer.runtime.workers import MODEL_TASK

if TYPE_CHECKING:
    from explorer.session.core import Session


CHECKPOINT_FILTER = "Checkpoints (*.safetensors *.pt *.pth *.bin *.ckpt);;All files (*)"


class ModelLoading:
    meta_dialog = None  # the open MetaDialog, if any (a nanoGPT char model without its meta.pkl)

    def start(self, source: str | None = None, device: str | None = None, n_head: int | None = None,
              dtype: str = "fp32", run: str | None = None) -> None:
        """Create the session in a worker (importing torch there) and load `source`, else the latest
        kept step of the training run folder `run` (--run), else the default.
        `dtype` is the generation precision (--dtype): asked for when the first model has loaded
        (`modelChanged`), since whether bf16 pays is measured on that model; where it is measured
        slower the error dialog gives the figures and the app goes on in fp32.

        A failed `source` still leaves a session (without a model), so the user can open another.
        """
        def make_session(token, progress):
            from explorer.session.core import Session  # imports torch: seconds, so never on the GUI thread

            session = Session(device=device)
            session.device  # resolve it here too (asking CUDA is slow)
            return session

        def attach(session) -> None:
            self.attach_session(session)  # the Config panel works from here on
            if source:
                self.load_model(source, fall_back_to_default=self.fall_back_on_failed_start, n_head=n_head)
            elif run:
                self.load_run(run)
            else:
                self.load_default()
            if dtype != "fp32":
                self._choose_precision_once_loaded(dtype)

        self._run_model_task("Starting", make_session, on_result=attach)

    def _choose_precision_once_loaded(self, dtype: str) -> None:
        """--dtype: chosen at the first model swap that leaves a model (a load yields to other
        tasks between its steps, so a task queued now could run before the model exists)."""
        from explorer.shell.precision_menu import choose_precision

        def once() -> None:
            if self.session is None or not self.session.has_model:
                return
            self.modelChanged.disconnect(once)
            choose_precision(self, dtype, after="Generation runs in fp32.")

        self.modelChanged.connect(once)

    def attach_session(self, session: "Session") -> None:
        self.session = session
        self.ctx.attach(session)  # the window and every panel follow its events from here on
        self._show_session()

    def load_model(self, source: str, fall_back_to_default: bool = False, n_head: int | None = None,
                   meta: str | None = None) -> None:
        """Load `source`; if it fails and there is no model yet (a bad `--model` at start) and
        `fall_back_to_default`, open the untrained default instead of leaving the window empty.
        `n_head` is for files that do not record it; without it such a file asks (HeadCountDialog).
        `meta`: a nanoGPT char model's meta.pkl; when its own is not found the window asks (MetaDialog)."""
        if self.session is None:
            self.show_message("Still starting; try again in a moment.", 3000)
            return
        title = f"Loading {source}"

        def failed(exc: BaseException) -> None:
            from gptcore.io.head_count import HeadCountNeeded  # here: gptcore.io.checkpoints imports torch

            if _cancelled(exc):
                return
            if isinstance(exc, HeadCountNeeded) and self.ask_head_count:
                QTimer.singleShot(0, lambda: self._ask_head_count(source, exc, fall_back_to_default))
                return
            if self.session.has_model:
                after = f"The current model ({self.session.info.name}) is still loaded."
            elif fall_back_to_default:
                after = "Opening the built-in default model instead."
                QTimer.singleShot(0, self.load_default)  # after this task's own on_finished
            else:
                after = "No model is loaded: open one from the File menu."
            self.ctx.report_error(exc, title, after=after, inline=False)

        session = self.session  # the task holds the session, never the window (runtime/task_check.py)
        self._run_model_task(title, lambda token, progress: session.load(
            source, progress=progress, cancel=token, n_head=n_head, meta=meta),
            on_result=lambda _info: self._offer_meta(source, n_head), on_error=failed)

    def _offer_meta(self, source: str, n_head: int | None) -> None:
        """A nanoGPT char model opened number-only because its meta.pkl was not found: ask for it
        (not in screenshot mode, which has nobody to ask; the status line says why there)."""
        tokenizer = self.session.tokenizer
        if getattr(tokenizer, "wants", "") != "meta.pkl" or not self.ask_head_count:
            return
        from pathlib import Path

        from explorer.shell.meta_dialog import MetaDialog

        dialog = MetaDialog(self.session.info.name, tokenizer.reason, str(Path(source).expanduser().parent), self)
        dialog.chosen.connect(lambda path: self.load_model(source, n_head=n_head, meta=path))
        dialog.rejected.connect(lambda: self.show_message(
            f"{self.session.info.name}: token ids are shown (no meta.pkl); File → Open it again to choose one", 10000))
        dialog.finished.connect(lambda _r: setattr(self, "meta_dialog", None))
        self.meta_dialog = dialog
        dialog.open()

    def _ask_head_count(self, source: str, exc, fall_back_to_default: bool) -> None:
        from explorer.shell.head_count_dialog import HeadCountDialog

        dialog = HeadCountDialog(str(exc.path), exc.n_embd, exc.choices, self)
        dialog.chosen.connect(lambda n: self.load_model(source, fall_back_to_default, n_head=n))

        def declined() -> None:
            self.show_message(f"{source} was not loaded: it needs a head count", 10000)
            if not self.session.has_model and fall_back_to_default:
                self.load_default()

        dialog.rejected.connect(declined)
        dialog.finished.connect(lambda _r: setattr(self, "head_count_dialog", None))
        self.head_count_dialog = dialog
        dialog.open()

    def load_run(self, path: str) -> None:
        """The run's latest kept step as the session's model (--run: every panel shows the run from the
        start, not the default model); a run that kept no step yet opens the default meanwhile (the
        Train panel puts its first step in when it comes). A folder that is not a run: the error
        dialog, and the default."""
        session = self.session

        def shown(step) -> None:
            if step is None:
                self.show_message(f"{path} has no kept step yet: the default model is open until it keeps one", 10000)
                self.load_default()

        def failed(exc: BaseException) -> None:
            if not _cancelled(exc):
                self.ctx.report_error(exc, f"Opening run {path}", after="Opening the built-in default model instead.",
                                      inline=False)
                QTimer.singleShot(0, self.load_default)  # after this task's own on_finished

        self._run_model_task(f"Opening run {path}", lambda token, progress: session.training.show_latest(
            path, cancel=token), on_result=shown, on_error=failed)

    def load_default(self) -> None:
        """GPT-2 small from the cache, else the untrained stand-in at once and (when the hub is
        reachable and `auto_download`) the real weights downloaded in the background."""
        if self.session is None:
            self.start()
            return

        def loaded(info) -> None:
            if not info.trained and self.auto_download:
                from gptcore.io.hub import hub_offline

                if not hub_offline():
                    self.download_default()

        session = self.session

        def work(token, progress):
            from explorer.session.models import load_default

            return load_default(session, progress=progress, cancel=token)

        self._run_model_task("Loading GPT-2 small", work, on_result=loaded)

    def download_default(self) -> None:
        """Try to fetch GPT-2 small; failure (offline) is a status message, not a dialog: the
        untrained stand-in is already loaded and its banner says how to get real weights."""
        def failed(exc: BaseException) -> None:
            if not _cancelled(exc):
                log_exception("Downloading GPT-2 small", exc)
                self.show_message(f"GPT-2 small could not be downloaded: {str(exc).splitlines()[0]}", 15000)

        session = self.session
        self._run_model_task("Downloading GPT-2 small", lambda token, progress: session.load(
            "gpt2", progress=progress, cancel=token), on_error=failed)

    def _run_model_task(self, title: str, fn, on_result=None, on_error=None) -> None:
        # Said once, in the activity field beside its Cancel button (a status message as well
        # showed "Downloading GPT-2 small…" twice, and clearing it wiped the error's line).
        self.set_activity(f"{title}…")
        self.cancel_button.show()

        def report(exc: BaseException) -> None:
            if not _cancelled(exc):
                self.ctx.report_error(exc, title, inline=False)

        def on_finished() -> None:
            self._close_progress()
            self.cancel_button.hide()
            self.set_activity("")

        self.runner.submit(MODEL_TASK, fn, on_result=on_result,
                           on_error=on_error or report, on_progress=lambda d, t, m: self._show_progress(title, d, t, m),
                           on_finished=on_finished)

    def _show_progress(self, title: str, done: int, total: int, message: str) -> None:
        if self._progress is None and self.error_dialog is not None:
            return  # never over an error not yet read (a bad --model, then the default loading)
        if self._progress is None:
            dlg = QProgressDialog(title, "Cancel", 0, 100, self)
            dlg.setWindowTitle(title)
            dlg.setMinimumDuration(500)  # quick loads from the cache never flash a dialog
            dlg.setAutoClose(False)
            dlg.setAutoReset(False)
            dlg.canceled.connect(lambda: self.runner.cancel(MODEL_TASK))
            self._progress = dlg
        self._progress.setLabelText(f"{title}\n{message}" if message else title)
        self._progress.setMaximum(max(int(total), 1))
        self._progress.setValue(min(int(done), max(int(total), 1)))

    def _close_progress(self) -> None:
        if self._progress is not None:
            self._progress.close()
            self._progress.deleteLater()
            self._progress = None

    # -- choosing what to load -----------------------------------------------------------------------
    def _open_file(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "Open checkpoint file", self.ctx.file_path(""), CHECKPOINT_FILTER)
        if path:
            self.ctx.remember_folder_of(path)
            self.load_model(path)

    def _open_folder(self) -> None:
        path = QFileDialog.getExistingDirectory(self, "Open checkpoint folder", self.ctx.file_path(""))
        if path:
            self.ctx.remember_folder_of(path)
            self.load_model(path)

    def _banner_link(self, link: str) -> None:
        if link == "load-gpt2":
            self.load_model("gpt2")
        elif link == "open":
            self._open_file()
