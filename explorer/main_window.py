"""The main window: tabs from the panel registry, menus, status bar, model loading.

Panels are built lazily, the first time their tab is shown (and, for panels that need a
model, once the first model is ready), so the window paints at once and only the
panel in view does work. After every model swap the window updates its status bar and
calls `on_model_changed()` on every panel already built.

Services for panels (through `ctx.window`): `show_message`, `set_activity`, `report_error`.

The window can exist before the session does (`session=None`): the app paints it first and
creates the session in a worker (`start()`), because importing torch takes seconds.
"""
from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING

from PySide6.QtCore import QSettings, Qt, QTimer, Signal
from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import (QFileDialog, QLabel, QMainWindow, QMessageBox, QProgressDialog, QStackedLayout,
                               QTabWidget, QToolButton, QVBoxLayout, QWidget)

from . import theme
from .errors import explain, log_exception
from .registry import PANELS, PanelContext, PanelSpec
from .workers import MODEL_TASK, Cancelled, TaskRunner

if TYPE_CHECKING:
    from .session import Session

log = logging.getLogger("explorer")

CHECKPOINT_FILTER = "Checkpoints (*.safetensors *.pt *.pth *.bin *.ckpt);;All files (*)"


def _rss_bytes() -> int:
    """Resident memory of this process (Linux /proc; 0 where unknown)."""
    try:
        with open("/proc/self/statm", encoding="ascii") as fh:
            return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


class _PanelSlot(QWidget):
    """One tab: a 'waiting' note until the panel is built, then the panel itself."""

    def __init__(self, spec: PanelSpec):
        super().__init__()
        self.spec = spec
        self.panel: QWidget | None = None
        self._stack = QStackedLayout(self)
        self._waiting = QLabel(f"{spec.title}: waiting for the model to load…")
        self._waiting.setObjectName("placeholderText")
        self._waiting.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self._stack.addWidget(self._waiting)

    def build(self, ctx: PanelContext) -> QWidget:
        if self.panel is None:
            self.panel = self.spec.factory(ctx)
            self._stack.addWidget(self.panel)
            self._stack.setCurrentWidget(self.panel)
            if ctx.prompt and hasattr(self.panel, "set_prompt"):
                self.panel.set_prompt(ctx.prompt)
        return self.panel


class MainWindow(QMainWindow):
    modelChanged = Signal()  # after the status bar and every built panel saw the new model

    def __init__(self, session: "Session | None", runner: TaskRunner, *, settings: QSettings | None = None,
                 prompt: str | None = None, panel: str | None = None, log_path: str | None = None):
        super().__init__()
        self.session, self.runner = session, runner
        self.settings = settings if settings is not None else QSettings("gpt-explorer", "gpt-explorer")
        self.log_path = log_path
        self.auto_download = True  # fetch GPT-2 small in the background when it is not cached
        self.errors_shown: list[tuple[str, str]] = []  # (title, message) of every error reported
        self._error_box: QMessageBox | None = None
        self._progress: QProgressDialog | None = None
        self._shown_version = -2  # never a real version: the first refresh always draws
        self.ctx = PanelContext(session=session, runner=runner, window=self, prompt=prompt)
        self.setWindowTitle("GPT Explorer")
        self.setWindowIcon(theme.icon("app"))

        central = QWidget()
        layout = QVBoxLayout(central)
        layout.setContentsMargins(6, 6, 6, 0)
        self.banner = QLabel()
        self.banner.setObjectName("untrainedBanner")
        self.banner.setWordWrap(True)
        self.banner.setTextFormat(Qt.TextFormat.RichText)
        self.banner.linkActivated.connect(self._banner_link)
        self.banner.hide()
        layout.addWidget(self.banner)
        self.tabs = QTabWidget()
        self.tabs.setDocumentMode(True)
        self._slots: dict[str, _PanelSlot] = {}
        for spec in PANELS:
            slot = _PanelSlot(spec)
            self._slots[spec.name] = slot
            self.tabs.addTab(slot, spec.title)
        self.tabs.currentChanged.connect(self._ensure_current_built)
        layout.addWidget(self.tabs, 1)
        self.setCentralWidget(central)

        self._build_status_bar()
        self._build_menus()
        runner.taskFailed.connect(lambda key, exc: self.report_error(f"{key} failed", exc))
        runner.busyChanged.connect(lambda busy: None if busy else self._refresh_if_swapped())
        self._memory_timer = QTimer(self)
        self._memory_timer.setInterval(2000)
        self._memory_timer.timeout.connect(self._update_memory)

        self._restore_settings(panel)
        self._refresh_if_swapped()

    # -- building the window ---------------------------------------------------------------
    def _build_status_bar(self) -> None:
        bar = self.statusBar()
        self.status_labels: dict[str, QLabel] = {}
        for key in ("activity", "model", "trained", "device", "dtype", "params", "memory"):
            label = QLabel()
            label.setObjectName("trainedBadge" if key == "trained" else f"status_{key}")
            self.status_labels[key] = label
            bar.addPermanentWidget(label)
            if key == "activity":
                self.cancel_button = QToolButton()
                self.cancel_button.setText("Cancel")
                self.cancel_button.setToolTip("Stop loading (the current model stays)")
                self.cancel_button.clicked.connect(lambda: self.runner.cancel(MODEL_TASK))
                self.cancel_button.hide()
                bar.addPermanentWidget(self.cancel_button)

    def _action(self, menu, text: str, slot, shortcut=None, icon: str | None = None, tip: str = "") -> QAction:
        action = QAction(text, self)
        if shortcut is not None:
            action.setShortcut(QKeySequence(shortcut))
        if icon:
            action.setIcon(theme.icon(icon))
        action.setStatusTip(tip)
        action.triggered.connect(slot)
        menu.addAction(action)
        return action

    def _build_menus(self) -> None:
        bar = self.menuBar()
        file_menu = bar.addMenu("&File")
        self.actions: dict[str, QAction] = {}
        self.actions["load_gpt2"] = self._action(
            file_menu, "Load &GPT-2 small…", lambda: self.load_model("gpt2"), "Ctrl+L", "download",
            "Load the real GPT-2 small weights (from the cache, or download them once)")
        self.actions["open_file"] = self._action(
            file_menu, "&Open checkpoint file…", self._open_file, "Ctrl+O", "open",
            ".safetensors, nanoGPT ckpt.pt or pytorch_model.bin")
        self.actions["open_folder"] = self._action(
            file_menu, "Open checkpoint &folder…", self._open_folder, "Ctrl+Shift+O", "open",
            "A Hugging Face model folder (config.json + weights)")
        self.actions["new_model"] = self._action(
            file_menu, "&New model from config", self.new_model_from_config, "Ctrl+N", "build",
            "Edit a config in the Config panel and build it")
        file_menu.addSeparator()
        self.actions["quit"] = self._action(file_menu, "&Quit", self.close, "Ctrl+Q")
        view_menu = bar.addMenu("&View")
        for spec in PANELS:
            self.actions[f"panel_{spec.name}"] = self._action(
                view_menu, spec.title, lambda _=False, n=spec.name: self.show_panel(n), spec.shortcut)
        help_menu = bar.addMenu("&Help")
        self.actions["about"] = self._action(help_menu, "&About GPT Explorer", self.show_about,
                                             "F1", "about")

    # -- panels --------------------------------------------------------------------------------
    def panel(self, name: str, create: bool = True) -> QWidget | None:
        """The panel widget for `name` (built now if `create` and its needs are met)."""
        slot = self._slots[name]
        ready = self.session is not None and (self.session.has_model or not slot.spec.needs_model)
        if slot.panel is None and create and ready:
            slot.build(self.ctx)
        return slot.panel

    def show_panel(self, name: str) -> QWidget | None:
        self.tabs.setCurrentWidget(self._slots[name])
        return self.panel(name)

    def current_panel_name(self) -> str:
        return self.tabs.currentWidget().spec.name

    def _ensure_current_built(self, *_):
        self.panel(self.current_panel_name())

    def new_model_from_config(self) -> None:
        page = self.show_panel("config")
        if page is not None and hasattr(page, "focus_form"):
            page.focus_form()

    # -- services for panels ------------------------------------------------------------------------
    def show_message(self, text: str, timeout_ms: int = 0) -> None:
        self.statusBar().showMessage(text, timeout_ms)

    def set_activity(self, text: str) -> None:
        self.status_labels["activity"].setText(text)

    def report_error(self, title: str, exc_or_text) -> None:
        """Error dialog (non-blocking) + log line; the window stays usable."""
        log_exception(title, exc_or_text)
        expl = explain(exc_or_text, self.log_path)
        heading = expl.title if isinstance(exc_or_text, BaseException) else title
        self.errors_shown.append((heading, expl.message))
        self.show_message(f"{heading}: {expl.message.splitlines()[0]}", 10000)
        box = self._error_box
        if box is None or not box.isVisible():
            box = QMessageBox(QMessageBox.Icon.Warning, heading, expl.message, QMessageBox.StandardButton.Ok, self)
            box.setWindowModality(Qt.WindowModality.NonModal)
            self._error_box = box
        else:  # several errors in a row: one dialog showing the latest, not a pile of them
            box.setWindowTitle(heading)
            box.setText(expl.message)
        box.show()

    @property
    def error_dialog(self) -> QMessageBox | None:
        return self._error_box if self._error_box is not None and self._error_box.isVisible() else None

    # -- model loading -----------------------------------------------------------------------------
    def start(self, source: str | None = None, device: str | None = None) -> None:
        """Create the session in a worker (importing torch there) and load `source` or the default.

        A failed `source` still leaves a session (without a model), so the user can open another.
        """
        def make_session(token, progress):
            from .session import Session  # imports torch: seconds, so never on the GUI thread

            session = Session(device=device)
            session.device  # resolve it here too (asking CUDA is slow)
            return session

        def attach(session) -> None:
            self.attach_session(session)  # the Config panel works from here on
            if source:
                self.load_model(source)
            else:
                self.load_default()

        self._run_model_task("Starting", make_session, on_result=attach)

    def attach_session(self, session: "Session") -> None:
        self.session = self.ctx.session = session
        self._refresh_if_swapped()

    def load_model(self, source: str) -> None:
        if self.session is None:
            self.show_message("Still starting; try again in a moment.", 3000)
            return
        self._run_model_task(f"Loading {source}", lambda token, progress: self.session.load(
            source, progress=progress, cancel=token))

    def load_default(self) -> None:
        """GPT-2 small from the cache, else the untrained stand-in at once and (when the hub is
        reachable and `auto_download`) the real weights downloaded in the background."""
        if self.session is None:
            self.start()
            return

        def loaded(info) -> None:
            self.notify_model_changed()
            if not info.trained and self.auto_download:
                from gptcore.hub import hub_offline

                if not hub_offline():
                    self.download_default()

        self._run_model_task("Loading GPT-2 small", lambda token, progress: self.session.load_default(
            progress=progress, cancel=token), on_result=loaded)

    def download_default(self) -> None:
        """Try to fetch GPT-2 small; failure (offline) is a status message, not a dialog: the
        untrained stand-in is already loaded and its banner says how to get real weights."""
        def failed(exc: BaseException) -> None:
            if not isinstance(exc, Cancelled):
                log_exception("Downloading GPT-2 small", exc)
                self.show_message(f"GPT-2 small could not be downloaded: {str(exc).splitlines()[0]}", 15000)

        self._run_model_task("Downloading GPT-2 small", lambda token, progress: self.session.load(
            "gpt2", progress=progress, cancel=token), on_error=failed)

    def _run_model_task(self, title: str, fn, on_result=None, on_error=None) -> None:
        self.show_message(f"{title}…")
        self.set_activity(f"{title}…")
        self.cancel_button.show()

        def report(exc: BaseException) -> None:
            if not isinstance(exc, Cancelled) and type(exc).__name__ != "LoadCancelled":
                self.report_error(title, exc)

        def on_finished() -> None:
            self._close_progress()
            self.cancel_button.hide()
            self.set_activity("")
            self._refresh_if_swapped()
            self.show_message("")

        self.runner.submit(MODEL_TASK, fn, on_result=on_result or (lambda _info: self.notify_model_changed()),
                           on_error=on_error or report, on_progress=lambda d, t, m: self._show_progress(title, d, t, m),
                           on_finished=on_finished)

    def _show_progress(self, title: str, done: int, total: int, message: str) -> None:
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

    def _open_file(self) -> None:
        start = self.settings.value("last_dir", os.path.expanduser("~"))
        path, _ = QFileDialog.getOpenFileName(self, "Open checkpoint file", start, CHECKPOINT_FILTER)
        if path:
            self.settings.setValue("last_dir", os.path.dirname(path))
            self.load_model(path)

    def _open_folder(self) -> None:
        start = self.settings.value("last_dir", os.path.expanduser("~"))
        path = QFileDialog.getExistingDirectory(self, "Open checkpoint folder", start)
        if path:
            self.settings.setValue("last_dir", os.path.dirname(path))
            self.load_model(path)

    def _banner_link(self, link: str) -> None:
        if link == "load-gpt2":
            self.load_model("gpt2")
        elif link == "open":
            self._open_file()

    # -- reacting to a model swap ----------------------------------------------------------------
    def notify_model_changed(self) -> None:
        """Called after the session swapped its model (by a load here or a build in a panel)."""
        self._refresh_if_swapped()

    def _refresh_if_swapped(self) -> None:
        version = -1 if self.session is None else self.session.version
        if version == self._shown_version:
            return
        self._shown_version = version
        self._update_status()
        self._ensure_current_built()
        if self.session is not None and self.session.has_model:
            self._ensure_current_built()
            for slot in self._slots.values():
                if slot.panel is not None and hasattr(slot.panel, "on_model_changed"):
                    slot.panel.on_model_changed()
            if not self._memory_timer.isActive() and self.isVisible():
                self._memory_timer.start()
        self.modelChanged.emit()

    def _update_status(self) -> None:
        from gptcore.params import format_count

        labels = self.status_labels
        if self.session is None:  # starting: importing the session means importing torch, so not here
            for key, label in labels.items():
                label.setText("(no model yet)" if key == "model" else "")
            return
        info = self.session.info
        has_model = self.session.has_model
        labels["model"].setText(info.name)
        labels["model"].setToolTip(info.source)
        if not has_model:
            labels["trained"].setText("")
        else:
            labels["trained"].setText("trained" if info.trained else "UNTRAINED")
        labels["trained"].setProperty("trained", "true" if info.trained else "false")
        theme.restyle(labels["trained"])
        labels["device"].setText(info.device if has_model else "")
        labels["dtype"].setText(info.dtype if has_model else "")
        labels["params"].setText(f"{format_count(info.n_params)} params" if info.n_params else "")
        labels["params"].setToolTip(f"{info.n_params:,} parameters ({'tied' if info.tied else 'untied'} head)")
        self._update_memory()
        if has_model and not info.trained:
            from .session import UNTRAINED_HOW_TO

            what = (info.note.split(UNTRAINED_HOW_TO)[0].replace("UNTRAINED — ", "").strip().rstrip(".")
                    or "freshly initialised weights: its outputs are noise")
            self.banner.setText(
                f"<b>UNTRAINED model</b> — {what}. &nbsp;<a href='load-gpt2'>Load GPT-2 small…</a> · "
                f"<a href='open'>Open checkpoint…</a> · or start with <code>gpt-explorer --model PATH</code>")
            self.banner.setToolTip(info.note)
            self.banner.show()
        else:
            self.banner.hide()
        self.setWindowTitle(f"GPT Explorer — {info.name}" if has_model else "GPT Explorer")

    def _update_memory(self) -> None:
        from gptcore.params import format_bytes

        if self.session is None:
            return
        info = self.session.info
        parts = []
        if info.memory_bytes:
            parts.append(f"weights {format_bytes(info.memory_bytes)}")
        rss = _rss_bytes()
        if rss:
            parts.append(f"process {format_bytes(rss)}")
        if info.device.startswith("cuda"):
            import torch

            parts.append(f"GPU {format_bytes(torch.cuda.memory_allocated(info.device))}")
        self.status_labels["memory"].setText(" · ".join(parts))

    # -- about, settings, closing ------------------------------------------------------------------
    def about_text(self) -> str:
        import platform

        import PySide6
        import pyqtgraph
        import torch
        from PySide6.QtCore import qVersion

        device = self.session.info.device if self.session is not None else "(starting)"
        if device.startswith("cuda"):
            device += f" ({torch.cuda.get_device_name(torch.device(device))})"
        return (f"<h3>GPT Explorer</h3><p>Look inside GPT-2-class models while they run.</p>"
                f"<p>Python {platform.python_version()}<br>torch {torch.__version__}<br>"
                f"PySide6 {PySide6.__version__} (Qt {qVersion()})<br>pyqtgraph {pyqtgraph.__version__}<br>"
                f"device: {device}, CUDA available: {torch.cuda.is_available()}</p>"
                f"<p>Log file: {self.log_path or '(none)'}</p>")

    def show_about(self) -> None:
        box = QMessageBox(QMessageBox.Icon.Information, "About GPT Explorer", self.about_text(),
                          QMessageBox.StandardButton.Ok, self)
        box.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        box.open()

    def _restore_settings(self, panel: str | None) -> None:
        geometry = self.settings.value("window/geometry")
        if geometry is not None:
            self.restoreGeometry(geometry)
        else:
            self.resize(1280, 820)
        name = panel or self.settings.value("window/panel", "config")
        if name in self._slots:
            self.tabs.setCurrentWidget(self._slots[name])
        self._ensure_current_built()

    def save_settings(self) -> None:
        self.settings.setValue("window/geometry", self.saveGeometry())
        self.settings.setValue("window/panel", self.current_panel_name())
        self.settings.sync()

    def showEvent(self, event) -> None:
        super().showEvent(event)
        if self.session is not None and self.session.has_model:
            self._memory_timer.start()

    def closeEvent(self, event) -> None:
        """Save settings, stop timers, cancel background work (app.main waits for it)."""
        self.save_settings()
        self._memory_timer.stop()
        self._close_progress()
        if self._error_box is not None:
            self._error_box.close()
        for slot in self._slots.values():
            if slot.panel is not None and hasattr(slot.panel, "shutdown"):
                slot.panel.shutdown()
        self.runner.cancel_all()
        super().closeEvent(event)
