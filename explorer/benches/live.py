"""Latency of the attention panel (last keystroke -> every heatmap repainted) and in-app speed
of generation, through the real widgets, controllers, runner and session.

    python -m explorer.bench [--tokens 32,256,1000] [--edits 8] [--shape gpt2|gpt2-xl|tiny] [--json]

Per prompt length, what is timed (median over the edits):
- keystroke_ms: a real key press into the prompt box (offscreen Qt; alternately "x" and
  Backspace at the end of the prompt), the debounce, the capture on the compute thread with
  prefix reuse (only the changed suffix runs), drawing, and a synchronous repaint of the grid
  and the zoom; the clock stops when the repaint returns. Meanwhile the GUI thread waits in a
  Qt event loop as the app's does (polling would fight the compute thread for the GIL);
- recompute_ms: the same, with the session's prefix reuse switched off (every keystroke
  recomputes the whole prompt), edits interleaved with the reuse ones so machine load falls
  on both alike;
- draw_ms: drawing alone (set_attention + the zoomed head + both repaints) for a new
  result after a one-token edit, the case typing produces.
Past block_size (e.g. --tokens 1000,2000 on GPT-2's 1,024) the keys append instead ("x", then a
space, and so on: a new token every other key), as typing on at the end of a long text does, and
worst_ms is the slowest key: the window is cropped with slack (it moves on block_size/8 tokens at
a time, gptcore.interp.probes.capture.slack_step), so most keys reuse its prefix and the key that moves
it recomputes it all. `--crop-step 1` measures the old exact crop (the window slid every token).
Then generation_ratio: greedy tokens/s of the generation pane (its own rate: tokens after the
first over their time, streamed through the runner to the view) over gptcore's `generate` on
the same model and prompt in this process, the same way (`gptcore.bench`'s decode loop).
Beside each length within the window, the Routes panel's keystroke and threshold move
(explorer/benches/routes.py; `--no-routes` skips them).
The model has random weights of the chosen shape (timing does not depend on the values). The
load average is printed: on a shared machine other processes move these numbers.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time


def _median_ms(samples: list[float]) -> float:
    return statistics.median(samples) * 1000 if samples else float("nan")


def prompt_of(session, n_tokens: int) -> str:
    words = ("the model reads every token and each head decides where to look next while we type "
             "more words into the box to see how attention moves across layers").split()
    text, i = "", 0
    while len(session.encode(text)) < n_tokens - 1:
        text += (" " if text else "") + words[i % len(words)]
        i += 1
    return text


class _Waiter:
    """Runs the Qt event loop until a predicate holds, woken by the signals given (and every
    tick_ms when asked): the GUI thread sleeps in the event loop between, as in the app."""

    def __init__(self, *signals):
        self.signals = signals

    def __call__(self, pred, timeout=300.0, tick_ms=50):
        from PySide6.QtCore import QEventLoop, QTimer

        if pred():
            return
        loop = QEventLoop()
        check = lambda *_: loop.quit() if pred() else None  # noqa: E731
        ticker = QTimer()
        ticker.timeout.connect(check)
        if tick_ms:
            ticker.start(tick_ms)
        links = [(s, s.connect(check)) for s in self.signals]
        QTimer.singleShot(int(timeout * 1000), loop.quit)
        loop.exec()
        ticker.stop()
        for signal, link in links:
            signal.disconnect(link)
        if not pred():
            raise TimeoutError("the app did not finish in time")


def bench_attention(app, session, runner, tokens: int, edits: int, recompute: bool = True) -> dict:
    """Median keystroke, recompute and drawing times at one prompt length (module docstring)."""
    from PySide6.QtCore import Qt
    from PySide6.QtTest import QTest

    from explorer.controllers.context import PanelContext
    from explorer.controllers.attention import AttentionController
    from explorer.controllers.base import PanelPage

    text = prompt_of(session, tokens)
    view = PanelPage(PanelContext(session, runner, None, text + " "), AttentionController)
    view.resize(1400, 850)
    view.show()
    drawn: list[str] = []
    view.controller.drawn.connect(lambda r: drawn.append(r.text))
    wait = _Waiter(view.controller.drawn, runner.busyChanged)
    idle = lambda: (not view.controller.timer.isActive() and not view.controller._in_flight and not runner.busy)  # noqa: E731
    wait(lambda: bool(drawn) and idle())
    prompt = view.view.prompt
    prompt.setFocus()
    prompt.moveCursor(prompt.textCursor().MoveOperation.End)
    times = {True: [], False: []}
    append = tokens > session.config.block_size  # past the window: type on, so the prompt keeps growing
    typed = text + " "
    for i in range(4 * max(1, (edits + 1) // 2)):
        reuse = (i // 2) % 2 == 0 or not recompute  # pairs of edits (x, Backspace) with reuse, then without
        session.attention.prefix_reuse = reuse
        wait(idle)
        time.sleep(0.1)
        app.processEvents()
        if append:
            key, typed = (Qt.Key.Key_X, typed + "x") if i % 2 == 0 else (Qt.Key.Key_Space, typed + " ")
            target = typed
        else:
            key, target = (Qt.Key.Key_X, text + " x") if i % 2 == 0 else (Qt.Key.Key_Backspace, text + " ")
        drawn.clear()
        t0 = time.perf_counter()
        QTest.keyClick(prompt, key)
        wait(lambda: target in drawn, tick_ms=0)  # woken by `drawn` only
        view.view.grid.viewport().repaint()  # synchronous: every heatmap painted now
        view.view.zoom.viewport().repaint()
        times[reuse].append(time.perf_counter() - t0)
    session.attention.prefix_reuse = True
    # Drawing alone: alternate two results one token apart, as typing does.
    a = session.attention.capture(typed + "x", full_layers=(view.controller.selected[0],), thumb_size=view.controller.thumb_size)
    b = session.attention.capture(typed, full_layers=(view.controller.selected[0],), thumb_size=view.controller.thumb_size)
    draws = []
    for i in range(2 * edits):
        result = (a, b)[i % 2]
        t0 = time.perf_counter()
        view.controller.result = result
        view.view.set_attention(result)
        view.controller._show_selected()
        view.view.grid.viewport().repaint()
        view.view.zoom.viewport().repaint()
        draws.append(time.perf_counter() - t0)
    last = view.controller.result
    out = dict(tokens=int(last.total_tokens), window=int(last.n_tokens), keystroke_ms=round(_median_ms(times[True]), 1),
               worst_ms=round(max(times[True]) * 1000, 1),
               recompute_ms=round(_median_ms(times[False]), 1) if recompute else None, draw_ms=round(_median_ms(draws), 1),
               debounce_ms=view.controller.timer.interval(), cache_mb=round(session.attention.cache_bytes() / 2**20, 1))
    runner.wait_all(10000)
    app.processEvents()
    view.close()
    view.deleteLater()
    return out


def bench_generation(app, session, runner, new_tokens: int, rounds: int = 3) -> dict:
    """In-app greedy tok/s over gptcore's own `generate` loop, interleaved, same prompt."""
    import torch

    from gptcore.generation.streaming import generate

    from explorer.controllers.context import PanelContext
    from explorer.controllers.base import PanelPage
    from explorer.controllers.generation import GenerationController

    prompt = "The quick brown fox jumps over the lazy dog because"
    page = PanelPage(PanelContext(session, runner, None, None), GenerationController)
    pane = page.controller
    pane.view.set_prompt_text(prompt)
    pane.view.set_settings(temperature=0.0, max_new_tokens=new_tokens)
    wait = _Waiter(pane.generationFinished, runner.busyChanged)
    ids = session.generation.context(prompt).ids.tolist()
    app_rates, ref_rates = [], []

    def reference() -> float:  # on the compute thread too, so both share its warm OpenMP team
        stamps = []
        for _step in generate(session.model, ids, max_new_tokens=new_tokens, temperature=0):
            stamps.append(time.perf_counter())
        return (len(stamps) - 1) / (stamps[-1] - stamps[0])

    for _ in range(rounds):
        wait(lambda: not runner.busy)
        got = []
        runner.submit("bench.reference", lambda t, p: reference(), on_result=got.append)
        wait(lambda: bool(got) and not runner.busy)
        ref_rates.append(got[0])
        finished = []
        pane.generationFinished.connect(finished.append)
        assert pane.start_generation()
        wait(lambda: bool(finished) and not runner.busy)
        app_rates.append(pane.last_rate)
    runner.wait_all(10000)
    app.processEvents()
    page.close()
    page.deleteLater()
    del torch
    app_rate, ref_rate = statistics.median(app_rates), statistics.median(ref_rates)
    return dict(generation_ratio=round(app_rate / ref_rate, 3), app_tok_s=round(app_rate, 1),
                gptcore_tok_s=round(ref_rate, 1), new_tokens=new_tokens)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m explorer.bench", description=__doc__.splitlines()[0])
    p.add_argument("--edits", type=int, default=6, help="keystrokes per mode and length (x, Backspace pairs)")
    p.add_argument("--tokens", default="32", help="comma-separated prompt lengths, e.g. 32,256,1000")
    p.add_argument("--shape", default="gpt2", choices=["gpt2", "gpt2-medium", "gpt2-large", "gpt2-xl", "tiny"])
    p.add_argument("--device", default="cpu", help="cpu, cuda or auto")
    p.add_argument("--threads", type=int, default=0, help="torch intra-op threads (0: torch's default)")
    p.add_argument("--new-tokens", type=int, default=64, help="greedy tokens per generation run (0: skip)")
    p.add_argument("--no-recompute", action="store_true", help="skip the reuse-off edits (big shapes: minutes each)")
    p.add_argument("--crop-step", type=int, default=0,
                   help="past block_size, drop this many tokens at a time (0: the app's block_size/8; 1: exact crop)")
    p.add_argument("--json", action="store_true", help="print one JSON list instead of text")
    p.add_argument("--no-routes", action="store_true", help="skip the Routes panel's keystroke and threshold (benches/routes.py)")
    p.add_argument("--hidden", action="store_true",
                   help="ablation -> Generation's distribution with 1 vs every panel built (explorer/benches/hidden.py)")
    p.add_argument("--train", action="store_true",
                   help="keystrokes and training it/s alone and together (explorer/benches/training.py)")
    p.add_argument("--train-threads", default="1,2", help="with --train: the training child's thread counts to try")
    p.add_argument("--seconds", type=float, default=30.0, help="with --train: seconds each training rate is measured")
    args = p.parse_args(argv)
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

    import torch
    from PySide6.QtWidgets import QApplication

    from gptcore.model.config import GPTConfig

    from explorer.session.core import Session
    from explorer.runtime.workers import TaskRunner

    if args.threads:
        torch.set_num_threads(args.threads)
    if args.crop_step:  # the session asks gptcore.interp.probes.attention for its step; answer with the one asked for
        import gptcore.interp.probes.attention as probes_attention

        probes_attention.slack_step = lambda _block: args.crop_step
    app = QApplication.instance() or QApplication([])
    from explorer.runtime.gui_gc import GuiThreadCollector

    GuiThreadCollector(app)  # as the app: cyclic garbage is collected on a GUI timer, not mid-redraw
    if args.shape == "tiny":
        session = Session.tiny()
    else:
        session = Session(device=args.device)
        session.build(GPTConfig.preset(args.shape).to_dict(), "gpt2", seed=0)
    cfg = session.config
    say = (lambda *_: None) if args.json else print
    say(f"model: {args.shape} shape, random weights ({cfg.n_layer} layers × {cfg.n_head} heads, n_embd {cfg.n_embd}) "
        f"on {session.device}; torch threads {torch.get_num_threads()}; load average {os.getloadavg()[0]:.2f} "
        f"on {os.cpu_count()} CPUs")
    runner = TaskRunner()
    rows = []
    if args.hidden:
        from explorer.benches.hidden import bench_hidden

        row = bench_hidden(app, session, runner, args.edits, _Waiter)
        say(f"ablation -> distribution painted: 1 panel built {row['one_panel']['ms']} ms, "
            f"{row['all_panels']['panels_built']} panels built {row['all_panels']['ms']} ms (ratio {row['ratio']}); "
            f"tasks from hidden panels per change: {row['all_panels']['hidden_tasks_per_change']}")
        rows.append(row)
        if args.json:
            print(json.dumps(rows))
        runner.wait_all(5000)
        return 0
    if args.train:
        from explorer.benches.training import run as bench_training

        threads = [int(x) for x in args.train_threads.split(",") if x.strip()]
        rows.append(bench_training(app, session, runner, int(args.tokens.split(",")[0]), args.edits, threads,
                                   args.seconds, bench_attention, say=say))
        if args.json:
            print(json.dumps(rows))
        runner.wait_all(5000)
        return 0
    for n in [int(x) for x in args.tokens.split(",") if x.strip()]:
        row = bench_attention(app, session, runner, n, args.edits, recompute=not args.no_recompute)
        rows.append(row)
        versus = (f"   recompute {row['recompute_ms']:7.1f} ms   ratio {row['keystroke_ms'] / row['recompute_ms']:.3f}"
                  if row["recompute_ms"] is not None else "")
        window = f" (window {row['window']}, slowest key {row['worst_ms']:.0f} ms)" if row["window"] < row["tokens"] else ""
        say(f"{row['tokens']:5d} tokens{window}: keystroke {row['keystroke_ms']:7.1f} ms{versus}   drawing {row['draw_ms']:6.1f} ms"
            f"   (debounce {row['debounce_ms']} ms; kept state {row['cache_mb']} MB)")
        if not args.no_routes and row["window"] == row["tokens"]:  # beside this length's attention keystroke
            from explorer.benches.routes import bench_routes

            routes = bench_routes(app, session, runner, prompt_of(session, n), args.edits, _Waiter)
            routes["routes_vs_attention"] = round(routes["routes_keystroke_ms"] / row["keystroke_ms"], 2)
            rows.append(routes)
            say(f"      routes: keystroke {routes['routes_keystroke_ms']:7.1f} ms ({routes['routes_vs_attention']}x "
                f"attention's; information_flow {routes['routes_compute_ms']} ms)   threshold move "
                f"{routes['threshold_ms']:.1f} ms ({routes['routes_edges']} edges)")
    if args.new_tokens:
        gen = bench_generation(app, session, runner, args.new_tokens)
        rows.append({"generation_ratio": gen["generation_ratio"]})
        say(f"generation: in-app {gen['app_tok_s']} tok/s, gptcore generate {gen['gptcore_tok_s']} tok/s, "
            f"ratio {gen['generation_ratio']}")
    say(f"load average after: {os.getloadavg()[0]:.2f}")
    if args.json:
        print(json.dumps(rows))
    runner.wait_all(5000)
    return 0


if __name__ == "__main__":
    sys.exit(main())
