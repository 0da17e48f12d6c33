"""The panel contract, in code: what the main window may call on a panel, with defaults.

A panel is a passive *view* (explorer/views/, Qt widgets only: numpy in, intent signals
out) driven by a *controller* (here: talks to the session through the task runner). The
window never sees either directly: it holds a `PanelPage`, which lays the view out and
forwards the contract to the controller. So a new panel is a view, a controller subclassing
`PanelController`, and one line in explorer/shell/registry.py.

The truthful-views rule lives here too: every controller follows the session's events
(`ctx.signals.event`, subscribed here for every panel; the window tells no one). After each,
a panel shows either results computed for the current model and settings, or says plainly
that what is on screen is out of date. The base implementation does both steps in order —
`invalidate(event)` (clear or mark what is drawn; `event.reason` says why in words, its type
says whether shapes may have changed) then `refresh()` (recompute if the panel recomputes
by itself) — so a controller only says *how* to clear and *how* to recompute, and cannot
forget either.

A panel computes only while it is shown. The window tells each built panel whether it is in
front (`set_shown`); a hidden panel only keeps the events it missed (the last model swap and the
last change after it: nothing else is needed to clear or mark) and is stale; when it is shown
again it replays them through `invalidate` and catches up with one `refresh()`, its last result
on screen under the out-of-date mark until the new one lands. A panel whose invalidate must act
at once (it stops a generation running behind another tab, it stops following a run) says so
with `invalidate_when_hidden = True`. `submit` enforces it: a hidden panel's work is not started (the panel is
marked stale instead), except under the keys it names in `background_keys` — work the user
started that goes on behind another tab (a generation, a patching run, following a training).
So the cost of a change does not grow with the number of panels ever opened.
"""
from __future__ import annotations

import logging
from typing import Generic, TypeVar

from PySide6.QtCore import QObject, Signal
from PySide6.QtWidgets import QFileDialog, QVBoxLayout, QWidget

from explorer.controllers.context import PanelContext
from explorer.controllers.errors import Explanation
from explorer.session.events import MODEL_CHANGED, ModelSwapped  # noqa: F401 - MODEL_CHANGED: the cleared text

log = logging.getLogger("explorer")

ViewT = TypeVar("ViewT")  # the view's protocol (explorer/views/<panel>/protocol.py)

_shown_at_build = [True]  # PanelPage says whether the panel it builds starts in front (GUI thread only)


class PanelController(QObject, Generic[ViewT]):
    """Base of every panel controller. A subclass names its view's protocol as its type,
    `class AttentionController(PanelController[AttentionView])`, and asks of `self.view` only
    what that protocol declares (tests/explorer/test_view_protocols.py holds it to that);
    `view_class` is the concrete Qt panel `make_view` builds, nothing more. It overrides what
    its panel needs; every default is safe."""

    dataReady = Signal()  # once, after the first real data (or the reason there is none) is drawn
    view_class: type[QWidget] | None = None
    view_args: tuple = ()  # what `view_class` is constructed with (plain values: no session, no ctx)
    task_keys: tuple[str, ...] = ()  # runner keys this panel submits under (cancelled on shutdown)
    background_keys: tuple[str, ...] = ()  # of those, the ones that may run while the panel is hidden
    invalidate_when_hidden = False  # True: invalidate(event) runs at once even behind another tab
    view: ViewT

    def __init__(self, ctx: PanelContext, view: ViewT, parent: QObject | None = None):
        super().__init__(parent)
        self.ctx, self.view = ctx, view
        self._ready_sent = False
        self._shown = _shown_at_build[-1]  # a panel outside a window (unit tests) is in front
        self._stale = False  # a change arrived while hidden: refresh when shown
        self._missed: list = []  # the events a hidden panel has still to invalidate with (see set_shown)
        self._replaying = False
        self._own_states: dict[str, int] = {}  # see while_unchanged()
        self._alive = [True]  # False once this controller's Qt side is gone: its tasks' callbacks are dropped
        alive = self._alive
        self.destroyed.connect(lambda *_: alive.__setitem__(0, False))
        ctx.signals.event.connect(self.on_session_event)

    @classmethod
    def make_view(cls, ctx: PanelContext) -> QWidget:
        if cls.view_class is None:
            raise TypeError(f"{cls.__name__} must set view_class")
        return cls.view_class(*cls.view_args)

    # -- the contract (the window calls these) ---------------------------------------------------
    @property
    def is_ready(self) -> bool:
        """True once dataReady was emitted (screenshot mode may connect after it fired)."""
        return self._ready_sent

    def set_prompt(self, text: str) -> None:
        """`--prompt`: panels without a prompt ignore it."""

    def on_session_event(self, event) -> None:
        """Every change the session announces reaches the panel here (GUI thread). Hidden: kept for
        when the panel is shown (no work now), unless `invalidate_when_hidden`."""
        if not self._shown and not self.invalidate_when_hidden:
            self._stale = True
            swap = isinstance(event, ModelSwapped)
            self._missed = [e for e in self._missed if isinstance(e, ModelSwapped) and not swap] + [event]
            return
        self._dispatch(event)

    def _dispatch(self, event) -> None:
        if isinstance(event, ModelSwapped):
            self.on_model_changed(event)
        else:
            self.on_settings_changed(event)

    def on_model_changed(self, event: ModelSwapped) -> None:
        """The session holds a new model: clear what belongs to the old one, recompute (when shown)."""
        self.invalidate(event)
        if self.ctx.session is not None and self.ctx.session.has_model:
            self.refresh_when_shown()

    def on_settings_changed(self, event) -> None:
        """Same model, other numbers (ablation, a session setting, a training step shown):
        mark what is drawn out of date, recompute (when shown)."""
        self.invalidate(event)
        self.refresh_when_shown()

    # -- shown or hidden (the window says) ---------------------------------------------------------
    @property
    def is_shown(self) -> bool:
        """The panel is in front (a hidden one marks itself stale instead of computing)."""
        return self._shown

    @property
    def stale(self) -> bool:
        """A change arrived while the panel was hidden; it recomputes when shown."""
        return self._stale

    def set_shown(self, shown: bool) -> None:
        """The window put this panel in front (True) or behind another tab (False)."""
        was, self._shown = self._shown, bool(shown)
        if self._shown and not was and self._stale:
            missed, self._missed = self._missed, []
            self._replaying = True  # invalidate for each missed event, then one refresh
            try:
                for event in missed:
                    self._dispatch(event)
            finally:
                self._replaying = False
            self._stale = False
            if self.ctx.session is not None and self.ctx.session.has_model:
                self.refresh()

    def refresh_when_shown(self) -> None:
        """`refresh()` now if the panel is in front, else once it is shown."""
        if self._shown and not self._replaying:
            self._stale = False
            self.refresh()
        elif not self._shown:
            self._stale = True

    def invalidate(self, event) -> None:
        """Clear what is drawn, or mark it out of date, saying `event.reason`. Must be overridden
        by every panel that draws model results (the base has nothing drawn to clear)."""

    def refresh(self) -> None:
        """Recompute for the current model and settings (panels that need a Run press leave
        their out-of-date mark instead)."""

    def shutdown(self) -> None:
        """The window is closing: stop this panel's background work."""
        for key in self.task_keys:
            self.ctx.runner.cancel(key)

    def focus_form(self) -> None:
        """Put the keyboard focus where a user starts (File → New model focuses the config form)."""
        self.view.setFocus()

    def open_run(self, path: str | None = None) -> None:
        """File → Open run…, Recent runs, --run: a panel that follows training runs opens the run
        folder `path` (None: it asks for one). Others ignore it."""

    def use_config(self, config: dict) -> None:
        """The Config panel's "Train this config…": a panel that trains takes this model config."""

    # -- services for subclasses ------------------------------------------------------------------
    def mark_ready(self) -> None:
        if not self._ready_sent:
            self._ready_sent = True
            self.dataReady.emit()

    def state_now(self):
        """The one stale rule's token for the state the session is in now (PanelContext.state_now)."""
        return self.ctx.state_now()

    def submit(self, key: str, work, *, still_current=None, **callbacks) -> int:
        """THE way a controller starts background work (the one stale rule, PanelContext.submit):
        its result (or error) is dropped if the session moved on before it arrived, so no
        controller compares versions by hand. Work that does not depend on the whole state, or
        changes it itself, says what it does depend on with `still_current`: `ctx.model_now()`,
        `any_state` (explorer/controllers/context.py), or `self.while_unchanged(name)` (a state
        of the panel's own: the run followed, the request made).

        A hidden panel starts nothing (see the module docstring): the call returns 0, no
        callback runs, and the panel recomputes when shown; keys in `background_keys` run."""
        if not self._shown and key not in self.background_keys:
            self._stale = True
            return 0
        alive = self._alive  # a result arriving after the panel closed (a test's, the app's quit) reaches no one
        callbacks = {name: _while_alive(alive, cb) for name, cb in callbacks.items() if cb is not None}
        return self.ctx.submit(key, work, still_current=still_current, **callbacks)

    def while_unchanged(self, name: str):
        """A `still_current` predicate for a state of the panel's own (not the session's): True
        until `move_on(name)` is called. The predicate holds a dict, not the controller."""
        states = self._own_states
        mark = states.setdefault(name, 0)
        return lambda: states.get(name) == mark

    def move_on(self, name: str) -> None:
        """The panel's own state `name` changed: work asked for the old one is dropped on arrival."""
        self._own_states[name] = self._own_states.get(name, 0) + 1

    # -- exports: the one entry point ---------------------------------------------------------------
    FILE_FILTERS = {"png": "PNG image (*.png)", "svg": "SVG image (*.svg)", "csv": "CSV (*.csv)",
                    "npz": "NumPy archive (*.npz)", "pt": "nanoGPT checkpoint (*.pt)",
                    "json": "JSON (*.json)"}

    def export_with_dialog(self, suggested_name: str, write, show_error) -> None:
        """Ask where (in the folder last used), then `export_to`. The filter follows the suggested
        name's extension."""
        ext = suggested_name.rsplit(".", 1)[-1]
        path, _ = QFileDialog.getSaveFileName(self.view, "Export", self.ctx.file_path(suggested_name),
                                              self.FILE_FILTERS.get(ext, "All files (*)"))
        if path:
            self.ctx.remember_folder_of(path)
            self.export_to(path, write, show_error)

    def export_to(self, path: str, write, show_error) -> bool:
        """THE way a panel writes a file: `write(path)` (returning False, or raising OSError or
        ValueError, when it could not), an error shown with `show_error(inline text)` through the
        one error path, "Exported PATH" in the status bar otherwise."""
        try:
            if write(path) is False:
                raise OSError(f"could not write {path}; pick a folder you can write to")
        except (OSError, ValueError) as exc:
            show_error(self.report_error(exc, "Export failed").inline)
            return False
        self.ctx.show_message(f"Exported {path}", 5000)
        return True

    def report_error(self, exc: BaseException | str, title: str, *, after: str = "") -> Explanation:
        """The one error path (see PanelContext.report_error); show the returned `.inline` where it happened."""
        return self.ctx.report_error(exc, title, after=after)


def _while_alive(alive: list, callback):
    def call(*args):
        if alive[0]:
            return callback(*args)
        return None

    return call


class PanelPage(QWidget):
    """One tab: the view laid out edge to edge, the contract forwarded to the controller."""

    dataReady = Signal()

    def __init__(self, ctx: PanelContext, controller_class: type[PanelController], parent: QWidget | None = None,
                 shown: bool = True, **controller_options):
        super().__init__(parent)
        self.view = controller_class.make_view(ctx)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.view)
        _shown_at_build.append(shown)  # a panel built behind another tab starts nothing until shown
        try:
            self.controller = controller_class(ctx, self.view, parent=self, **controller_options)
        finally:
            _shown_at_build.pop()
        self.controller.dataReady.connect(self.dataReady)
        if ctx.prompt is not None:  # --prompt: the one entry point for a prompt (controllers never read ctx.prompt)
            self.controller.set_prompt(ctx.prompt)

    @property
    def is_ready(self) -> bool:
        return self.controller.is_ready

    def set_prompt(self, text: str) -> None:
        self.controller.set_prompt(text)

    def shutdown(self) -> None:
        self.controller.shutdown()

    def set_shown(self, shown: bool) -> None:
        self.controller.set_shown(shown)

    def focus_form(self) -> None:
        self.controller.focus_form()

    def open_run(self, path: str | None = None) -> None:
        self.controller.open_run(path)

    def use_config(self, config: dict) -> None:
        self.controller.use_config(config)
