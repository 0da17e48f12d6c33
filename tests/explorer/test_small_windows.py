"""Issue 16: at 900×600 every panel fits (the window is not forced wider), labels thin out when
heads and layers are many, and a long error wraps instead of squeezing the prompt box."""
from __future__ import annotations

import pytest
from PySide6.QtCore import QSettings

from explorer.main_window import MainWindow
from explorer.registry import PANELS
from explorer.session import Session

WAIT_MS = 60_000
pytestmark = pytest.mark.usefixtures("single_torch_thread")


@pytest.fixture
def many_heads_window(qtbot, runner, tmp_path):
    """48 layers × 25 heads, like gpt2-xl's grid, but 50 wide so it runs in a moment."""
    session = Session.tiny(n_layer=48, n_head=25, n_embd=50, block_size=64)
    w = MainWindow(session, runner, settings=QSettings(str(tmp_path / "s.ini"), QSettings.Format.IniFormat))
    qtbot.addWidget(w)
    w.resize(900, 600)
    w.show()
    return w


@pytest.mark.parametrize("name", [s.name for s in PANELS])
def test_every_panel_fits_a_900_by_600_window(qtbot, many_heads_window, name):
    page = many_heads_window.show_panel(name)
    qtbot.waitUntil(lambda: page.is_ready, timeout=WAIT_MS)
    assert many_heads_window.minimumSizeHint().width() <= 900
    assert many_heads_window.width() == 900
    qtbot.waitUntil(lambda: not many_heads_window.runner.busy, timeout=WAIT_MS)


def test_grid_labels_thin_out_to_what_fits(qtbot, many_heads_window):
    page = many_heads_window.show_panel("attention")
    page.set_prompt("Every effort moves you to the")
    qtbot.waitUntil(lambda: page.controller.result is not None, timeout=WAIT_MS)
    grid = page.view.grid
    qtbot.waitUntil(lambda: grid.top_axis.label_step() > 1, timeout=5000)  # 25 heads in a narrow grid
    for axis, count, size in ((grid.top_axis, 25, grid.top_axis.geometry().width()),
                              (grid.left_axis, 48, grid.left_axis.geometry().height())):
        shown = [label for _x, label in axis._tickLevels[0]]
        assert len(shown) < count and shown[0].endswith("0")
        assert axis.label_step() * size / count >= axis.GAP_PX  # labels at least the gap apart
    assert grid.lens_label_step > 1  # 48 rows of lens text would overlap: every k-th is written
    visible = [item for item in grid.lens_texts if item.isVisible()]
    assert 0 < len(visible) < 48
    qtbot.waitUntil(lambda: not many_heads_window.runner.busy, timeout=WAIT_MS)


def test_a_long_error_wraps_without_squeezing_the_prompt_box(qtbot, many_heads_window):
    page = many_heads_window.show_panel("attention")
    qtbot.waitUntil(lambda: page.is_ready, timeout=WAIT_MS)
    before = page.view.prompt.width()
    page.view.set_error("token ' hello' (id 31,373) is outside this model's vocabulary (vocab_size=1,000); type "
                        "text whose tokens are all below 1,000, or use a model whose vocabulary covers the GPT-2 "
                        "tokenizer (50,257 ids)")
    qtbot.wait(50)
    assert page.view.prompt.width() >= before - 2 and page.view.prompt.width() > page.view.width() * 0.5
    assert page.view.status_label.wordWrap()
    qtbot.waitUntil(lambda: not many_heads_window.runner.busy, timeout=WAIT_MS)
