"""View ▸ Generation precision: fp32 (default) or bf16, and the status bar's dtype field saying
which is in use (issue 28). The choice lives in the session (explorer/session/precision.py):
bf16 runs generation from a bf16 copy of the weights where the CPU computes bf16 natively; where
it would be emulated the session refuses and the error dialog says why.
"""
from __future__ import annotations

from PySide6.QtGui import QAction, QActionGroup

from explorer.controllers.context import any_state

PRECISION_TASK = "precision"
LABELS = {"fp32": "fp32 (every computation)", "bf16": "bf16 generation (CPUs with native bf16)"}


def add_precision_menu(window, view_menu) -> dict[str, QAction]:
    """The submenu's two exclusive choices, named by precision ('fp32', 'bf16')."""
    menu = view_menu.addMenu("Generation &precision")
    group = QActionGroup(menu)
    group.setExclusive(True)
    actions = {}
    for name, label in LABELS.items():
        action = QAction(label, menu)
        action.setCheckable(True)
        action.setChecked(name == "fp32")
        action.setObjectName(f"precision_{name}")
        action.triggered.connect(lambda _checked=False, n=name: choose_precision(window, n))
        group.addAction(action)
        menu.addAction(action)
        actions[name] = action
    return actions


def choose_precision(window, name: str) -> None:
    """Ask the session for `name` on the compute thread (setting it waits for the session's lock);
    the session announces it (SettingsChanged 'precision') and every panel recomputes."""
    session = window.session
    if session is None:
        window.show_message("Still starting; try again in a moment.", 3000)
        sync_precision(window)
        return

    def failed(exc: BaseException) -> None:
        sync_precision(window)
        window.ctx.report_error(exc, "bf16 not used", after="Generation stays fp32.", inline=False)

    window.ctx.submit(PRECISION_TASK, lambda token, progress: session.generation.precision.set(name),
                      still_current=any_state, on_result=lambda _name: sync_precision(window), on_error=failed)


def sync_precision(window) -> None:
    """The menu's check and the status bar's dtype field, from the session."""
    session = window.session
    if session is None:
        return
    precision = session.generation.precision
    for name, action in getattr(window, "precision_actions", {}).items():
        action.setChecked(name == precision.name)
    if session.has_model:
        window.status_bar.show_precision(*precision.describe(session.info.dtype))
