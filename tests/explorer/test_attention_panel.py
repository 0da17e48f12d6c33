"""Attention panel: typing -> debounced worker capture -> grid, zoom, chips; faults of issue 9
(items 9, 14, 16). Every frame the controller draws is recorded, so "no stale frame after a
newer one" is checked on what was actually drawn, not on what was computed."""
from __future__ import annotations

import tracemalloc

import numpy as np
from PySide6.QtCore import QPointF, Qt
from PySide6.QtGui import QImage

from explorer.controllers.attention import AttentionController
from explorer.controllers.base import PanelPage
from explorer.widgets.heatmap_grid import LOG_FLOOR
from explorer.widgets.token_stream import visible_token
from explorer.controllers.context import PanelContext

IDLE_MS = 20000


def make_view(qtbot, ctx, prompt=""):
    ctx = PanelContext(session=ctx.session, runner=ctx.runner, window=None, prompt=prompt)
    view = PanelPage(ctx, AttentionController)
    qtbot.addWidget(view)
    view.resize(1100, 700)
    frames = []  # (text, version at draw time, result version, thumbnails shape)

    def record(result):
        frames.append((result.text, ctx.session.version, result.version, result.thumbnails.shape))

    view.controller.drawn.connect(record)
    return view, frames


def wait_idle(qtbot, view):
    c = view.controller
    qtbot.waitUntil(lambda: not c.timer.isActive() and not c._in_flight and not c.ctx.runner.busy, timeout=IDLE_MS)


def assert_grid_matches(view, session, text):
    expected = session.attention.capture(text)
    grid = view.view.grid
    L, nh = expected.n_layer, expected.n_head
    assert (grid._L, grid._nh) == (L, nh)
    for layer in range(L):
        for head in range(nh):
            tile = grid.displayed_tile(layer, head)
            want = expected.thumbnails[layer, head]
            upper = np.triu(np.ones(tile.shape, dtype=bool), 1)
            assert np.isnan(tile[upper]).all()  # causal: nothing drawn above the diagonal
            np.testing.assert_allclose(np.nan_to_num(tile), want, atol=1e-5)
            np.testing.assert_allclose(np.nansum(tile, axis=-1), 1.0, atol=1e-4)  # rows sum to 1


def test_typing_draws_the_final_text_and_never_an_older_frame(qtbot, panel_context):
    view, frames = make_view(qtbot, panel_context)
    qtbot.keyClicks(view.view.prompt, "The cat sat")
    wait_idle(qtbot, view)
    qtbot.keyClicks(view.view.prompt, " on the mat")
    wait_idle(qtbot, view)
    texts = [f[0] for f in frames]
    assert texts[-1] == "The cat sat on the mat"
    for older, newer in zip(texts, texts[1:]):
        assert newer.startswith(older)  # frames only move forward through what was typed
    assert view.controller.result.text == "The cat sat on the mat"
    assert_grid_matches(view, panel_context.session, "The cat sat on the mat")
    tokens = panel_context.session.token_strings(panel_context.session.encode("The cat sat on the mat"))
    assert view.view.chips.labels == [visible_token(t) for t in tokens]
    assert view.view.count_label.text().startswith(f"{len(tokens)} / 128 tokens")


def test_clicking_a_head_opens_the_zoom_with_token_labels(qtbot, panel_context):
    text = "Every effort moves you"
    view, _ = make_view(qtbot, panel_context, text)
    view.show()
    wait_idle(qtbot, view)
    grid = view.view.grid
    scene = grid.plot.vb.mapViewToScene(QPointF(2.5, 1.5))  # head 2, layer 1
    with qtbot.waitSignal(grid.headSelected) as sig:
        qtbot.mouseClick(grid.viewport(), Qt.MouseButton.LeftButton, pos=grid.mapFromScene(scene))
    assert sig.args == [1, 2]
    zoom = view.view.zoom
    assert "Layer 1 · Head 2" in zoom.title
    tokens = [visible_token(t) for t in panel_context.session.token_strings(panel_context.session.encode(text))]
    assert zoom.query_labels == tokens and zoom.key_labels == tokens
    np.testing.assert_allclose(zoom._pattern, panel_context.session.attention.capture(text).pattern(1, 2), atol=1e-6)
    # The chips show where the last query looks in that head.
    np.testing.assert_allclose(view.view.chips._weights, zoom._pattern[-1])
    # Arrow keys walk the grid: right -> head 3, down is clamped at the last layer.
    grid.setFocus()
    with qtbot.waitSignal(grid.headSelected) as sig:
        qtbot.keyClick(grid, Qt.Key.Key_Right)
    assert sig.args == [1, 3]
    with qtbot.waitSignal(grid.headSelected) as sig:
        qtbot.keyClick(grid, Qt.Key.Key_Down)
    assert sig.args == [1, 3]
    with qtbot.waitSignal(grid.headSelected) as sig:
        qtbot.keyClick(grid, Qt.Key.Key_Up)
    assert sig.args == [0, 3] and "Layer 0 · Head 3" in zoom.title
    view.hide()


def test_log_toggle_redraws_with_log_weights(qtbot, panel_context):
    view, _ = make_view(qtbot, panel_context, "one two three four")
    wait_idle(qtbot, view)
    view.view.log_box.setChecked(True)
    drawn = view.view.grid.image.image
    expected = np.log10(np.maximum(view.view.grid._mosaic, LOG_FLOOR))
    np.testing.assert_allclose(drawn, expected, equal_nan=True)
    assert view.view.grid.colorbar.levels() == (np.log10(LOG_FLOOR), 0.0)


def test_overlong_paste_is_cropped_with_a_note(qtbot, panel_context):
    view, _ = make_view(qtbot, panel_context)
    text = " ".join(f"word{i}" for i in range(200))  # far more than block_size = 128 tokens
    ids = panel_context.session.encode(text)
    view.view.prompt.insertPlainText(text)  # a paste: one edit
    wait_idle(qtbot, view)
    result = view.controller.result
    step = result.crop_step
    assert step == 128 // 8  # crop with slack: whole steps dropped, so the next keys reuse the window
    assert result.cropped == -(-(len(ids) - 128) // step) * step and list(result.token_ids) == ids[result.cropped:]
    assert not view.view.crop_note.isHidden()
    note = view.view.crop_note.text()
    assert f"first {result.cropped} were cropped" in note and f"showing tokens {result.cropped + 1}–{len(ids)}" in note
    assert f"moves on {step} tokens at a time" in note
    assert view.view.count_label.text().startswith(f"{len(ids) - result.cropped} / 128 tokens")
    assert_grid_matches(view, panel_context.session, text)


def test_fault_prompt_edge_cases(qtbot, panel_context):
    session = panel_context.session
    view, frames = make_view(qtbot, panel_context)
    cases = ["<|endoftext|>", "emoji 😀👍🏽 🇫🇷", "ctrl \x00\x01\x07\x1b\x7f end", "", "a" * 100_000]
    for text in cases:
        view.set_prompt(text)
        wait_idle(qtbot, view)
        assert frames[-1][0] == text
        assert "color:#dc2626" not in view.view.status_label.text()  # no error shown
        assert all(label for label in view.view.chips.labels)  # every token visible, none blank
    # <|endoftext|> typed by a user is text, not the special token.
    r = session.attention.capture("<|endoftext|>")
    assert 50256 not in r.token_ids.tolist() and r.n_tokens > 1
    # control characters show as glyphs
    view.set_prompt("a\x00b\nc")
    wait_idle(qtbot, view)
    assert any("␀" in label for label in view.view.chips.labels)
    assert any("↵" in label for label in view.view.chips.labels)
    # the empty prompt leaves an explanation instead of a stale picture
    view.set_prompt("")
    wait_idle(qtbot, view)
    assert "Type a prompt" in view.view.zoom.title and view.view.grid._t == 0
    # 100 000 characters: cropped to block_size, with the note
    view.set_prompt("a" * 100_000)
    wait_idle(qtbot, view)
    assert 128 - 128 // 8 < view.controller.result.n_tokens <= 128 and not view.view.crop_note.isHidden()


def test_fault_new_computation_while_running(qtbot, panel_context):
    view, frames = make_view(qtbot, panel_context, "first prompt")
    wait_idle(qtbot, view)
    view.set_prompt("second prompt, a longer one")
    assert view.controller._in_flight
    view.set_prompt("third")  # arrives while "second" computes: marked dirty, run after it
    wait_idle(qtbot, view)
    texts = [f[0] for f in frames]
    assert texts[-1] == "third"
    assert "third" not in texts[:-1]  # nothing drew after the newest frame
    assert_grid_matches(view, panel_context.session, "third")


def test_fault_model_swap_mid_computation_draws_nothing_stale(qtbot, panel_context):
    session = panel_context.session
    view, frames = make_view(qtbot, panel_context, "before the swap")
    wait_idle(qtbot, view)
    frames.clear()
    view.set_prompt("computing while the model changes")
    assert view.controller._in_flight
    old_version = session.version
    session.build(dict(session.config.to_dict(), n_layer=3, n_head=2), seed=1)  # the panel follows its event
    wait_idle(qtbot, view)
    assert session.version == old_version + 1
    for _text, version_at_draw, result_version, _shape in frames:
        assert result_version == version_at_draw  # never a frame of a model no longer loaded
    assert frames[-1][2] == session.version and frames[-1][3][:2] == (3, 2)
    assert_grid_matches(view, session, "computing while the model changes")


def test_fault_rapid_typing(qtbot, panel_context):
    """200 keystrokes 5 ms apart: every key is handled (the event loop keeps running), the
    final frame is the final text, far fewer captures than keys, nothing piles up."""
    view, frames = make_view(qtbot, panel_context)
    submitted = []
    runner = panel_context.runner
    original_submit = runner.submit

    def counting_submit(key, fn, **kw):
        submitted.append(key)
        return original_submit(key, fn, **kw)

    runner.submit = counting_submit
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        chars = ("lorem ipsum dolor sit amet " * 8)[:200]
        for ch in chars:
            qtbot.keyClicks(view.view.prompt, ch)
            qtbot.wait(5)
        wait_idle(qtbot, view)
        grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
        runner.submit = original_submit
    assert view.view.prompt_text() == chars
    assert frames[-1][0] == chars and view.controller.result.text == chars
    assert len(submitted) < 100  # debounce + one-in-flight, not one forward per key
    assert not runner.busy and not runner._tasks
    assert grown < 64 * 2**20, f"memory grew by {grown / 2**20:.1f} MiB while typing"
    assert_grid_matches(view, panel_context.session, chars)


def test_export_png_and_npz(qtbot, panel_context, tmp_path):
    view, _ = make_view(qtbot, panel_context, "export this prompt")
    wait_idle(qtbot, view)
    grid_png, head_png, npz = tmp_path / "grid.png", tmp_path / "head.png", tmp_path / "a.npz"
    assert view.view.export_grid_png(str(grid_png)) and view.view.export_head_png(str(head_png))
    for png in (grid_png, head_png):
        img = QImage(str(png))
        assert not img.isNull() and img.width() > 100
        colours = {img.pixel(x, y) for x in range(0, img.width(), 7) for y in range(0, img.height(), 7)}
        assert len(colours) > 10  # a picture, not a blank canvas
    view.controller.export_npz(str(npz))
    data = np.load(npz)
    expected = panel_context.session.attention.capture("export this prompt")
    np.testing.assert_allclose(data["patterns"], expected.thumbnails, atol=1e-6)
    assert list(data["tokens"]) == list(expected.tokens) and str(data["text"]) == "export this prompt"
    np.testing.assert_allclose(data["prev_token"], expected.prev_token, atol=1e-6)


def test_data_ready_after_first_draw(qtbot, panel_context):
    view, _ = make_view(qtbot, panel_context, "ready?")
    assert not view.is_ready
    with qtbot.waitSignal(view.dataReady, timeout=IDLE_MS):
        pass
    assert view.is_ready
    wait_idle(qtbot, view)


def test_screenshot_mode_renders_the_attention_panel(tmp_path, hf_checkpoint, run_screenshot):
    folder = hf_checkpoint()
    out = tmp_path / "shot.png"
    proc = run_screenshot(out, "attention", "1000x700", "--prompt", "The quick brown fox", "--model", str(folder),
                          "--device", "cpu")
    assert proc.returncode == 0, proc.stderr[-2000:]
    img = QImage(str(out))
    assert not img.isNull() and (img.width(), img.height()) == (1000, 700)
    colours = {img.pixel(x, y) for x in range(0, 1000, 9) for y in range(0, 700, 9)}
    assert len(colours) > 20
