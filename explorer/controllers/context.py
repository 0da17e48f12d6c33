"""What a panel's controller gets from the app: the session, its events on the GUI thread,
the task runner, and the window's services behind one error path.

Why one object: controllers used to reach for `ctx.window` themselves, each with its own
guard (`hasattr`, `is not None`) and its own idea of which errors deserve a dialog. Here
every error goes through `report_error`, which logs it, applies the one rule (an input
problem we diagnosed is shown where it happened; anything else is a bug and also opens the
error dialog) and hands back the words to show. Panel unit tests pass `window=None`; the
services then log instead of drawing.

`signals.event` carries the session's typed events (explorer/session/events.py) to the GUI
thread: the session sends them on whichever thread changed it into a plain inbox
(runtime/gui_inbox.py), which hands them to Qt on the GUI thread only. Every controller and
the window listen to it; nobody else tells views that something changed.
"""
from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Protocol

import shiboken6
from PySide6.QtCore import QObject, Signal

from explorer.controllers.errors import Explanation, explain, log_exception
from explorer.runtime.gui_inbox import GuiInbox

if TYPE_CHECKING:
    from explorer.session.core import Session
    from explorer.runtime.workers import TaskRunner

log = logging.getLogger("explorer")

ABLATION_TASK = "ablation"  # the runner key of every ablation change


def any_state() -> bool:
    """`still_current` for work whose result does not depend on the session's state: a
    random-init sweep (its own throw-away models), a model build (it changes the state
    itself). Saying so is explicit; leaving `still_current` out means "this state"."""
    return True


class WindowServices(Protocol):
    """What the main window offers panels (MainWindow implements it)."""

    settings: Any  # QSettings

    def show_message(self, text: str, timeout_ms: int = 0) -> None: ...
    def set_activity(self, text: str) -> None: ...
    def show_error_dialog(self, heading: str, message: str) -> None: ...
    def open_train(self, model_config: dict) -> None: ...  # the Train panel, with this model shape


class SessionSignals(QObject):
    """The session's events as a Qt signal on the GUI thread (see the module docstring): the
    session's hub holds only a plain inbox (runtime/gui_inbox.py), never this object, and the
    inbox calls `_deliver` on the GUI thread only."""

    event = Signal(object)  # a ModelSwapped, AblationChanged, SettingsChanged or TrainingStepShown

    def __init__(self, parent: QObject | None = None):
        super().__init__(parent)
        self._unsubscribe: Callable[[], None] | None = None
        self._inbox = GuiInbox(self._deliver)

    def follow(self, session: "Session | None") -> None:
        """Listen to `session` (and stop listening to the previous one)."""
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None
        if session is not None:
            self._unsubscribe = session.events.subscribe(self._inbox.put)

    def _deliver(self, event) -> None:
        # GUI thread only. After the app closed the window (its views gone), there is no one to tell.
        if shiboken6.isValid(self):
            self.event.emit(event)


@dataclass
class PanelContext:
    session: "Session"
    runner: "TaskRunner"
    window: WindowServices | None = None  # None in panel unit tests
    prompt: str | None = None  # initial prompt from --prompt, if any
    run: str | None = None  # a training run folder to follow (--run, File → Open run…), for the Train panel
    signals: SessionSignals = field(default_factory=SessionSignals, repr=False)

    def __post_init__(self) -> None:
        self.signals.follow(self.session)

    def attach(self, session: "Session") -> None:
        """The session exists now (the app creates it in a worker): follow its events."""
        self.session = session
        self.signals.follow(session)

    def report_error(self, exc: BaseException | str, title: str, *, after: str = "",
                     inline: bool = True) -> Explanation:
        """THE error path of the app. Log `exc`; open the error dialog unless it is an input
        problem we diagnosed (a UserError, or a ValueError of ours) and the caller shows
        `.inline` where it happened; return the explanation. `after` says what the app did
        about it (e.g. which model is loaded now); `inline=False`: the caller has no place of
        its own (loading a model), so the dialog opens for every error."""
        expl = explain(exc, getattr(self.window, "log_path", None))
        log_exception(title, exc, traceback=not expl.input_problem)  # a diagnosed input: no traceback
        if (not expl.input_problem or not inline) and self.window is not None:
            heading = expl.title if isinstance(exc, BaseException) else title
            self.window.show_error_dialog(heading, f"{expl.message}\n\n{after}" if after else expl.message)
        return expl

    # -- the one stale rule: every background task of every panel starts here ---------------------
    def state_now(self) -> Callable[[], bool]:
        """A predicate that stays True while the session is in the state it is in now (same
        model, same ablation, same settings, same training step shown)."""
        session = self.session
        version = session.version

        def current() -> bool:
            return session.version == version

        return current

    def model_now(self) -> Callable[[], bool]:
        """A predicate that stays True while the same model is loaded (whatever else changes)."""
        session = self.session
        model = session.model

        def current() -> bool:
            return session.model is model

        return current

    def submit(self, key: str, work, *, still_current: Callable[[], bool] | None = None, **callbacks) -> int:
        """THE way a panel's background work starts (PanelController.submit, change_ablation):
        `runner.submit` with the state the result is for. It is dropped by the runner if the
        session moved on before it arrived (the event that moved it asks for a new one), so no
        controller compares versions by hand. By default the result is for the state now
        (`state_now()`); work that depends on less says so with `still_current`: `model_now()`
        (the same model), `any_state` (nothing), or its own predicate (the same run followed)."""
        return self.runner.submit(key, work, current=still_current or self.state_now(), **callbacks)

    def change_ablation(self, change, on_error) -> None:
        """THE way to change the session's ablation (a Shift+click in Attention, a click in
        Attribution, the status bar's Reset): `change(session)` runs on the compute thread
        (mean ablation runs the sample prompts) under one key, so a newer change supersedes an
        older one; the session announces the outcome (AblationChanged) to every view."""
        session = self.session
        if session is None or not session.has_model:
            return
        # Kept while the same model is loaded: the change itself moves the version on, and a
        # refusal (the heads it names) means something only for the model it was asked of.
        self.submit(ABLATION_TASK, lambda token, progress: change(session), still_current=self.model_now(),
                    on_error=on_error)

    def show_message(self, text: str, timeout_ms: int = 5000) -> None:
        """A transient line in the status bar (the log when there is no window)."""
        if self.window is not None:
            self.window.show_message(text, timeout_ms)
        else:
            log.info("%s", text)

    def set_activity(self, text: str) -> None:
        if self.window is not None:
            self.window.set_activity(text)

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
