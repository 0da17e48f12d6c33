"""The Attribution panel on a tiny random model: live DLA, pickers, ablation as session
state, patching with progress/cancel/cell click, census table, export, bad input."""
import csv

import numpy as np
import pytest

from explorer.controllers.attribution import DEFAULT_CORRUPT, DEFAULT_PROMPT, AttributionController
from explorer.controllers.base import PanelPage
from explorer.views.attribution.panel import Pick

WAIT = 30_000


@pytest.fixture
def view(qtbot, panel_context, single_torch_thread):
    v = PanelPage(panel_context, AttributionController, debounce_ms=0)
    qtbot.addWidget(v)
    v.resize(1200, 760)
    with qtbot.waitSignal(v.controller.drawn, timeout=WAIT):
        pass
    qtbot.waitUntil(lambda: v.controller.census is not None, timeout=WAIT)
    return v


def test_dla_is_drawn_with_the_top_two_and_sums(view, panel_context):
    r = view.controller.result
    assert r.text == DEFAULT_PROMPT and r.target == r.top[0] and r.contrast == r.top[1]
    attn, mlps, embed, bias = view.view.bars.heights
    assert attn.sum() + mlps.sum() + embed + bias == pytest.approx(r.total, abs=1e-4)
    shown = view.view.heads.values
    assert shown.shape == (2, 5)  # 4 heads + the MLP column
    np.testing.assert_allclose(shown[:, :4], r.heads)
    np.testing.assert_allclose(shown[:, 4], r.mlps)
    assert view.view.target.choice() == r.target.text
    assert view.view.census.rowCount() == 8


def test_pickers_show_a_tokens_leading_space(qtbot, view):
    """Issue 23: " creed" showed as "creed" in the target box, indistinguishable from "creed"."""
    c, picker = view.controller, view.view.target
    with qtbot.waitSignal(c.drawn, timeout=WAIT):
        picker.picked.emit(" Mary")
    assert picker.currentText() == "␣Mary" and picker.choice() == " Mary"
    listed = [t.text for t in c.result.top]
    spaced = [t for t in listed if t.startswith(" ")]
    assert spaced  # GPT-2's top tokens after a prompt mostly start with a space
    shown = [picker.itemText(i) for i in range(picker.count())]
    assert "␣" + spaced[0][1:] in shown and spaced[0] in picker.entries()
    index = shown.index("␣" + spaced[0][1:])
    with qtbot.waitSignal(picker.picked, timeout=WAIT) as picked:
        picker.activated.emit(index)  # choosing it from the list picks the raw token
    assert picked.args == [spaced[0]]
    picker.lineEdit().setText("␣Paris")  # typed with the chips' mark: read back as a space
    assert picker.choice() == " Paris"


def test_typing_updates_live_and_a_typed_target_is_kept(qtbot, view):
    c = view.controller
    with qtbot.waitSignal(c.drawn, timeout=WAIT):
        view.view.target.picked.emit(" Mary")
    assert c.result.target.text == " Mary"
    with qtbot.waitSignal(c.drawn, timeout=WAIT) as blocker:
        view.view.set_prompt_text("The capital of France is")
    assert blocker.args[0].text == "The capital of France is" and blocker.args[0].target.text == " Mary"
    with qtbot.waitSignal(c.drawn, timeout=WAIT):
        view.view.contrast.picked.emit(Pick.NONE)
    assert c.result.contrast is None


def test_bad_picks_give_messages_and_keep_the_last_result(qtbot, view):
    c, before = view.controller, view.controller.result
    view.view.target.picked.emit(" Maryjane")
    assert "is 3 tokens" in view.view.message.text()
    view.view.contrast.picked.emit(before.target.text)
    assert "same token" in view.view.message.text()
    assert c.result is before


def test_clicking_a_head_ablates_it_for_every_panel_and_reset_restores(qtbot, view, panel_context, tmp_path):
    session = panel_context.session
    v0, before = session.version, view.controller.result
    with qtbot.waitSignal(view.controller.drawn, timeout=WAIT):
        view.view.heads.cellClicked.emit(1, 2)
    assert session.interp.ablation.heads == ((1, 2),) and session.version == v0 + 1
    after = view.controller.result
    assert after.heads[1, 2] == 0.0 and after.total != pytest.approx(before.total, abs=1e-6)
    assert view.view.ablation_label.text() == "1 head ablated" and view.view.reset_button.isEnabled()
    marks = view.view.heads.marks.getData()
    assert list(zip(marks[1], marks[0])) == [(1.5, 2.5)]
    with qtbot.waitSignal(view.controller.drawn, timeout=WAIT):
        view.view.heads.cellClicked.emit(0, 4)  # the MLP column
    assert session.interp.ablation.mlps == (0,)
    qtbot.waitUntil(lambda: view.view.census.item(0, 6) is not None, timeout=WAIT)
    census = view.view.census
    qtbot.waitUntil(lambda: any(census.head_at(r) == (1, 2) and census.item(r, 6).text() == "ablated"
                                for r in range(census.rowCount())), timeout=WAIT)
    view.controller.export("census", "csv", str(tmp_path / "census.csv"))
    meta, rows = _csv(tmp_path / "census.csv")
    assert meta["ablation"] == "L1H2, L0 MLP (zero ablation)"  # the exported numbers say what was knocked out
    assert [(r[0], r[1]) for r in rows[1:] if r[7] == "yes"] == [("1", "2")]
    with qtbot.waitSignal(view.controller.drawn, timeout=WAIT):
        view.view.reset_button.click()
    assert not session.interp.ablation.active and view.view.ablation_label.text() == "nothing ablated"
    assert view.controller.result.total == pytest.approx(before.total, abs=1e-6)


def test_ablating_every_head_is_refused_with_a_message(qtbot, view, panel_context):
    session = panel_context.session
    session.interp.set_ablation([(l, h) for l in range(2) for h in range(4) if (l, h) != (1, 3)])  # the panel follows
    view.view.heads.cellClicked.emit(1, 3)
    qtbot.waitUntil(lambda: "all 8 heads" in view.view.message.text(), timeout=WAIT)
    assert len(session.interp.ablation.heads) == 7


def test_patching_runs_with_progress_and_a_cell_shows_its_distribution(qtbot, view):
    c = view.controller
    progress = []
    view.view.progress.valueChanged.connect(progress.append)
    with qtbot.waitSignal(c.patched, timeout=WAIT):
        view.view.run_button.click()
    r = c.patch_result
    T = len(r.tokens)
    assert r.corrupt_text == DEFAULT_CORRUPT and r.resid.shape == (2, T) and r.heads.shape == (2, 4)
    np.testing.assert_allclose(view.view.patch_maps["resid"].values, r.resid)
    assert progress and progress[-1] == 2 * T * 3 + 8
    qtbot.waitUntil(lambda: view.view.run_button.isEnabled(), timeout=WAIT)  # finished follows the result
    assert not view.view.cancel_button.isEnabled()
    assert "clean LD" in view.view.patch_message.text()
    view.view.patch_maps["resid"].cellClicked.emit(0, 9)
    qtbot.waitUntil(lambda: view.view.patched.bar_labels() != [], timeout=WAIT)
    assert "resid L0 ' John' (pos 9)" in view.view.patched.caption.text()


def test_patching_prompts_of_different_lengths(qtbot, view):
    view.view.corrupt.setPlainText(DEFAULT_CORRUPT + " him")
    view.view.run_button.click()
    qtbot.waitUntil(lambda: "14 tokens and the corrupted prompt 15" in view.view.patch_message.text(), timeout=WAIT)
    # The error and the task's end are two deliveries: the button comes back with the second.
    qtbot.waitUntil(lambda: view.view.run_button.isEnabled(), timeout=WAIT)


def test_cancel_stops_patching_cleanly(qtbot, view, panel_context):
    c = view.controller
    panel_context.session.interp.patching = _slow_patching(panel_context.session.interp.patching)
    view.view.run_button.click()
    qtbot.waitUntil(lambda: view.view.progress.value() > 0, timeout=WAIT)
    view.view.cancel_button.click()
    qtbot.waitUntil(lambda: view.view.run_button.isEnabled(), timeout=WAIT)
    assert "cancelled" in view.view.patch_message.text() and c.patch_result is None


def _slow_patching(real):
    """The real session.interp.patching, slowed at each progress report so Cancel lands mid-run."""
    import time

    def patching(*args, progress=None, cancel=None):
        def slow(done, total, message):
            progress(done, total, message)
            time.sleep(0.05)
        return real(*args, progress=slow, cancel=cancel)
    return patching


def _csv(path):
    """(the `# key: value` lines as a dict, the table's rows)."""
    lines = open(path, encoding="utf-8").read().splitlines()
    meta = dict(line[2:].split(": ", 1) for line in lines if line.startswith("# "))
    return meta, list(csv.reader(line for line in lines if not line.startswith("# ")))


def test_export_csv_and_png(qtbot, view, tmp_path):
    c = view.controller
    c.export("heads", "csv", str(tmp_path / "heads.csv"))
    meta, rows = _csv(tmp_path / "heads.csv")
    assert rows[0] == ["", "H0", "H1", "H2", "H3", "MLP"] and rows[1][0] == "L0"
    assert float(rows[2][3]) == pytest.approx(c.result.heads[1, 2], rel=1e-5)
    # what the numbers were computed from travels with them (issue 23)
    assert meta["model"] == "tiny (test) (untrained)" and meta["ablation"] == "none"
    assert meta["prompt"] == c.result.text and meta["target"] == repr(c.result.target.text)
    c.export("bars", "csv", str(tmp_path / "bars.csv"))
    assert _csv(tmp_path / "bars.csv")[1][1][0] == "embed"
    c.export("census", "csv", str(tmp_path / "census.csv"))
    meta, census_rows = _csv(tmp_path / "census.csv")
    assert len(census_rows) == 9 and "target" not in meta
    assert census_rows[0][4:] == ["induction", "position_copy", "position_offset", "ablated"]
    assert float(census_rows[6][5]) == pytest.approx(float(c.census.position_copy[1, 1]), rel=1e-5)
    assert int(census_rows[6][6]) == int(c.census.position_offset[1, 1]) >= 2
    assert all(row[7] == "" for row in census_rows[1:])
    c.export("heads", "png", str(tmp_path / "heads.png"))
    assert (tmp_path / "heads.png").stat().st_size > 1000
    c.export("census", "png", str(tmp_path / "census.png"))
    assert (tmp_path / "census.png").stat().st_size > 1000
    c.export("bars", "png", str(tmp_path / "missing" / "bars.png"))
    assert "could not write" in view.view.message.text()


def test_a_nan_model_gives_a_message_and_the_panel_stays(qtbot, view, panel_context):
    import torch

    with torch.no_grad():
        panel_context.session.model.blocks[0].mlp.c_fc.weight.fill_(float("nan"))
    view.view.set_prompt_text("Something else")
    qtbot.waitUntil(lambda: "NaN/Inf" in view.view.message.text(), timeout=WAIT)


def test_shift_click_in_the_attention_grid_ablates_a_head_and_marks_it(qtbot, panel_context, single_torch_thread):
    from PySide6.QtCore import QPointF, Qt

    from explorer.controllers.attention import AttentionController

    session = panel_context.session
    view = PanelPage(panel_context, AttentionController, debounce_ms=0)
    qtbot.addWidget(view)
    view.resize(1000, 700)
    view.show()
    with qtbot.waitSignal(view.controller.drawn, timeout=WAIT):
        pass
    before = view.controller.result.thumbnails
    grid = view.view.grid

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
    assert session.interp.ablation.heads == ((0, 2),) and grid.ablated == ((0, 2),)
    after = view.controller.result.thumbnails
    np.testing.assert_allclose(after[0], before[0], atol=1e-6)  # layer 0's patterns do not depend on its own output
    assert np.abs(after[1] - before[1]).max() > 1e-6  # layer 1 reads the ablated head's absence
    view.close()


def test_the_attention_grid_shows_the_census_induction_column(qtbot, panel_context, single_torch_thread):
    from explorer.controllers.attention import AttentionController

    view = PanelPage(panel_context, AttentionController, debounce_ms=0)
    qtbot.addWidget(view)
    with qtbot.waitSignal(view.controller.drawn, timeout=WAIT):
        pass
    census = panel_context.session.interp.census()
    qtbot.waitUntil(lambda: view.view.grid._census is not None, timeout=WAIT)
    np.testing.assert_array_equal(view.view.grid.stat_images["induction"].image, census.induction.astype(np.float32))


def test_a_model_swap_clears_the_panel_and_redraws_for_the_new_model(qtbot, view, panel_context):
    session = panel_context.session
    session.interp.set_ablation([(0, 1)])
    with qtbot.waitSignal(view.controller.drawn, timeout=WAIT):
        session.build(dict(n_layer=3, n_head=2, n_embd=32, block_size=64), seed=0)  # the panel follows
    assert view.view.heads.values.shape == (3, 3) and not session.interp.ablation.active
    assert view.view.ablation_label.text() == "nothing ablated"
    qtbot.waitUntil(lambda: view.view.census.rowCount() == 6, timeout=WAIT)


def test_the_census_table_shows_position_copy_heads_in_their_own_column(qtbot):
    from PySide6.QtCore import Qt

    from explorer.views.attribution.census_table import COLUMNS, CensusTable

    table = CensusTable()
    qtbot.addWidget(table)
    rows = [(0, 0, 0.9, 0.0, 0.02, 0.05, 2), (0, 1, 0.0, 0.1, 0.05, 0.97, 19), (1, 0, 0.1, 0.0, 0.81, 0.03, 7)]
    table.set_census(rows, ablated=[(1, 0)])
    col = COLUMNS.index("position-copy")
    assert table.horizontalHeaderItem(col).text() == "position-copy"
    table.sortItems(col, Qt.SortOrder.DescendingOrder)
    assert table.head_at(0) == (0, 1) and table.item(0, col).data(Qt.ItemDataRole.DisplayRole) == 0.97
    assert "19 tokens back" in table.item(0, col).toolTip()
    ablated = [r for r in range(3) if table.item(r, COLUMNS.index("ablated")).text() == "ablated"]
    assert [table.head_at(r) for r in ablated] == [(1, 0)]
