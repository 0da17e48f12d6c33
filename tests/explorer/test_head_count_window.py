"""Issue 23: the book's model.pth (4 heads, width 96) opened in the window as 1 head without a
word. Now the window asks (the divisors of the width, likeliest first, the book's defaults
named), loads with the count chosen and says in the status bar and the Config panel that the
user gave it; `--n-head` gives it up front, and screenshot mode without it exits 2 naming it."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from PySide6.QtWidgets import QLabel

from gptcore.io.head_count import head_count_choices

ROOT = Path(__file__).resolve().parents[2]
WIDTH, CTX, VOCAB, LAYERS, HEADS = 96, 16, 50257, 1, 4
WAIT_MS = 30000

pytestmark = pytest.mark.usefixtures("single_torch_thread")


def write_book_model(path: Path) -> Path:
    """torch.save(model.state_dict(), "model.pth") of the book's GPTModel (ch. 4 names), random
    values: what a reader of the book has. The head count is in none of these shapes."""
    g = torch.Generator().manual_seed(0)
    r = lambda *shape: torch.randn(*shape, generator=g) * 0.1  # noqa: E731
    d = WIDTH
    state = {"tok_emb.weight": r(VOCAB, d), "pos_emb.weight": r(CTX, d), "final_norm.scale": 1 + r(d),
             "final_norm.shift": r(d), "out_head.weight": r(VOCAB, d)}
    for i in range(LAYERS):
        p = f"trf_blocks.{i}."
        for name in ("W_query", "W_key", "W_value"):
            state[p + f"att.{name}.weight"] = r(d, d)
        state.update({p + "att.out_proj.weight": r(d, d), p + "att.out_proj.bias": r(d),
                      p + "att.mask": torch.triu(torch.ones(CTX, CTX), 1),
                      p + "ff.layers.0.weight": r(4 * d, d), p + "ff.layers.0.bias": r(4 * d),
                      p + "ff.layers.2.weight": r(d, 4 * d), p + "ff.layers.2.bias": r(d),
                      p + "norm1.scale": 1 + r(d), p + "norm1.shift": r(d), p + "norm2.scale": 1 + r(d),
                      p + "norm2.shift": r(d)})
    torch.save(state, path)
    return path


def test_the_window_asks_for_the_head_count_and_says_it_was_given(qtbot, window, tmp_path):
    path = write_book_model(tmp_path / "model.pth")
    before = window.session.model
    window.load_model(str(path))
    qtbot.waitUntil(lambda: window.head_count_dialog is not None, timeout=WAIT_MS)
    dialog = window.head_count_dialog
    assert window.session.model is before  # nothing loaded on a guess
    assert window.error_dialog is None or not window.error_dialog.isVisible()
    items = [dialog.combo.itemData(i) for i in range(dialog.combo.count())]
    assert items == head_count_choices(WIDTH) and HEADS in items  # the divisors, likeliest first
    assert dialog.combo.currentData() == items[0]
    texts = " ".join(label.text() for label in dialog.findChildren(QLabel))
    assert "GPT_CONFIG_124M" in texts and "12 heads at width 768" in texts and "--n-head" in texts
    dialog.grab().save(str(tmp_path / "head_count_dialog.png"))
    dialog.choose(HEADS)
    dialog.accept()
    qtbot.waitUntil(lambda: window.session.model is not before and not window.runner.busy, timeout=WAIT_MS)
    assert window.session.model.config.n_head == HEADS
    status = window.status_labels["model"]
    assert "4 heads (given)" in status.text() and "given by the user" in status.toolTip()
    config = window.show_panel("config")
    assert "Head count:" in config.view.loaded_label.text() and "given by the user" in config.view.loaded_label.text()
    assert config.view.values()["n_head"] == HEADS


def test_declining_keeps_the_model_and_says_so(qtbot, window, tmp_path):
    path = write_book_model(tmp_path / "model.pth")
    before = window.session.model
    window.load_model(str(path))
    qtbot.waitUntil(lambda: window.head_count_dialog is not None, timeout=WAIT_MS)
    window.head_count_dialog.reject()
    qtbot.waitUntil(lambda: window.head_count_dialog is None and not window.runner.busy, timeout=WAIT_MS)
    assert window.session.model is before
    assert "needs a head count" in window.statusBar().currentMessage()


def _run_app(args, tmp_path):
    env = dict(os.environ, QT_QPA_PLATFORM="offscreen", HF_HUB_OFFLINE="1", HF_HOME=str(tmp_path / "hf"),
               XDG_CONFIG_HOME=str(tmp_path / "config"), XDG_STATE_HOME=str(tmp_path / "state"),
               XDG_DATA_HOME=str(tmp_path / "data"), XDG_CACHE_HOME=str(tmp_path / "cache"), OMP_NUM_THREADS="1")
    return subprocess.run([sys.executable, "-m", "explorer", *args, "--device", "cpu"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=240)


def test_screenshot_mode_needs_n_head_and_uses_it(tmp_path):
    path = write_book_model(tmp_path / "model.pth")
    out = tmp_path / "shot.png"
    done = _run_app(["--screenshot", str(out), "--model", str(path)], tmp_path)
    assert done.returncode == 2 and "--n-head" in done.stderr and "Traceback" not in done.stderr
    assert not out.exists()
    done = _run_app(["--screenshot", str(out), "--model", str(path), "--n-head", str(HEADS), "--panel", "config"],
                    tmp_path)
    assert done.returncode == 0, done.stderr
    assert out.stat().st_size > 10_000


def test_n_head_without_a_model_is_a_usage_error(tmp_path):
    done = _run_app(["--screenshot", str(tmp_path / "x.png"), "--n-head", "4"], tmp_path)
    assert done.returncode == 2 and "--n-head" in done.stderr and "--model" in done.stderr
