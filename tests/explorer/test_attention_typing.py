"""Typing never queues work: a fast typist (20 keys/s) or an undo/redo storm ends with the
frame of the final text, never draws an older text after a newer one, and starts at most
one capture beyond the one in flight when the last key lands."""
from __future__ import annotations

from PySide6.QtCore import QEventLoop, Qt, QTimer
from PySide6.QtTest import QTest

from explorer.controllers.context import PanelContext
from explorer.controllers.attention import AttentionController
from explorer.controllers.base import PanelPage


def _view(qtbot, ctx, prompt):
    view = PanelPage(PanelContext(session=ctx.session, runner=ctx.runner, window=None, prompt=prompt), AttentionController)
    qtbot.addWidget(view)
    view.resize(900, 600)
    view.show()
    return view


def _idle(view):
    c = view.controller
    return not c.timer.isActive() and not c._in_flight and not c.ctx.runner.busy


def _press_keys(view, keys, interval_ms):
    """Press `keys` (Qt key, modifiers) one every interval_ms from the event loop, as a user would."""
    loop, pending = QEventLoop(), list(keys)
    timer = QTimer()

    def press():
        if not pending:
            timer.stop()
            loop.quit()
            return
        key, mods = pending.pop(0)
        QTest.keyClick(view.view.prompt, key, mods)

    timer.timeout.connect(press)
    timer.start(interval_ms)
    loop.exec()


def _track(view, session):
    frames, starts = [], []
    view.controller.drawn.connect(lambda r: frames.append(r.text))
    original = session.attention.capture

    def counted(text, **kw):  # a spy: the real capture runs
        starts.append(text)
        return original(text, **kw)

    session.attention.capture = counted
    return frames, starts


def test_twenty_keys_a_second_end_on_the_last_text_without_a_backlog(qtbot, panel_context, single_torch_thread):
    session = panel_context.session
    view = _view(qtbot, panel_context, "Attention while typing:")
    qtbot.waitUntil(lambda: view.controller.result is not None and _idle(view), timeout=20000)
    frames, starts = _track(view, session)
    prompt = view.view.prompt
    prompt.setFocus()
    prompt.moveCursor(prompt.textCursor().MoveOperation.End)
    typed = " the quick brown fox jumps over the lazy dog again and again"
    keys = [(Qt.Key(ord(ch.upper())) if ch != " " else Qt.Key.Key_Space, Qt.KeyboardModifier.NoModifier)
            for ch in typed]
    _press_keys(view, keys, 50)
    at_last_key = len(starts)
    qtbot.waitUntil(lambda: _idle(view), timeout=30000)
    final = prompt.toPlainText()
    assert frames[-1] == final and view.controller.result.text == final
    # Frames appear in typing order: each drawn text is a prefix of the next one.
    assert all(final.startswith(t) for t in frames) and frames == sorted(frames, key=len)
    assert len(starts) - at_last_key <= 2  # the capture in flight at the last key, then one more
    assert len(starts) <= len(keys) + 1  # never more captures than keys
    del session.attention.capture  # the spy goes; the method is the class's again


def test_undo_redo_storm_keeps_the_frame_consistent_with_the_text(qtbot, panel_context, single_torch_thread):
    session = panel_context.session
    view = _view(qtbot, panel_context, "")
    prompt = view.view.prompt
    prompt.setFocus()
    for word in ("one", " two", " three", " four"):
        QTest.keyClicks(prompt, word)
    qtbot.waitUntil(lambda: _idle(view), timeout=20000)
    frames, _starts = _track(view, session)
    ctrl = Qt.KeyboardModifier.ControlModifier
    storm = [(Qt.Key.Key_Z, ctrl)] * 6 + [(Qt.Key.Key_Y, ctrl), (Qt.Key.Key_Z, ctrl)] * 10 + [(Qt.Key.Key_Y, ctrl), (Qt.Key.Key_Z, ctrl)] * 3
    _press_keys(view, storm, 15)
    qtbot.waitUntil(lambda: _idle(view), timeout=30000)
    final = prompt.toPlainText()
    assert final != "one two three four"  # the storm did change the text
    assert frames and frames[-1] == final and view.controller.result.text == final
    expected = session.attention.capture(final, full_layers=(view.controller.selected[0],), thumb_size=64)
    assert view.controller.result.tokens == expected.tokens
    del session.attention.capture  # the spy goes; the method is the class's again
