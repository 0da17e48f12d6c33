"""How panels plug into the main window: one `PanelSpec` per tab, in tab order.

A factory gets a `PanelContext` and returns a QWidget (the panel view composed with its
controller). The widget MAY provide:
- `dataReady` (a Signal) emitted once its first real data is drawn (screenshot mode waits for it);
- `set_prompt(text)` (for `--prompt`);
- `on_model_changed()` (called by the main window after every model swap; `session.version`
  is already bumped).
Factories import their modules lazily so that starting the app only loads the panel on show.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

if TYPE_CHECKING:
    from PySide6.QtWidgets import QMainWindow, QWidget

    from .session import Session
    from .workers import TaskRunner


@dataclass
class PanelContext:
    session: "Session"
    runner: "TaskRunner"
    window: "QMainWindow | None" = None  # None in panel unit tests: guard calls
    prompt: str | None = None  # initial prompt from --prompt, if any


@dataclass(frozen=True)
class PanelSpec:
    name: str  # used by --panel and QSettings
    title: str  # tab text
    shortcut: str  # View menu shortcut
    factory: Callable[[PanelContext], "QWidget"]
    needs_model: bool = True  # False: can be shown before the first model is ready


# --- config ---
def _config_factory(ctx: PanelContext):
    from .controllers.config import ConfigPage

    return ConfigPage(ctx)


# --- attention ---
def _attention_factory(ctx: PanelContext):
    from .controllers.attention import AttentionView

    return AttentionView(ctx)

# --- residual ---
def _residual_factory(ctx: PanelContext):
    from .controllers.residual import ResidualView

    return ResidualView(ctx)

# --- generation ---
def _generation_factory(ctx: PanelContext):
    from .controllers.generation import GenerationPane

    return GenerationPane(ctx)


PANELS: list[PanelSpec] = [
    PanelSpec("config", "Config", "Ctrl+1", _config_factory, needs_model=False),
    PanelSpec("attention", "Attention", "Ctrl+2", _attention_factory),
    PanelSpec("residual", "Residual", "Ctrl+3", _residual_factory),
    PanelSpec("generation", "Generation", "Ctrl+4", _generation_factory),
]


def panel_names() -> list[str]:
    return [spec.name for spec in PANELS]


def find_panel(name: str) -> PanelSpec:
    for spec in PANELS:
        if spec.name == name:
            return spec
    raise KeyError(f"no panel named {name!r}; choose one of {', '.join(panel_names())}")
