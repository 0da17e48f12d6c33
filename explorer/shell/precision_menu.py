"""View ▸ Generation precision: fp32 (default) or bf16, and the status bar's dtype field saying
which is in use (issue 28). The choice lives in the session (explorer/session/precision.py):
bf16 runs generation from a bf16 copy of the weights wherever streamed tokens were measured faster
in bf16 than in fp32 (issues 34 and 39: a short stream through generation's loop, timed on the compute
thread at the first choice for a model shape, then cached); the bf16 entry shows both streaming speeds
and the memory the bf16 copy holds once known (its tooltip says what was streamed), and where bf16 is
measured slower the session refuses and the error dialog says so with the figures, once.
"""
from __future__ import annotations

from PySide6.QtGui import QAction, QActionGroup

from explorer.controllers.context import any_state

PRECISION_TASK = "precision"
MEASURE_TASK = "precision-measure"  # its own key: never supersedes a choice the user made
LABELS = {"fp32": "fp32 (every computation)", "bf16": "bf16 generation"}
STAYS = "Generation stays fp32."


def add_precision_menu(window, view_menu) -> dict[str, QAction]:
    """The submenu's two exclusive choices, named by precision ('fp32', 'bf16')."""
    menu = view_menu.addMenu("Generation &precision")
    menu.setToolTipsVisible(True)  # the bf16 entry's tooltip carries the measured speeds
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


def choose_precision(window, name: str, after: str = STAYS) -> None:
    """Ask the session for `name` on the compute thread (setting it waits for the session's lock,
    and bf16 may first be measured there); the session announces it (SettingsChanged 'precision')
    and every panel recomputes. A refusal opens the error dialog; `after` says what runs instead."""
    session = window.session
    if session is None:
        window.show_message("Still starting; try again in a moment.", 3000)
        sync_precision(window)
        return

    def failed(exc: BaseException) -> None:
        sync_precision(window)
        window.ctx.report_error(exc, f"{name} not used", after=after, inline=False)

    if name == "bf16" and session.has_model and session.generation.precision.known_speed() is None:
        window.show_message("Timing a short stream of tokens in bf16 and in fp32 for this model (a few seconds)…",
                            8000)
    window.ctx.submit(PRECISION_TASK, lambda token, progress: session.generation.precision.set(name),
                      still_current=any_state, on_result=lambda _name: sync_precision(window), on_error=failed)


def sync_precision(window) -> None:
    """The menu's check and the status bar's dtype field, from the session."""
    session = window.session
    if session is None:
        return
    precision = session.generation.precision
    actions = getattr(window, "precision_actions", {})
    for name, action in actions.items():
        action.setChecked(name == precision.name)
    speed = precision.known_speed() if session.has_model else None  # the cache only: never measures here
    if "bf16" in actions:
        actions["bf16"].setText(bf16_label(speed))
        actions["bf16"].setToolTip(bf16_tip(speed))
    if session.has_model:
        window.status_bar.show_precision(*precision.describe(session.info.dtype))
    if session.has_model and precision.name == "bf16" and speed is None:
        # bf16 chosen and a model of a shape not measured yet (a swap): measure it on the compute
        # thread, then show its figures (or that generation falls back to fp32 for it)
        window.ctx.submit(MEASURE_TASK, lambda token, progress: session.generation.precision.measure_loaded(),
                          still_current=any_state, on_result=lambda _speed: sync_precision(window))


def bf16_label(speed) -> str:
    """The bf16 entry: its streaming speed against fp32's, and the copy's memory, once known for the
    model's shape: 'bf16 generation (streams 24 tok/s; fp32 21 tok/s; +475 MiB)'."""
    if speed is None:
        return f"{LABELS['bf16']} (speed measured when chosen)"
    verdict = "" if speed.bf16_faster else " — slower here"
    memory = f"; +{speed.copy_bytes / (1 << 20):,.0f} MiB" if speed.copy_bytes else ""
    return (f"{LABELS['bf16']}{verdict} (streams {speed.tok_s(speed.bf16_ms):.0f} tok/s; "
            f"fp32 {speed.tok_s(speed.fp32_ms):.0f} tok/s{memory})")


def bf16_tip(speed) -> str:
    if speed is None:
        return ("Choosing it streams a few tokens of this model in bf16 and in fp32 (a few seconds) and uses bf16 "
                "only if it streams faster. The bf16 copy of the weights takes memory beside the fp32 ones: half "
                "their size, and as much again where oneDNN packs it for this CPU.")
    memory = f" In bf16, {speed.memory()}." if speed.memory() else ""
    return f"{speed.what()}: {speed.figures()}; {speed.where()}.{memory}"
