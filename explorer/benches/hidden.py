"""What hidden panels cost (issue 32): an ablation toggled while the Generation panel is in front,
timed until its next-token distribution is painted for the ablated model, with only that panel built
and with every panel of the registry built (each shown once, then hidden behind Generation).

    python -m explorer.bench --hidden [--shape gpt2|tiny] [--edits N]

Panels compute only when seen, so the two should take the same time, and the tasks submitted from
hidden panels per change should be 0 (printed beside the medians). Each window is real (offscreen),
with its controllers, runner and session; the same session and model serve both.
"""
from __future__ import annotations

import statistics
import tempfile
import time


def _window(app, session, runner, build_all: bool, wait):
    from PySide6.QtCore import QSettings

    from explorer.shell.registry import PANELS
    from explorer.shell.window import MainWindow

    folder = tempfile.mkdtemp(prefix="explorer-bench-")
    window = MainWindow(session, runner, settings=QSettings(f"{folder}/s.ini", QSettings.Format.IniFormat),
                        panel="generation")
    window.resize(1280, 820)
    for spec in (PANELS if build_all else ()):
        page = window.show_panel(spec.name)
        wait(lambda page=page: page.is_ready and not runner.busy, timeout=600)
    page = window.show_panel("generation")
    wait(lambda: page.controller.logits is not None and not runner.busy, timeout=600)
    return window, page


def bench_hidden(app, session, runner, rounds: int, waiter) -> dict:
    """Median ms from an ablation toggle to the distribution painted, with 1 and all panels built."""
    from explorer.shell.registry import PANELS

    wait = waiter(runner.busyChanged)
    row = {}
    for label, build_all in (("one_panel", False), ("all_panels", True)):
        window, page = _window(app, session, runner, build_all, wait)
        c = page.controller
        generation_keys = set(c.task_keys) | {"ablation"}
        others: list[str] = []
        runner.submitted.connect(lambda key: others.append(key) if key not in generation_keys else None)
        samples = []
        for _ in range(rounds):
            before = session.version
            t0 = time.perf_counter()  # one head on, then off again: the same change each other round
            window.ctx.change_ablation(lambda s: s.interp.toggle_head(0, 0), on_error=print)
            wait(lambda: session.version > before and c.logits is not None and c.logits.version == session.version)
            page.view.repaint()
            samples.append(time.perf_counter() - t0)
            wait(lambda: not runner.busy)
        built = sum(window.panel(spec.name, create=False) is not None for spec in PANELS)
        row[label] = {"panels_built": built, "ms": round(statistics.median(samples) * 1000, 1),
                      "hidden_tasks_per_change": round(len(others) / rounds, 2)}
        window.close()
        window.deleteLater()
        app.processEvents()
    row["ratio"] = round(row["all_panels"]["ms"] / row["one_panel"]["ms"], 2)
    return row
