"""What a panel's controller gets from the app: the session, the task runner, and the
window's services behind one error path.

Why one object: controllers used to reach for `ctx.window` themselves, each with its own
guard (`hasattr`, `is not None`) and its own idea of which errors deserve a dialog. Here
every error goes through `report_error`, which logs it, applies the one rule (an input
problem we diagnosed is shown where it happened; anything else is a bug and also opens the
error dialog) and hands back the words to show. Panel unit tests pass `window=None`; the
services then log instead of drawing.
"""
from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from .errors import Explanation, explain, log_exception

if TYPE_CHECKING:
    from .session import Session
    from .workers import TaskRunner

log = logging.getLogger("explorer")


class WindowServices(Protocol):
    """What the main window offers panels (MainWindow implements it)."""

    settings: Any  # QSettings

    def show_message(self, text: str, timeout_ms: int = 0) -> None: ...
    def set_activity(self, text: str) -> None: ...
    def show_error_dialog(self, heading: str, message: str) -> None: ...
    def notify_model_changed(self) -> None: ...
    def notify_ablation_changed(self) -> None: ...


@dataclass
class PanelContext:
    session: "Session"
    runner: "TaskRunner"
    window: WindowServices | None = None  # None in panel unit tests
    prompt: str | None = None  # initial prompt from --prompt, if any

    def report_error(self, exc: BaseException | str, title: str) -> Explanation:
        """Log `exc`; open the error dialog unless it is an input problem we diagnosed
        ("Input not usable", invalid config, unloadable file…); return what to show inline."""
        log_exception(title, exc)
        expl = explain(exc, getattr(self.window, "log_path", None))
        if not expl.input_problem and self.window is not None:
            self.window.show_error_dialog(expl.title if isinstance(exc, BaseException) else title, expl.message)
        return expl

    def show_message(self, text: str, timeout_ms: int = 5000) -> None:
        """A transient line in the status bar (the log when there is no window)."""
        if self.window is not None:
            self.window.show_message(text, timeout_ms)
        else:
            log.info("%s", text)

    def set_activity(self, text: str) -> None:
        if self.window is not None:
            self.window.set_activity(text)

    def notify_model_changed(self) -> bool:
        """A panel swapped the session's model (Build): the window tells every panel. False when
        there is no window to tell (the caller then updates itself)."""
        if self.window is None:
            return False
        self.window.notify_model_changed()
        return True

    def notify_ablation_changed(self) -> bool:
        """A panel changed the session's ablation (it bumped `session.version`): the window
        updates its status bar and tells every panel its results are out of date. False when
        there is no window (the caller then updates itself)."""
        if self.window is None:
            return False
        self.window.notify_ablation_changed()
        return True

    def file_path(self, name: str) -> str:
        """`name` in the folder the user last opened or saved in (home the first time), for a file dialog."""
        folder = self.settings.value("last_dir", "") if self.settings is not None else ""
        return os.path.join(str(folder) if folder and os.path.isdir(str(folder)) else os.path.expanduser("~"), name)

    def remember_folder_of(self, path: str) -> None:
        if self.settings is not None and path:
            self.settings.setValue("last_dir", os.path.dirname(os.path.abspath(path)))

    @property
    def settings(self):
        """The app's QSettings, or None (unit tests, screenshot mode keeps its own)."""
        return getattr(self.window, "settings", None)
