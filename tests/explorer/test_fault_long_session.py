"""Issue 9, item 17: a long session — 500 prompt edits and 20 generations — leaves no
threads, timers, widgets or results behind, and its memory growth is measured.

The edits go through the attention panel's prompt box (key clicks and backspaces), so
each one passes the controller's real debounce QTimer and a real worker; the
generations go through the generation pane's Generate button on the same runner and
session, interleaved with the typing as in a real session.

Why weak references next to RSS: RSS on a shared machine moves by megabytes for reasons
of its own (allocator arenas, torch's caches), so a bound on it is only a backstop that
catches a large leak. Each drawn AttentionResult and each generation run is a few hundred
kilobytes; if anything kept every one of them alive (a list of frames, a closure in a
signal connection, a queue nobody drains), the weak references say so exactly.
"""
from __future__ import annotations

import gc
import threading
import weakref

import torch
from PySide6.QtCore import QCoreApplication, QEvent, QThreadPool, QTimer, Qt
from PySide6.QtWidgets import QApplication

from explorer.controllers.attention import AttentionController
from explorer.controllers.base import PanelPage
from explorer.controllers.generation import GenerationController
from explorer.controllers.context import PanelContext

EDITS = 500
GENERATIONS = 20
NEW_TOKENS = 4
DEBOUNCE_MS = 5  # the controller's real single-shot timer, shortened so 500 edits fit in seconds
WAIT_MS = 20000
# ~100 tokens: thumbnails are pooled (bins of 2 tokens, 50 × 50) and the selected layer is kept at full
# resolution, so each drawn result is ~0.3 MB. Retaining one per edit would add ~150 MB;
# an idle session's RSS settles within a few MB once warmed up.
BASE_PROMPT = " ".join(f"token{i}" for i in range(40))
WORDS = ["alpha", "beta", "gamma", "delta", "epsilon"]
RSS_BOUND_MB = 60


def rss_bytes() -> int:
    with open("/proc/self/status", encoding="ascii") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


def edit_script(n: int) -> list[str]:
    """n keystrokes: type a word, then delete it again, cycling through WORDS."""
    keys: list[str] = []
    i = 0
    while len(keys) < n:
        word = " " + WORDS[i % len(WORDS)]
        keys.extend(word)
        keys.extend(["\b"] * len(word))
        i += 1
    return keys[:n]


def apply_keys(text: str, keys: list[str]) -> str:
    for key in keys:
        text = text[:-1] if key == "\b" else text + key
    return text


def test_fault_long_session_leaks_nothing(qtbot, panel_context, single_torch_thread):
    session, runner = panel_context.session, panel_context.runner
    ctx = PanelContext(session=session, runner=runner, window=None, prompt=BASE_PROMPT)
    attention = PanelPage(ctx, AttentionController, debounce_ms=DEBOUNCE_MS)
    qtbot.addWidget(attention)
    controller = attention.controller
    assert controller.timer.interval() == DEBOUNCE_MS
    generation = PanelPage(PanelContext(session=session, runner=runner, window=None, prompt=None), GenerationController)
    qtbot.addWidget(generation)
    generation.view.set_prompt_text("Once upon a time")
    generation.view.set_settings(max_new_tokens=NEW_TOKENS, temperature=0.0)
    prompt_box = attention.view.prompt
    prompt_box.moveCursor(prompt_box.textCursor().MoveOperation.End)

    drawn: list[weakref.ref] = []
    controller.drawn.connect(lambda result: drawn.append(weakref.ref(result)))
    runs: list[weakref.ref] = []
    finished_reasons: list[str] = []
    generation.controller.generationFinished.connect(finished_reasons.append)

    def idle() -> bool:
        return (not controller.timer.isActive() and not controller._in_flight
                and not generation.controller._debounce.isActive() and not runner.busy)

    def generate_once() -> None:
        with qtbot.waitSignal(generation.controller.generationFinished, timeout=WAIT_MS):
            generation.view.generate_button.click()
            runs.append(weakref.ref(generation.controller._run))
        qtbot.waitUntil(idle, timeout=WAIT_MS)

    def flush() -> None:
        QCoreApplication.sendPostedEvents(None, QEvent.Type.DeferredDelete)
        gc.collect()

    # Warm up (first capture, first generation: torch and Qt allocate their caches), then
    # take the baselines.
    qtbot.waitUntil(lambda: controller.result is not None and idle(), timeout=WAIT_MS)
    generate_once()
    flush()
    threads_before = threading.active_count()
    widgets_before = set(QApplication.topLevelWidgets())
    rss_before = rss_bytes()

    keys = edit_script(EDITS)
    per_generation = EDITS // GENERATIONS
    for i, key in enumerate(keys, start=1):
        if key == "\b":
            qtbot.keyClick(prompt_box, Qt.Key.Key_Backspace)
        else:
            qtbot.keyClicks(prompt_box, key)
        qtbot.waitUntil(idle, timeout=WAIT_MS)  # the debounce fired and its capture was drawn
        if i % per_generation == 0:
            generate_once()

    final_text = apply_keys(BASE_PROMPT, keys)
    qtbot.waitUntil(idle, timeout=WAIT_MS)
    flush()
    rss_after = rss_bytes()
    growth_mb = (rss_after - rss_before) / 2**20
    print(f"\nlong session: {EDITS} edits, {len(drawn)} frames drawn, {len(runs)} generations; "
          f"RSS {rss_before / 2**20:.1f} -> {rss_after / 2**20:.1f} MiB (growth {growth_mb:+.1f} MiB)")

    # It really ran: every edit reached the screen, every generation finished normally.
    assert attention.view.prompt_text() == final_text
    assert controller.result.text == final_text
    assert len(drawn) >= EDITS  # one frame per edit (each waited for its capture) + warm-up
    assert len(runs) == GENERATIONS + 1 and finished_reasons == ["done"] * (GENERATIONS + 1)
    assert generation.controller.last_run.produced == NEW_TOKENS and len(generation.controller.generated_ids) == NEW_TOKENS

    # Nothing retained: only the frame on screen survives, and only the last run.
    alive = [ref() for ref in drawn if ref() is not None]
    assert alive == [controller.result], f"{len(alive)} drawn results are still alive"
    alive_runs = [ref() for ref in runs if ref() is not None]
    assert alive_runs == [generation.controller.last_run], f"{len(alive_runs)} generation runs are still alive"

    # No threads, timers or windows left behind.
    assert runner.active_count() == 0 and not runner.busy and not runner._tasks
    assert QThreadPool.globalInstance().activeThreadCount() == 0
    assert threading.active_count() <= threads_before, [t.name for t in threading.enumerate()]
    for owner in (attention, generation):
        active = [t for t in owner.findChildren(QTimer) if t.isActive()]
        assert not active, f"{type(owner).__name__} left {len(active)} timer(s) running"
    assert set(QApplication.topLevelWidgets()) <= widgets_before

    assert growth_mb < RSS_BOUND_MB, f"RSS grew by {growth_mb:.1f} MiB over the session"
