"""Drawing what changed: after any sequence of results, every view of the attention panel
shows exactly what a freshly built panel shows for the last one (the caches that skip
unchanged work must never leave a stale label, chip, tile or lens row behind)."""
from __future__ import annotations

import numpy as np
from PySide6.QtWidgets import QApplication

from explorer.views.attention.panel import AttentionPanel
from explorer.widgets.token_chips import TokenChips


def _draw(panel, result, layer=0, head=1):
    panel.set_attention(result)
    panel.show_head(layer, head, result.pattern(layer, head), "summary")
    QApplication.processEvents()  # the view's range settles (the lens labels thin by the rows' pixels)


def _state(panel):
    chips = panel.chips
    return dict(
        chip_labels=chips.labels, hidden=chips._hidden,
        chip_rects=[(r.x(), r.y(), r.width()) for r in chips._rects[chips._hidden:]],
        zoom_q=panel.zoom.query_labels, zoom_k=panel.zoom.key_labels,
        zoom_ticks=panel.zoom.left_axis._tickLevels, zoom_image=panel.zoom.image.image,
        mosaic=panel.grid._mosaic, lens=[t.toPlainText() for t in panel.grid.lens_texts if t.isVisible()],
        count=panel.count_label.text(),
    )


def _assert_same(a, b):
    for key in a:
        if isinstance(a[key], np.ndarray):
            np.testing.assert_array_equal(a[key], b[key], err_msg=key)
        else:
            assert a[key] == b[key], key


def test_redraw_after_edits_equals_a_fresh_panel(qtbot, tiny_session):
    texts = ["The cat sat on the mat", "The cat sat on the mat.", "The dog sat on the mat.",
             "The dog sat on the mat. " * 30, "The dog", "The dog sat\n\ton the mat"]
    results = [tiny_session.attention.capture(t, full_layers=(0,), thumb_size=8) for t in texts]
    live = AttentionPanel()
    qtbot.addWidget(live)
    live.resize(900, 600)
    live.show()
    for i, result in enumerate(results):
        _draw(live, result)
        fresh = AttentionPanel()
        qtbot.addWidget(fresh)
        fresh.resize(900, 600)
        fresh.show()
        _draw(fresh, result)
        _assert_same(_state(live), _state(fresh))
        fresh.close()
    live.close()


def test_chip_widths_follow_a_font_change(qtbot):
    from PySide6.QtGui import QFont

    chips = TokenChips()
    qtbot.addWidget(chips)
    chips.resize(400, 100)
    chips.set_tokens(["hello", " world"] * 5)
    before = [r.width() for r in chips._rects]
    font = QFont(chips.font())
    font.setPointSize(font.pointSize() * 2)
    chips.setFont(font)
    after = [r.width() for r in chips._rects if r is not None]  # same tokens: the font change re-lays out
    assert after[0] > before[0]


def test_grey_mask_covers_exactly_the_future_cells():
    from PySide6.QtCore import QPointF

    from explorer.widgets.heatmap_grid import future_mask_path

    rows, cols, t = 2, 3, 5
    path = future_mask_path(rows, cols, t)
    for layer in range(rows):
        for head in range(cols):
            for q in range(t):
                for k in range(t):
                    centre = QPointF(head + (k + 0.5) / t, layer + (q + 0.5) / t)
                    assert path.contains(centre) == (k > q), (layer, head, q, k)
    zoom = future_mask_path(1, 1, 7, tile=7)
    assert all(zoom.contains(QPointF(k + 0.5, q + 0.5)) == (k > q) for q in range(7) for k in range(7))
    assert future_mask_path(1, 1, 1).isEmpty()  # one token: nothing is in its future


def test_zoom_and_grid_draw_opaque_images_with_the_mask_on_top(qtbot, tiny_session):
    from PySide6.QtGui import QImage

    panel = AttentionPanel()
    qtbot.addWidget(panel)
    panel.resize(900, 600)
    panel.show()
    result = tiny_session.attention.capture("one two three four five six", full_layers=(0,))
    _draw(panel, result)
    for view in (panel.grid, panel.zoom):
        view.image.render()  # what its paint does first
        assert view.image.qimage.format() == QImage.Format.Format_RGB32
        assert view.future.zValue() > view.image.zValue() and not view.future.path().isEmpty()
    assert not np.isnan(panel.zoom.image.image).any()
    panel.close()


def test_clearing_the_grid_takes_the_mask_away_too(qtbot, tiny_session):
    panel = AttentionPanel()
    qtbot.addWidget(panel)
    _draw(panel, tiny_session.attention.capture("one two three", full_layers=(0,)))
    assert not panel.grid.future.path().isEmpty()
    panel.clear_results("model changed")
    assert panel.grid.future.path().isEmpty() and panel.zoom.future.path().isEmpty()
    _draw(panel, tiny_session.attention.capture("one two three", full_layers=(0,)))  # the same shape again
    assert not panel.grid.future.path().isEmpty()
