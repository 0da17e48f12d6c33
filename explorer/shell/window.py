"""The main window: tabs from the panel registry, menus, the error dialog; composes the
status bar and banner (status_bar.py) and the model-loading actions (model_loading.py).

Panels are built lazily, the first time their tab is shown (and, for panels that need a
model, once the first model is ready), so the window paints at once; after that only the
panel in front computes: the window tells every built panel whether it is shown, and a hidden
one only marks itself stale (controllers/base.py). The window follows the session's events like every panel does
(`ctx.signals`): after a model swap it updates its status bar, banner and title and builds
the panel in view; after an ablation change it shows the ablation. It never tells panels:
each one follows the session itself (controllers/base.py).

Services for panels (through their `PanelContext`, context.py): `show_message`, `set_activity`,
`show_error_dialog`, `settings`. The contract the window calls on a panel
is `PanelPage`'s (controllers/base.py): nothing is probed with hasattr.

The window can exist before the session does (`session=None`): the app paints it first and
creates the session in a worker (`start()`), because importing torch takes seconds.
"""
from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from PySide6.QtCore import QRect, QSettings, Qt, QTimer, Signal
from PySide6.QtGui import QAction, QGuiApplication, QKeySequence
from PySide6.QtWidgets import (QLabel, QMainWindow, QMessageBox, QProgressDialog, QStackedLayout, QTabWidget,
                               QVBoxLayout, QWidget)

import explorer.widgets.theme as theme
from explorer.controllers.context import PanelContext
from explorer.shell.model_loading import ModelLoading
from explorer.shell.registry import PANELS, PanelSpec
from explorer.session.events import AblationChanged, ModelSwapped, SettingsChanged, TrainingStepShown
from explorer.shell.precision_menu import add_precision_menu, sync_precision
from explorer.shell.status_bar import ModelStatusBar, UntrainedBanner
from explorer.runtime.workers import MODEL_TASK, TaskRunner

if TYPE_CHECKING:
    from explorer.controllers.base import PanelPage
    from explorer.session.core import Session

log = logging.getLogger("explorer")


class _PanelSlot(QWidget):
    """One tab: a 'waiting' note until the panel is built, then the panel itself."""

    def __init__(self, spec: PanelSpec):
        super().__init__()
        self.spec = spec
        self.panel: "PanelPage | None" = None
        self._stack = QStackedLayout(self)
        self._waiting = QLabel(f"{spec.title}: waiting for the model to load…")
        self._waiting.setObjectName("placeholderText")
        self._waiting.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self._stack.addWidget(self._waiting)

    def build(self, ctx: PanelContext, shown: bool = True) -> "PanelPage":
        if self.panel is None:
            self.panel = self.spec.build(ctx, shown)
            self._stack.addWidget(self.panel)
            self._stack.setCurrentWidget(self.panel)
        return self.panel


class MainWindow(ModelLoading, QMainWindow):
    modelChanged = Signal()  # after the status bar showed a new model (panels follow the same event)

    def __init__(self, session: "Session | None", runner: TaskRunner, *, settings: QSettings | None = None,
                 prompt: str | None = None, panel: str | None = None, log_path: str | None = None):
        super().__init__()
        self.session, self.runner = session, runner
        self.settings = settings if settings is not None else QSettings("gpt-explorer", "gpt-explorer")
        self.log_path = log_path
        self.auto_download = True  # fetch GPT-2 small in the background when it is not cached
        self.fall_back_on_failed_start = True  # a bad --model opens the default (not in screenshot mode)
        self.ask_head_count = True  # a file without a head count opens a dialog (screenshot mode: exit 2)
        self.head_count_dialog = None  # the open HeadCountDialog, if any
        self.errors_shown: list[tuple[str, str]] = []  # (title, message) of every error reported
        self._error_box: QMessageBox | None = None
        self._progress: QProgressDialog | None = None
        self.ctx = PanelContext(session=session, runner=runner, window=self, prompt=prompt)
        self.ctx.signals.event.connect(self._on_session_event)  # before any panel: the status bar first
        self.setWindowTitle("GPT Explorer")
        self.setWindowIcon(theme.icon("app"))

        central = QWidget()
        layout = QVBoxLayout(central)
        layout.setContentsMargins(6, 6, 6, 0)
        self.banner = UntrainedBanner()
        self.banner.linkActivated.connect(self._banner_link)
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
        runner.taskFailed.connect(lambda key, exc: self.ctx.report_error(exc, f"{key} failed", inline=False))
        self._memory_timer = QTimer(self)
        self._memory_timer.setInterval(2000)
        self._memory_timer.timeout.connect(self._update_memory)

        self._placed = False  # kept on the screen at the first show (keep_on_screen)
        self._restore_settings(panel)
        self._show_session()

    # -- building the window ---------------------------------------------------------------
    def _build_status_bar(self) -> None:
        self.status_bar = ModelStatusBar()
        self.status_bar.cancelRequested.connect(lambda: self.runner.cancel(MODEL_TASK))
        self.status_bar.resetAblationRequested.connect(self.reset_ablation)
        self.setStatusBar(self.status_bar)
        self.status_labels = self.status_bar.labels
        self.cancel_button = self.status_bar.cancel_button

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
        self.actions["open_run"] = self._action(
            file_menu, "Open &run…", lambda: self.open_run(), "Ctrl+Shift+R", "open",
            "Follow or replay a training run folder (the --out_dir of python -m gptcore.train)")
        self.recent_runs_menu = file_menu.addMenu("Recent r&uns")
        self.recent_runs_menu.aboutToShow.connect(self._fill_recent_runs)
        self.actions["new_model"] = self._action(
            file_menu, "&New model from config", self.new_model_from_config, "Ctrl+N", "build",
            "Edit a config in the Config panel and build it")
        file_menu.addSeparator()
        self.actions["quit"] = self._action(file_menu, "&Quit", self.close, "Ctrl+Q")
        view_menu = bar.addMenu("&View")
        for spec in PANELS:
            self.actions[f"panel_{spec.name}"] = self._action(
                view_menu, spec.title, lambda _=False, n=spec.name: self.show_panel(n), spec.shortcut)
        view_menu.addSeparator()
        self.precision_actions = add_precision_menu(self, view_menu)  # fp32 | bf16 generation (issue 28)
        help_menu = bar.addMenu("&Help")
        self.actions["about"] = self._action(help_menu, "&About GPT Explorer", self.show_about,
                                             "F1", "about")

    # -- panels --------------------------------------------------------------------------------
    def panel(self, name: str, create: bool = True) -> "PanelPage | None":
        """The panel widget for `name` (built now if `create` and its needs are met)."""
        slot = self._slots[name]
        ready = self.session is not None and (self.session.has_model or not slot.spec.needs_model)
        if slot.panel is None and create and ready:
            slot.build(self.ctx, shown=name == self.current_panel_name())
        return slot.panel

    def show_panel(self, name: str) -> "PanelPage | None":
        self.tabs.setCurrentWidget(self._slots[name])
        return self.panel(name)

    def current_panel_name(self) -> str:
        return self.tabs.currentWidget().spec.name

    def _ensure_current_built(self, *_):
        """The panel in front is built, told it is shown, and every other built panel that it is
        hidden (it computes nothing until shown again: controllers/base.py)."""
        current = self.current_panel_name()
        self.panel(current)
        for name, slot in self._slots.items():
            if slot.panel is not None:
                slot.panel.set_shown(name == current)

    def open_run(self, path: str | None = None, show: bool = True) -> None:
        """File → Open run… (a folder dialog) or --run DIR: the Train panel follows the run. `show`
        False (--run with another --panel): the panel in front stays; the Train panel is built behind
        it once there is a model, and follows the run from there."""
        build = self.show_panel if show else self.panel
        if path and self._slots["train"].panel is None:
            self.ctx.run = str(path)  # the Train panel opens it when it is built (now, or once the session exists)
            build("train")
            return
        page = build("train")
        if page is not None:
            page.open_run(path)

    def _fill_recent_runs(self) -> None:
        from explorer.session.training.runs import recent_runs

        self.recent_runs_menu.clear()
        for path in recent_runs(self.settings):
            self.recent_runs_menu.addAction(path, lambda p=path: self.open_run(p))
        if self.recent_runs_menu.isEmpty():
            self.recent_runs_menu.addAction("(no runs yet)").setEnabled(False)

    def open_train(self, model_config: dict) -> None:
        """The Config panel's "Train this config…": the Train panel with that model shape."""
        page = self.show_panel("train")
        if page is not None:
            page.use_config(model_config)

    def new_model_from_config(self) -> None:
        page = self.show_panel("config")
        if page is not None:
            page.focus_form()

    # -- services for panels ------------------------------------------------------------------------
    def show_message(self, text: str, timeout_ms: int = 0) -> None:
        self.statusBar().showMessage(text, timeout_ms)

    def set_activity(self, text: str) -> None:
        self.status_bar.set_activity(text)

    def show_error_dialog(self, heading: str, message: str) -> None:
        """Non-blocking; several errors in a row reuse one dialog showing the latest."""
        self.errors_shown.append((heading, message))
        self.show_message(f"{heading}: {message.splitlines()[0]}", 10000)
        box = self._error_box
        if box is None or not box.isVisible():
            box = QMessageBox(QMessageBox.Icon.Warning, heading, message, QMessageBox.StandardButton.Ok, self)
            box.setWindowModality(Qt.WindowModality.NonModal)
            self._error_box = box
        else:  # several errors in a row: one dialog showing the latest, not a pile of them
            box.setWindowTitle(heading)
            box.setText(message)
        box.show()

    @property
    def error_dialog(self) -> QMessageBox | None:
        return self._error_box if self._error_box is not None and self._error_box.isVisible() else None

    # -- following the session ------------------------------------------------------------------
    def _on_session_event(self, event) -> None:
        """The window's own part of a change; every panel follows the same event by itself."""
        if isinstance(event, ModelSwapped):
            self._show_session()
        elif isinstance(event, AblationChanged):
            self.status_bar.show_ablation(event.after.text())
            sync_precision(self)  # bf16 generation runs fp32 while ablated
        elif isinstance(event, SettingsChanged) and event.what == "precision":
            sync_precision(self)
        elif isinstance(event, TrainingStepShown):  # the Train panel renamed the model to the step shown
            self._update_status()

    def reset_ablation(self) -> None:
        """The status bar's Reset: the model without ablation, for every panel."""
        if self.session is not None and self.session.interp.ablation.active:
            self.ctx.change_ablation(lambda session: session.interp.clear_ablation(), on_error=lambda exc: self.ctx.report_error(
                exc, "Reset ablation failed", inline=False))

    def _show_session(self) -> None:
        """Status bar, banner and title for the session's model; the panel in view built."""
        self._update_status()
        self._ensure_current_built()
        if self.ctx.run and self.session is not None and self.session.has_model:
            self.panel("train")  # --run behind another panel: the Train panel follows the run from the start
        if self.session is not None and self.session.has_model:
            if not self._memory_timer.isActive() and self.isVisible():
                self._memory_timer.start()
        self.modelChanged.emit()

    def _update_status(self) -> None:
        if self.session is None:  # starting: importing the session means importing torch, so not here
            self.status_bar.show_starting()
            return
        info, has_model = self.session.info, self.session.has_model
        self.status_bar.show_model(info, has_model)
        sync_precision(self)
        self.status_bar.show_ablation(self.session.interp.ablation.text())  # a swap clears it
        self._update_memory()
        self.banner.show_for(info, has_model)
        self.setWindowTitle(f"GPT Explorer — {info.name}" if has_model else "GPT Explorer")

    def _update_memory(self) -> None:
        if self.session is not None:
            self.status_bar.show_memory(self.session.info)

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
        if not self._placed:
            self._placed = True
            self.keep_on_screen()
        if self.session is not None and self.session.has_model:
            self._memory_timer.start()

    def keep_on_screen(self, available: QRect | None = None) -> None:
        """The whole window on the screen's free area, status bar included: a default size taller than
        the screen (1280×820 on 1280×800) or a saved place that hangs below its bottom edge moves up,
        and shrinks only when it is taller than the screen. Not on the offscreen platform (screenshots):
        its stand-in screen says nothing about the size asked for."""
        if available is None:
            screen = self.screen()
            if screen is None or QGuiApplication.platformName() == "offscreen":
                return
            available = screen.availableGeometry()
        frame, inner = self.frameGeometry(), self.geometry()
        fitted = fit_within(frame, available)
        if fitted != frame:
            self.resize(inner.width() - (frame.width() - fitted.width()),
                        inner.height() - (frame.height() - fitted.height()))
            self.move(fitted.topLeft())

    def closeEvent(self, event) -> None:
        """Save settings, stop timers, cancel background work (app.main waits for it)."""
        self.save_settings()
        self._memory_timer.stop()
        self._close_progress()
        if self._error_box is not None:
            self._error_box.close()
        for slot in self._slots.values():
            if slot.panel is not None:
                slot.panel.shutdown()
        self.runner.cancel_all()
        super().closeEvent(event)


def fit_within(frame: QRect, available: QRect) -> QRect:
    """`frame` moved (and, only where it is larger, shrunk) to lie inside `available`."""
    width, height = min(frame.width(), available.width()), min(frame.height(), available.height())
    x = min(max(frame.x(), available.x()), available.x() + available.width() - width)
    y = min(max(frame.y(), available.y()), available.y() + available.height() - height)
    return QRect(x, y, width, height)
