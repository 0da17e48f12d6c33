"""Issue 16: at 900×600 every panel fits (the window is not forced wider), labels thin out when
heads and layers are many, and a long error wraps instead of squeezing the prompt box."""
from __future__ import annotations

import pytest
from PySide6.QtCore import QSettings
from PySide6.QtGui import QFont, QFontMetrics, QImage, QPainter

from explorer.shell.window import MainWindow
from explorer.shell.registry import PANELS
from explorer.session.core import Session

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


# -- issue 23, "small windows": a GPT-2-shaped grid (12 × 12) at 900×600 and 1280×820 ------------------------

@pytest.fixture
def gpt2_grid_window(qtbot, runner, tmp_path):
    session = Session.tiny(n_layer=12, n_head=12, n_embd=48, block_size=64)
    w = MainWindow(session, runner, settings=QSettings(str(tmp_path / "s.ini"), QSettings.Format.IniFormat))
    qtbot.addWidget(w)
    w.resize(900, 600)
    w.show()
    yield w
    qtbot.waitUntil(lambda: not w.runner.busy, timeout=WAIT_MS)


def drawn_labels(axis) -> list[tuple]:
    """(rect, text) of each tick label the axis paints now (pyqtgraph drops those it would clip)."""
    image = QImage(8, 8, QImage.Format.Format_ARGB32)
    painter = QPainter(image)
    try:
        specs = axis.generateDrawSpecs(painter)
    finally:
        painter.end()
    return [] if specs is None else [(rect, text) for rect, _flags, text in specs[2]]


def _apart(labels) -> bool:
    rects = sorted((rect for rect, _text in labels), key=lambda r: r.left())
    return all(a.right() <= b.left() for a, b in zip(rects, rects[1:]))


def _lines_apart(ys, line: float) -> bool:
    ys = sorted(ys)
    return all(b - a >= line for a, b in zip(ys, ys[1:]))


def _attribution(qtbot, window):
    page = window.show_panel("attribution")
    page.set_prompt("When Mary and John went to the store, John gave a drink to")
    qtbot.waitUntil(lambda: page.controller.result is not None and page.view.heads.values.size > 0, timeout=WAIT_MS)
    qtbot.wait(100)  # the splitter's layout settles
    return page.view


def test_the_dla_head_map_keeps_its_colour_bar_and_the_layer_bars_thin_their_labels(qtbot, gpt2_grid_window):
    """At 900 px the map's one-line title was wider than the map: the colour bar was pushed out of the
    widget (only its title showed), and the per-layer bars read 'embL0L1…'."""
    view = _attribution(qtbot, gpt2_grid_window)
    heads = view.heads
    bar = heads.colorbar.bar.sceneBoundingRect()
    assert bar.right() <= heads.width() and bar.height() >= 100  # on screen, tall
    ticks = [text for _rect, text in drawn_labels(heads.colorbar.axis)]
    assert len(ticks) >= 3 and "0" in ticks  # a scale with numbers
    assert heads.plot.titleLabel.is_wrapped()  # the long title takes two lines instead
    columns = [text for _rect, text in drawn_labels(heads.bottom_axis)]
    assert columns[0] == "H0" and columns[-1] == "MLP"  # the edge labels are drawn too
    assert _apart(drawn_labels(heads.bottom_axis))
    bars = view.bars
    assert bars.label_step() > 1
    labels = drawn_labels(bars.plot.getAxis("bottom"))
    texts = [text for _rect, text in labels]
    assert texts[0] == "emb" and texts[-1] == "bias" and 2 < len(texts) < 14
    assert _apart(labels)


def test_the_patching_maps_keep_a_readable_size_and_scroll(qtbot, gpt2_grid_window):
    """They shrank to ~30-px slivers at 900×600; now each keeps its minimum and the four scroll."""
    from explorer.views.attribution.panel import PATCH_MAP_MIN

    view = _attribution(qtbot, gpt2_grid_window)
    view.tabs.setCurrentIndex(1)
    qtbot.wait(100)
    for heatmap in view.patch_maps.values():
        assert heatmap.height() >= PATCH_MAP_MIN[1] and heatmap.width() >= PATCH_MAP_MIN[0]
    assert view.maps_scroll.verticalScrollBar().maximum() > 0  # the second row is a scroll away


def _status_fields_are_whole_or_elided_with_a_tooltip(qtbot, window):
    """'generatio…' in the status bar: a cut field ends in '…' and its tooltip gives the whole text."""
    from PySide6.QtCore import QEvent, QPoint
    from PySide6.QtGui import QHelpEvent
    from PySide6.QtWidgets import QApplication, QToolTip

    from explorer.widgets.elided_label import ElidedLabel

    window.status_labels["activity"].setText("generation: 16.5 tokens/s, 40 tokens in 2.4 s, the prompt 14 tokens")
    qtbot.wait(50)
    cut = 0
    for key, label in window.status_labels.items():
        text = label.text()
        if not label.isVisible() or not text or label.fontMetrics().horizontalAdvance(text) <= label.contentsRect().width():
            continue
        assert isinstance(label, ElidedLabel) and label.is_elided(), key
        QApplication.sendEvent(label, QHelpEvent(QEvent.Type.ToolTip, QPoint(2, 2), label.mapToGlobal(QPoint(2, 2))))
        assert QToolTip.text().startswith(label.plain_text()), key
        QToolTip.hideText()
        cut += 1
    assert cut >= 1  # at 900 px the long activity text does not fit


def test_next_token_rows_that_do_not_fit_are_left_out_not_overlapped(qtbot, gpt2_grid_window):
    page = gpt2_grid_window.show_panel("generation")
    page.set_prompt("When Mary and John went to the store, John gave a drink to")
    chart = page.view.chart
    qtbot.waitUntil(lambda: len(chart.bar_labels()) == 20, timeout=WAIT_MS)
    qtbot.waitUntil(lambda: page.controller.last_run is not None, timeout=WAIT_MS)  # the prompt's generation ended
    qtbot.wait(100)
    shown = chart.shown_rows()
    assert 5 <= shown < 20 and f"top {shown} of 20 shown" in chart.note.text()
    labels = drawn_labels(chart.plot.getAxis("left"))
    rects = sorted((rect for rect, _t in labels), key=lambda r: r.top())
    assert len(rects) == shown and all(a.bottom() <= b.top() + 1 for a, b in zip(rects, rects[1:]))
    _status_fields_are_whole_or_elided_with_a_tooltip(qtbot, gpt2_grid_window)
    gpt2_grid_window.resize(1280, 820)
    qtbot.waitUntil(lambda: chart.shown_rows() == 20, timeout=5000)  # room again: all rows
    assert "shown" not in chart.note.text()


def test_build_progress_and_cancel_scroll_into_view_at_1280_by_820(qtbot, gpt2_grid_window):
    gpt2_grid_window.resize(1280, 820)
    page = gpt2_grid_window.show_panel("config")
    qtbot.waitUntil(lambda: page.is_ready, timeout=WAIT_MS)
    view = page.view
    viewport = view.form_scroll.viewport()
    view.set_build_busy(True)
    try:
        def in_view(widget) -> bool:
            top = widget.mapTo(viewport, widget.rect().topLeft())
            bottom = widget.mapTo(viewport, widget.rect().bottomRight())
            return widget.isVisible() and top.y() >= 0 and bottom.y() <= viewport.height()

        qtbot.waitUntil(lambda: in_view(view.cancel_build_button) and in_view(view.build_progress), timeout=5000)
    finally:
        view.set_build_busy(False)


def test_the_parameter_chart_names_every_part_without_overlap_at_900_by_600(qtbot, gpt2_grid_window):
    """Nine bar names in a 140-px chart overlapped; the chart keeps a line per bar and the readout scrolls."""
    page = gpt2_grid_window.show_panel("config")
    qtbot.waitUntil(lambda: page.is_ready, timeout=WAIT_MS)
    qtbot.wait(100)
    assert gpt2_grid_window.width() == 900
    chart = page.view.chart
    labels = drawn_labels(chart.getAxis("left"))
    rects = sorted((rect for rect, _t in labels), key=lambda r: r.top())
    assert len(labels) == page.view.table.rowCount() - 1  # every component (the table adds a total row)
    line = chart.fontMetrics().height()  # a line of text apart (they were 11 px apart, touching)
    assert all(b.center().y() - a.center().y() >= line for a, b in zip(rects, rects[1:]))
    assert page.view.readout_scroll.verticalScrollBar().maximum() > 0  # the readout scrolls instead
    gpt2_grid_window.resize(1280, 820)
    qtbot.waitUntil(lambda: page.view.readout_scroll.verticalScrollBar().maximum() == 0, timeout=5000)  # all in view


def test_the_attention_grid_draws_its_first_head_label(qtbot, gpt2_grid_window):
    """'H0' sits at the axis's end; pyqtgraph dropped it as clipped ('H2 H4 …' at 900 px)."""
    page = gpt2_grid_window.show_panel("attention")
    page.set_prompt("When Mary and John went to the store, John gave a drink to")
    qtbot.waitUntil(lambda: page.controller.result is not None, timeout=WAIT_MS)
    qtbot.wait(100)
    top = [text for _r, text in drawn_labels(page.view.grid.top_axis)]
    left = [text for _r, text in drawn_labels(page.view.grid.left_axis)]
    assert top and top[0] == "H0" and _apart(drawn_labels(page.view.grid.top_axis))
    grid = page.view.grid
    line = QFontMetrics(QFont()).height()  # 12 rows of ~12 px: a label a line apart, so every 2nd
    assert left[0] == "L0" and _lines_apart([r.center().y() for r, _t in drawn_labels(grid.left_axis)], line)
    column = grid.lens_plot.vb.sceneBoundingRect()
    shown = [item for item in grid.lens_texts if item.isVisible()]
    assert shown and all(item.toPlainText().endswith("%") for item in shown)  # the number is never cut
    assert all(item.mapRectToScene(item.textItem.boundingRect()).right() <= column.right() + 1 for item in shown)
    assert _lines_apart([item.scenePos().y() for item in shown], line)


def test_the_attention_columns_keep_whole_titles_and_lens_tokens_at_900_by_600(qtbot, gpt2_grid_window):
    """Issue 27: at 900 px the summary columns were headed 'H' and '1st' and the logit-lens labels
    read '…  0.0036%'. Narrow columns turn their whole-word titles upright, inside the column, and
    each lens label keeps the token's first characters beside its probability."""
    from explorer.widgets.heatmap_grid import STATS
    from explorer.widgets.token_stream import visible_token

    page = gpt2_grid_window.show_panel("attention")
    page.set_prompt("When Mary and John went to the store, John gave a drink to")
    qtbot.waitUntil(lambda: page.controller.result is not None, timeout=WAIT_MS)
    qtbot.wait(100)
    grid = page.view.grid

    def titles():
        out = {}
        for key, _title in STATS:
            plot, text = grid.stat_plots[key], grid.stat_plots[key].titleLabel.item
            out[key] = (text.toPlainText(), text.mapRectToScene(text.boundingRect()), plot.sceneBoundingRect())
        return out

    assert grid.width() < 620  # the compact layout is the one under test
    for key, title in STATS:
        text, rect, column = titles()[key]
        assert text == title  # 'entropy', not 'H'; 'first', not '1st'
        assert rect.height() > rect.width()  # upright
        assert column.left() - 1 <= rect.left() and rect.right() <= column.right() + 1
    lens_tokens = [row[0] for row in page.controller.result.lens_tokens]
    shown = [(i, item.toPlainText()) for i, item in enumerate(grid.lens_texts) if item.isVisible()]
    assert shown
    for i, text in shown:
        token, prob = text.rsplit("  ", 1)
        assert prob.endswith("%")
        whole = visible_token(lens_tokens[i])
        assert token == whole or (token.endswith("…") and len(token) >= min(5, len(whole)))
        assert whole.startswith(token.rstrip("…"))
    gpt2_grid_window.resize(1400, 900)  # room: the titles lie across again
    qtbot.waitUntil(lambda: grid.width() >= 620, timeout=5000)
    qtbot.wait(50)
    for key, title in STATS:
        text, rect, _column = titles()[key]
        assert text == title and rect.width() > rect.height()


def test_a_narrow_value_map_thins_its_column_labels(qtbot):
    """The Train panel's census maps (4 heads in ~60 px) read 'H0H1H2H3' at 1280×820."""
    import numpy as np

    from explorer.widgets.value_heatmap import ValueHeatmap

    heatmap = ValueHeatmap("induction", value_label="score")
    qtbot.addWidget(heatmap)
    heatmap.resize(150, 200)
    heatmap.show()
    heatmap.set_matrix(np.zeros((2, 4)), ["L0", "L1"], [f"H{h}" for h in range(4)], col_px=24)
    qtbot.waitUntil(lambda: heatmap.bottom_axis.geometry().width() > 0, timeout=5000)
    qtbot.wait(50)
    labels = drawn_labels(heatmap.bottom_axis)
    assert labels[0][1] == "H0" and 1 < len(labels) < 4 and _apart(labels)
    heatmap.resize(400, 200)  # room: every head named
    qtbot.waitUntil(lambda: len(drawn_labels(heatmap.bottom_axis)) == 4, timeout=5000)
    assert _apart(drawn_labels(heatmap.bottom_axis))


def test_the_train_charts_scroll_down_only_at_900_by_600(qtbot, gpt2_grid_window):
    """At 900 px the charts were ~10 px narrower than their minimum: a horizontal scroll bar cut the
    loss chart's legend and the ICL chart; the form gives up the width it does not need."""
    page = gpt2_grid_window.show_panel("train")
    qtbot.waitUntil(lambda: page.is_ready, timeout=WAIT_MS)
    qtbot.wait(100)
    scroll = page.view.charts_scroll
    assert gpt2_grid_window.width() == 900
    assert scroll.horizontalScrollBar().maximum() == 0 and scroll.verticalScrollBar().maximum() > 0
    charts = page.view.charts
    for plot in (charts.loss_plot, charts.lr_plot, charts.icl_plot, charts.grad_plot):  # drawn whole, not cut
        assert plot.getPlotItem().sceneBoundingRect().right() <= plot.viewport().width() + 1, plot


def test_a_long_saved_message_is_elided_with_the_whole_text_in_its_tooltip(qtbot, gpt2_grid_window):
    """Issue 27: "saved /home/…/ckpt.pt (nanoGPT's ckpt.pt: …)" was cut off at the status bar's
    permanent fields with no way to read the rest; it ends in '…' and its tooltip is the whole text."""
    from PySide6.QtCore import QEvent, QPoint
    from PySide6.QtGui import QHelpEvent
    from PySide6.QtWidgets import QApplication, QToolTip

    window = gpt2_grid_window
    text = ("saved /home/someone/projects/shakespeare-char/runs/2026-12-02/ckpt.pt "
            "(nanoGPT's ckpt.pt: model, optimizer, model_args, iter_num)")
    window.show_message(text)
    qtbot.wait(50)
    label = window.status_bar.message_label
    assert window.statusBar().currentMessage() == text and label.isVisible()
    assert label.is_elided() and label.width() < label.fontMetrics().horizontalAdvance(text)
    QApplication.sendEvent(label, QHelpEvent(QEvent.Type.ToolTip, QPoint(2, 2), label.mapToGlobal(QPoint(2, 2))))
    assert QToolTip.text() == text
    QToolTip.hideText()
    window.show_message("saved x.pt", 50)  # a timed message goes by itself
    assert window.statusBar().currentMessage() == "saved x.pt" and not label.is_elided()
    qtbot.waitUntil(lambda: window.statusBar().currentMessage() == "", timeout=5000)


# -- issue 39, item 9: what was clipped or cramped at 900×600 --------------------------------------------------

def test_a_narrow_step_axis_drops_touching_labels_instead_of_running_them_together(qtbot):
    """The Train panel's learning-rate chart read '0 5001000' at 900 px."""
    import pyqtgraph as pg

    from explorer.widgets.spaced_axis import SpacedAxis

    plain, spaced = (pg.PlotWidget(axisItems={"bottom": axis}) for axis in (pg.AxisItem("bottom"), SpacedAxis("bottom")))
    for w in (plain, spaced):
        qtbot.addWidget(w)
        w.resize(120, 120)
        w.plot([0, 1500], [0, 1])
        w.show()
    qtbot.waitUntil(lambda: spaced.getPlotItem().getAxis("bottom").geometry().width() > 0, timeout=5000)
    qtbot.wait(50)
    touching = drawn_labels(plain.getPlotItem().getAxis("bottom"))
    kept = drawn_labels(spaced.getPlotItem().getAxis("bottom"))
    assert not _apart(touching)  # what pyqtgraph alone does at this width (the bug, so the test means something)
    assert _apart(kept) and kept[0][1] == touching[0][1] and 1 <= len(kept) < len(touching)
    rects = sorted((rect for rect, _t in kept), key=lambda r: r.left())
    assert all(b.left() - a.right() >= SpacedAxis.GAP_PX for a, b in zip(rects, rects[1:]))


def test_the_train_step_label_is_whole_at_900_by_600(qtbot, gpt2_grid_window):
    """'step 1,500 shown (7 kep' was cut by the buttons beside it."""
    page = gpt2_grid_window.show_panel("train")
    qtbot.waitUntil(lambda: page.is_ready, timeout=WAIT_MS)
    view = page.view
    view.set_steps([0, 250, 500, 750, 1000, 1250, 1500], "gpt2")
    view.set_shown_step("step 1,500 shown")
    view.set_run_loaded(True)
    qtbot.wait(100)
    label = view.step_label
    assert label.text() == "step 1,500 shown (7 kept steps)"
    assert not label.is_elided() and label.width() >= label.fontMetrics().horizontalAdvance(label.text())
    for button in (view.latest_box, view.use_button, view.save_button):  # and nothing beside it is pushed out
        right = button.mapTo(view, button.rect().topRight()).x()
        assert right <= view.width()


def test_routes_long_texts_wrap_below_the_controls_without_moving_them(qtbot):
    """At 1,000 tokens the info beside the prompt wrapped to 6 lines and pushed the controls down, and the
    target text ('predicts '␣' (p') was cut at the Export button."""
    from PySide6.QtWidgets import QApplication

    from explorer.views.routes.panel import RoutesPanel

    view = RoutesPanel()
    qtbot.addWidget(view)
    view.resize(900, 480)
    view.show()
    QApplication.processEvents()
    controls_y = view.slider.mapTo(view, view.slider.rect().topLeft()).y()
    view.count_label.setText("44 edges above 0.04 · 44 on the route · grey edges only for tokens 1012–1023: "
                             "1012 of 1024 not drawn")
    view.set_status("1024 tokens (96 cropped) · route 9689 ms · grey context edges next…")
    view.target_label.setText("after '.' (position 1023) → predicts '␣received' (p = 0.02)")
    QApplication.processEvents()
    qtbot.wait(50)
    assert view.slider.mapTo(view, view.slider.rect().topLeft()).y() == controls_y  # the controls stayed
    for label in (view.target_label, view.count_label, view.status_label):  # every word shown, none cut
        assert label.height() >= label.heightForWidth(label.width()), label.text()
        assert label.mapTo(view, label.rect().topLeft()).y() > controls_y
    assert view.target_label.height() <= 2 * view.target_label.fontMetrics().height() + 4  # one line at 900 px
