"""The panels of the main window, one `PanelSpec` per tab, in tab order.

How to add a panel (say "foo"), the files it touches:
1. `explorer/views/foo/panel.py` — the view, `FooPanel(QWidget)`: `set_*` methods taking plain values and
   numpy arrays, intent signals out; no torch, no gptcore, no session (tests/test_layers.py).
   Beside it, `explorer/views/foo/protocol.py` — `FooView(Protocol)`: every signal and method the
   controller may use (tests/explorer/test_view_protocols.py holds both sides to it).
2. `explorer/controllers/foo.py` — `FooController(PanelController[FooView])` with `view_class = FooPanel`
   (and `view_args` if it takes plain construction values): `invalidate(event)` clears or marks what is
   drawn, `refresh()` recomputes (a live panel: `self.live.now()` through a `LiveRequest`), every task
   goes through `self.submit(key, work, …)` (the one stale rule; a hidden panel starts nothing, except
   the keys in `background_keys`), every error through `self.report_error(exc, title)`. A task's
   `work` takes the session and plain values, never the controller or a widget (runtime/task_check.py).
3. One line below: `PanelSpec("foo", "Foo", "Ctrl+9", "foo:FooController")`.
4. If it computes something new: `explorer/session/foo/` — `domain.py` with `FooDomain(core)` returning frozen
   dataclasses (its own `results.py`, numpy only), `forget()` for what it keeps per state, and
   one line in `DOMAINS` in explorer/session/core.py.
Plus its tests, and its scenario in tests/explorer/test_stale_state.py (that test fails for a panel
without one). The window, the View menu, `--panel foo` and screenshot mode follow from the line in 3.

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

    def build(self, ctx: "PanelContext", shown: bool = True) -> "PanelPage":
        from explorer.controllers.base import PanelPage

        return PanelPage(ctx, self.controller_class(), shown=shown)


PANELS: list[PanelSpec] = [
    PanelSpec("config", "Config", "Ctrl+1", "config:ConfigController", needs_model=False),
    PanelSpec("attention", "Attention", "Ctrl+2", "attention:AttentionController"),
    PanelSpec("residual", "Residual", "Ctrl+3", "residual:ResidualController"),
    PanelSpec("generation", "Generation", "Ctrl+4", "generation:GenerationController"),
    PanelSpec("attribution", "Attribution", "Ctrl+5", "attribution:AttributionController"),
    PanelSpec("train", "Train", "Ctrl+6", "train:TrainController", needs_model=False),
    PanelSpec("routes", "Routes", "Ctrl+7", "routes:RoutesController"),
    PanelSpec("features", "Features", "Ctrl+8", "features:FeaturesController"),
    PanelSpec("circuits", "Circuits", "Ctrl+9", "circuits:CircuitsController"),
]


def panel_names() -> list[str]:
    return [spec.name for spec in PANELS]


def find_panel(name: str) -> PanelSpec:
    for spec in PANELS:
        if spec.name == name:
            return spec
    raise KeyError(f"no panel named {name!r}; choose one of {', '.join(panel_names())}")
