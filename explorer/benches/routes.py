"""Latency of the Routes panel, measured beside the attention panel's keystroke (issue 29):

- routes_keystroke_ms: a real key press into the Routes prompt (alternately "x" and Backspace),
  the debounce, gptcore.information_flow + the logits forward on the compute thread, flow_graph,
  drawing, and a synchronous repaint of the graph; median over the edits. The target is at most
  2x the attention panel's keystroke at 32 tokens (which recomputes less: prefix reuse).
- threshold_ms: one threshold move (the spin box, as the slider drives it): flow_graph over the
  kept contributions, the redraw and the repaint, no forward; target <= 50 ms.
"""
from __future__ import annotations

import statistics
import time


def bench_routes(app, session, runner, text: str, edits: int, waiter) -> dict:
    from PySide6.QtCore import Qt
    from PySide6.QtTest import QTest

    from explorer.controllers.base import PanelPage
    from explorer.controllers.context import PanelContext
    from explorer.controllers.routes import RoutesController

    page = PanelPage(PanelContext(session, runner, None, text + " "), RoutesController)
    page.resize(1400, 850)
    page.show()
    c, view = page.controller, page.view
    drawn: list[str] = []
    c.drawn.connect(lambda _g: drawn.append(c.result.text if c.result is not None else ""))
    wait = waiter(c.drawn, runner.busyChanged)
    idle = lambda: not c.timer.isActive() and not c.live.in_flight and not runner.busy  # noqa: E731
    wait(lambda: c.graph is not None and idle())
    prompt = view.prompt
    prompt.setFocus()
    prompt.moveCursor(prompt.textCursor().MoveOperation.End)
    keys = []
    for i in range(2 * max(1, edits)):
        wait(idle)
        time.sleep(0.1)
        app.processEvents()
        key, target = (Qt.Key.Key_X, text + " x") if i % 2 == 0 else (Qt.Key.Key_Backspace, text + " ")
        t0 = time.perf_counter()
        QTest.keyClick(prompt, key)
        wait(lambda: c.result is not None and c.result.text == target and idle(), tick_ms=0)
        view.graph.viewport().repaint()
        keys.append(time.perf_counter() - t0)
    moves = []
    for i in range(4 * max(1, edits)):
        t0 = time.perf_counter()
        view.threshold_box.setValue(0.03 if i % 2 == 0 else 0.05)
        view.graph.viewport().repaint()
        moves.append(time.perf_counter() - t0)
    out = dict(routes_tokens=int(c.result.n_tokens), routes_keystroke_ms=round(statistics.median(keys) * 1000, 1),
               threshold_ms=round(statistics.median(moves) * 1000, 1), routes_edges=int(c.graph.n_edges),
               routes_compute_ms=round(c.result.elapsed_s * 1000, 1))
    runner.wait_all(10000)
    app.processEvents()
    page.close()
    page.deleteLater()
    return out
