"""The Attribution panel on a tiny random model: live DLA, pickers, ablation as session
state, patching with progress/cancel/cell click, census table, export, bad input."""
import csv

import numpy as np
import pytest

from explorer.controllers.attribution import DEFAULT_CORRUPT, DEFAULT_PROMPT, AttributionView
from explorer.panels.attribution_panel import NO_CONTRAST

WAIT = 30_000


@pytest.fixture
def view(qtbot, panel_context, single_torch_thread):
    v = AttributionView(panel_context, debounce_ms=0)
    qtbot.addWidget(v)
    v.resize(1200, 760)
    with qtbot.waitSignal(v.controller.drawn, timeout=WAIT):
        pass
    qtbot.waitUntil(lambda: v.controller.census is not None, timeout=WAIT)
    return v


def test_dla_is_drawn_with_the_top_two_and_sums(view, panel_context):
    r = view.controller.result
    assert r.text == DEFAULT_PROMPT and r.target == r.top[0] and r.contrast == r.top[1]
    attn, mlps, embed, bias = view.panel.bars.heights
    assert attn.sum() + mlps.sum() + embed + bias == pytest.approx(r.total, abs=1e-4)
    shown = view.panel.heads.values
    assert shown.shape == (2, 5)  # 4 heads + the MLP column
    np.testing.assert_allclose(shown[:, :4], r.heads)
    np.testing.assert_allclose(shown[:, 4], r.mlps)
    assert view.panel.target.currentText() == r.target.text
    assert view.panel.census.rowCount() == 8


def test_typing_updates_live_and_a_typed_target_is_kept(qtbot, view):
    c = view.controller
    with qtbot.waitSignal(c.drawn, timeout=WAIT):
        view.panel.target.picked.emit(" Mary")
    assert c.result.target.text == " Mary"
    with qtbot.waitSignal(c.drawn, timeout=WAIT) as blocker:
        view.panel.set_prompt_text("The capital of France is")
    assert blocker.args[0].text == "The capital of France is" and blocker.args[0].target.text == " Mary"
    with qtbot.waitSignal(c.drawn, timeout=WAIT):
        view.panel.contrast.picked.emit(NO_CONTRAST)
    assert c.result.contrast is None


def test_bad_picks_give_messages_and_keep_the_last_result(qtbot, view):
    c, before = view.controller, view.controller.result
    view.panel.target.picked.emit(" Maryjane")
    assert "is 3 tokens" in view.panel.message.text()
    view.panel.contrast.picked.emit(before.target.text)
    assert "same token" in view.panel.message.text()
    assert c.result is before


def test_clicking_a_head_ablates_it_for_every_panel_and_reset_restores(qtbot, view, panel_context):
    session = panel_context.session
    v0, before = session.version, view.controller.result
    with qtbot.waitSignal(view.controller.drawn, timeout=WAIT):
        view.panel.heads.cellClicked.emit(1, 2)
    assert session.ablation.heads == ((1, 2),) and session.version == v0 + 1
    after = view.controller.result
    assert after.heads[1, 2] == 0.0 and after.total != pytest.approx(before.total, abs=1e-6)
    assert view.panel.ablation_label.text() == "1 head ablated" and view.panel.reset_button.isEnabled()
    marks = view.panel.heads.marks.getData()
    assert list(zip(marks[1], marks[0])) == [(1.5, 2.5)]
    with qtbot.waitSignal(view.controller.drawn, timeout=WAIT):
        view.panel.heads.cellClicked.emit(0, 4)  # the MLP column
    assert session.ablation.mlps == (0,)
    qtbot.waitUntil(lambda: view.panel.census.item(0, 5) is not None, timeout=WAIT)
    with qtbot.waitSignal(view.controller.drawn, timeout=WAIT):
        view.panel.reset_button.click()
    assert not session.ablation.active and view.panel.ablation_label.text() == "nothing ablated"
    assert view.controller.result.total == pytest.approx(before.total, abs=1e-6)


def test_ablating_every_head_is_refused_with_a_message(qtbot, view, panel_context):
    session = panel_context.session
    session.set_ablation([(l, h) for l in range(2) for h in range(4) if (l, h) != (1, 3)])
    view.controller.on_model_changed()
    view.panel.heads.cellClicked.emit(1, 3)
    qtbot.waitUntil(lambda: "all 8 heads" in view.panel.message.text(), timeout=WAIT)
    assert len(session.ablation.heads) == 7


def test_patching_runs_with_progress_and_a_cell_shows_its_distribution(qtbot, view):
    c = view.controller
    progress = []
    view.panel.progress.valueChanged.connect(progress.append)
    with qtbot.waitSignal(c.patched, timeout=WAIT):
        view.panel.run_button.click()
    r = c.patch_result
    T = len(r.tokens)
    assert r.corrupt_text == DEFAULT_CORRUPT and r.resid.shape == (2, T) and r.heads.shape == (2, 4)
    np.testing.assert_allclose(view.panel.patch_maps["resid"].values, r.resid)
    assert progress and progress[-1] == 2 * T * 3 + 8
    qtbot.waitUntil(lambda: view.panel.run_button.isEnabled(), timeout=WAIT)  # finished follows the result
    assert not view.panel.cancel_button.isEnabled()
    assert "clean LD" in view.panel.patch_message.text()
    view.panel.patch_maps["resid"].cellClicked.emit(0, 9)
    qtbot.waitUntil(lambda: view.panel.patched.bar_labels() != [], timeout=WAIT)
    assert "resid L0 ' John' (pos 9)" in view.panel.patched.caption.text()


def test_patching_prompts_of_different_lengths(qtbot, view):
    view.panel.corrupt.setPlainText(DEFAULT_CORRUPT + " him")
    view.panel.run_button.click()
    qtbot.waitUntil(lambda: "14 tokens and the corrupted prompt 15" in view.panel.patch_message.text(), timeout=WAIT)
    assert view.panel.run_button.isEnabled()


def test_cancel_stops_patching_cleanly(qtbot, view, panel_context):
    c = view.controller
    panel_context.session.patching = _slow_patching(panel_context.session.patching)
    view.panel.run_button.click()
    qtbot.waitUntil(lambda: view.panel.progress.value() > 0, timeout=WAIT)
    view.panel.cancel_button.click()
    qtbot.waitUntil(lambda: view.panel.run_button.isEnabled(), timeout=WAIT)
    assert "cancelled" in view.panel.patch_message.text() and c.patch_result is None


def _slow_patching(real):
    """The real session.patching, slowed at each progress report so Cancel lands mid-run."""
    import time

    def patching(*args, progress=None, cancel=None):
        def slow(done, total, message):
            progress(done, total, message)
            time.sleep(0.05)
        return real(*args, progress=slow, cancel=cancel)
    return patching


def test_export_csv_and_png(qtbot, view, tmp_path):
    c = view.controller
    c.export("heads", "csv", str(tmp_path / "heads.csv"))
    rows = list(csv.reader(open(tmp_path / "heads.csv")))
    assert rows[0] == ["", "H0", "H1", "H2", "H3", "MLP"] and rows[1][0] == "L0"
    assert float(rows[2][3]) == pytest.approx(c.result.heads[1, 2], rel=1e-5)
    c.export("bars", "csv", str(tmp_path / "bars.csv"))
    assert list(csv.reader(open(tmp_path / "bars.csv")))[1][0] == "embed"
    c.export("census", "csv", str(tmp_path / "census.csv"))
    assert len(list(csv.reader(open(tmp_path / "census.csv")))) == 9
    c.export("heads", "png", str(tmp_path / "heads.png"))
    assert (tmp_path / "heads.png").stat().st_size > 1000
    c.export("bars", "png", str(tmp_path / "missing" / "bars.png"))
    assert "could not write" in view.panel.message.text()


def test_a_nan_model_gives_a_message_and_the_panel_stays(qtbot, view, panel_context):
    import torch

    with torch.no_grad():
        panel_context.session.model.blocks[0].mlp.c_fc.weight.fill_(float("nan"))
    view.panel.set_prompt_text("Something else")
    qtbot.waitUntil(lambda: "NaN/Inf" in view.panel.message.text(), timeout=WAIT)


def test_shift_click_in_the_attention_grid_ablates_a_head_and_marks_it(qtbot, panel_context, single_torch_thread):
    from PySide6.QtCore import QPointF, Qt

    from explorer.controllers.attention import AttentionView

    session = panel_context.session
    view = AttentionView(panel_context, debounce_ms=0)
    qtbot.addWidget(view)
    view.resize(1000, 700)
    view.show()
    with qtbot.waitSignal(view.controller.drawn, timeout=WAIT):
        pass
    before = view.controller.result.thumbnails
    grid = view.panel.grid

    class Click:  # what pyqtgraph's scene hands to sigMouseClicked, with Shift held
        def __init__(self, pos):
            self._pos = pos

        def scenePos(self):  # noqa: N802
            return self._pos

        def button(self):
            return Qt.MouseButton.LeftButton

        def modifiers(self):
            return Qt.KeyboardModifier.ShiftModifier

    centre = grid.plot.vb.mapViewToScene(QPointF(2.5, 0.5))  # head 2 of layer 0
    with qtbot.waitSignal(view.controller.drawn, timeout=WAIT):
        grid._on_click(Click(centre))
    assert session.ablation.heads == ((0, 2),) and grid.ablated == ((0, 2),)
    after = view.controller.result.thumbnails
    np.testing.assert_array_equal(after[0], before[0])  # layer 0's patterns do not depend on its own output
    assert np.abs(after[1] - before[1]).max() > 1e-6  # layer 1 reads the ablated head's absence
    view.close()


def test_the_attention_grid_shows_the_census_induction_column(qtbot, panel_context, single_torch_thread):
    from explorer.controllers.attention import AttentionView

    view = AttentionView(panel_context, debounce_ms=0)
    qtbot.addWidget(view)
    with qtbot.waitSignal(view.controller.drawn, timeout=WAIT):
        pass
    census = panel_context.session.head_census()
    qtbot.waitUntil(lambda: view.panel.grid._census is not None, timeout=WAIT)
    np.testing.assert_array_equal(view.panel.grid.stat_images["induction"].image, census.induction.astype(np.float32))
