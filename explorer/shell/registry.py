"""The panels of the main window, one `PanelSpec` per tab, in tab order.

How to add a panel (say "foo"):
1. `explorer/views/foo/panel.py` — the view: a QWidget with `set_*` methods taking plain values
   and numpy arrays, emitting intent signals; no torch, no gptcore, no session.
2. `explorer/controllers/foo.py` — `FooController(PanelController)` with `view_class = FooPanel`:
   wires the view's signals to the session through `ctx.runner`, overrides the contract members it
   needs (`invalidate`, `refresh`, `set_prompt`…; see controllers/base.py) and reports every error
   through `self.report_error(exc, title)`.
3. One line below: `PanelSpec("foo", "Foo", "Ctrl+7", "foo:FooController")`.
(4. A `Session` method returning a frozen dataclass from explorer/session/results.py, if it computes something new.)
The window, the View menu, `--panel foo` and screenshot mode pick it up from here.

Controllers are imported when their tab is first shown, so starting the app loads no panel code.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from explorer.controllers.context import PanelContext
    from explorer.controllers.base import PanelPage


@dataclass(frozen=True)
class PanelSpec:
    name: str  # used by --panel and QSettings
    title: str  # tab text
    shortcut: str  # View menu shortcut
    controller: str  # "module:Class" inside explorer.controllers
    needs_model: bool = True  # False: can be shown before the first model is ready

    def controller_class(self):
        module, _, cls = self.controller.partition(":")
        return getattr(importlib.import_module(f"explorer.controllers.{module}"), cls)

    def build(self, ctx: "PanelContext") -> "PanelPage":
        from explorer.controllers.base import PanelPage

        return PanelPage(ctx, self.controller_class())


PANELS: list[PanelSpec] = [
    PanelSpec("config", "Config", "Ctrl+1", "config:ConfigController", needs_model=False),
    PanelSpec("attention", "Attention", "Ctrl+2", "attention:AttentionController"),
    PanelSpec("residual", "Residual", "Ctrl+3", "residual:ResidualController"),
    PanelSpec("generation", "Generation", "Ctrl+4", "generation:GenerationController"),
    PanelSpec("attribution", "Attribution", "Ctrl+5", "attribution:AttributionController"),
    PanelSpec("train", "Train", "Ctrl+6", "train:TrainController", needs_model=False),
    PanelSpec("routes", "Routes", "Ctrl+7", "routes:RoutesController"),
]


def panel_names() -> list[str]:
    return [spec.name for spec in PANELS]


def find_panel(name: str) -> PanelSpec:
    for spec in PANELS:
        if spec.name == name:
            return spec
    raise KeyError(f"no panel named {name!r}; choose one of {', '.join(panel_names())}")
