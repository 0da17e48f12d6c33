"""Latency of the attention panel: last keystroke -> every heatmap repainted.

    python -m explorer.bench [--edits 12] [--tokens 32] [--shape gpt2|tiny]

What is timed, per edit (median and spread over several edits):
- end to end: a real key press into the prompt box (offscreen Qt), the 80 ms debounce, the
  worker's capture, drawing the grid/summary/lens/zoom, and a synchronous repaint of both
  views; the clock stops when the repaint returns. Meanwhile the GUI thread waits in a Qt
  event loop, as the app's does: polling (processEvents + a 1 ms sleep) would wake the GUI
  thread a thousand times a second to fight the worker for the GIL and the two cores, and
  made the capture ~30 ms slower than the app ever sees it;
- the capture alone (`Session.attention`, the forward with hooks + pooling + logit lens),
  and for reference the bare forward without hooks (fused attention, no logits).
The model is GPT-2 small's shape with random weights (timing does not depend on the values).
Expect the capture inside the app (a worker thread) to take 20-45 ms longer than the one timed
here on the main thread: once more than one thread has run parallel torch ops (here the main
thread did, in the app the GUI thread and pool threads do), libgomp sees more OpenMP threads
than CPUs and lets each team's helper thread sleep between parallel regions instead of
spinning, so every GEMM waits for a wake-up, and longer after an idle pause.
The load average is printed too: on a shared machine other processes move these numbers.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time


def _median_ms(samples: list[float]) -> str:
    ms = sorted(s * 1000 for s in samples)
    return f"median {statistics.median(ms):6.1f} ms   (min {ms[0]:.1f}, max {ms[-1]:.1f}, n={len(ms)})"


def prompt_of(session, n_tokens: int) -> str:
    words = ("the model reads every token and each head decides where to look next while we type "
             "more words into the box to see how attention moves across layers").split()
    text, i = "", 0
    while len(session.encode(text)) < n_tokens - 1:
        text += (" " if text else "") + words[i % len(words)]
        i += 1
    return text


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m explorer.bench", description=__doc__.splitlines()[0])
    p.add_argument("--edits", type=int, default=12)
    p.add_argument("--tokens", type=int, default=32)
    p.add_argument("--shape", default="gpt2", choices=["gpt2", "tiny"])
    p.add_argument("--threads", type=int, default=0, help="torch intra-op threads (0: torch's default)")
    args = p.parse_args(argv)
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

    import torch
    from PySide6.QtCore import QEventLoop, Qt, QTimer
    from PySide6.QtTest import QTest
    from PySide6.QtWidgets import QApplication

    from gptcore.config import GPTConfig

    from .controllers.attention import AttentionController
    from .controllers.base import PanelPage
    from .context import PanelContext
    from .session import Session
    from .workers import TaskRunner

    if args.threads:
        torch.set_num_threads(args.threads)
    app = QApplication.instance() or QApplication([])
    if args.shape == "gpt2":
        session = Session(device="cpu")
        session.build(GPTConfig.preset("gpt2").to_dict(), "gpt2", seed=0)
    else:
        session = Session.tiny()
    text = prompt_of(session, args.tokens)
    cfg = session.config
    print(f"model: {session.info.name} ({cfg.n_layer} layers × {cfg.n_head} heads, n_embd {cfg.n_embd}); "
          f"torch threads {torch.get_num_threads()}; load average {os.getloadavg()[0]:.2f} "
          f"on {os.cpu_count()} CPUs (shared machine: other work shows up here)")

    # 1. The capture and the bare forward.
    ids = torch.tensor([session.encode(text + " x")])
    print(f"prompt: {ids.shape[1]} tokens")
    for _ in range(2):
        session.attention(text + " x")
    capture, bare, full_logits = [], [], []
    for _ in range(args.edits):
        t0 = time.perf_counter()
        session.attention(text + " x", full_layers=(0,))
        capture.append(time.perf_counter() - t0)
        with torch.inference_mode():
            t0 = time.perf_counter()
            session.model(ids, logits=None)
            bare.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            session.model(ids, logits="all")
            full_logits.append(time.perf_counter() - t0)
    print(f"capture (hooks, all patterns, stats, lens):   {_median_ms(capture)}")
    print(f"bare forward, no hooks, logits=None:           {_median_ms(bare)}")
    print(f"bare forward, no hooks, logits for every pos.: {_median_ms(full_logits)}")

    # 2. End to end through the real panel.
    runner = TaskRunner()
    view = PanelPage(PanelContext(session, runner, None, text), AttentionController)
    view.resize(1400, 850)
    view.show()
    drawn: list[tuple[str, float]] = []
    view.controller.drawn.connect(lambda r: drawn.append((r.text, time.perf_counter())))

    def wait(pred, timeout=120.0, tick_ms=50):
        """Run the event loop until pred() holds, re-checking when something was drawn or
        the runner's queue drained (and every tick_ms, for the debounce timer; 0: never):
        between those the GUI thread sleeps in Qt's event loop as it does in the app."""
        if pred():
            return
        loop = QEventLoop()
        check = lambda *_: loop.quit() if pred() else None  # noqa: E731
        ticker = QTimer()
        ticker.timeout.connect(check)
        if tick_ms:
            ticker.start(tick_ms)
        links = [(view.controller.drawn, view.controller.drawn.connect(check)),
                 (runner.busyChanged, runner.busyChanged.connect(check))]
        QTimer.singleShot(int(timeout * 1000), loop.quit)
        loop.exec()
        ticker.stop()
        for signal, link in links:
            signal.disconnect(link)
        if not pred():
            raise TimeoutError("the panel did not draw in time")

    idle = lambda: (not view.controller.timer.isActive() and not view.controller._in_flight and not runner.busy)  # noqa: E731
    wait(lambda: bool(drawn) and idle())
    prompt = view.view.prompt
    prompt.setFocus()
    prompt.moveCursor(prompt.textCursor().MoveOperation.End)
    latencies = []
    for i in range(args.edits):
        wait(idle)
        time.sleep(0.15)
        app.processEvents()
        key = Qt.Key.Key_X if i % 2 == 0 else Qt.Key.Key_Backspace
        target = text + " x" if i % 2 == 0 else text + " "
        if i == 0:
            QTest.keyClick(prompt, Qt.Key.Key_Space)
            wait(idle)
        drawn.clear()
        t0 = time.perf_counter()
        QTest.keyClick(prompt, key)  # the last keystroke of this edit
        wait(lambda: any(t == target for t, _ in drawn), tick_ms=0)  # woken by `drawn` only
        view.view.grid.viewport().repaint()  # synchronous: every heatmap painted now
        view.view.zoom.viewport().repaint()
        latencies.append(time.perf_counter() - t0)
    print(f"keystroke -> all heatmaps repainted (debounce {view.controller.timer.interval()} ms included): "
          f"{_median_ms(latencies)}")
    result, draws = view.controller.result, []
    for _ in range(args.edits):
        t0 = time.perf_counter()
        view.view.set_attention(result)
        view.controller._show_selected()
        view.view.grid.viewport().repaint()
        view.view.zoom.viewport().repaint()
        draws.append(time.perf_counter() - t0)
    print(f"drawing alone (grid, columns, zoom, chips + repaint):            {_median_ms(draws)}")
    print(f"load average after: {os.getloadavg()[0]:.2f}")
    runner.wait_all(5000)
    view.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
