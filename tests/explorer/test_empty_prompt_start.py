"""An empty prompt on a model without an end-of-text token (issue 39, item 7): a character model
starts from a newline (as nanoGPT's sample.py does) and says so in the placeholder, the prompt note
and the caption; Generate writes text with no dialog and no traceback in the log. And an expected
state a panel shows inline ("no SAE trained yet") is logged as one line, never as a traceback."""
from __future__ import annotations

import logging

import pytest

from gptcore.generation.streaming import generate
from gptcore.io.char_tokenizer import CharTokenizer
from gptcore.model.config import GPTConfig
from gptcore.model.gpt import GPT

WAIT = 30_000
CHARS = list("\n abcdefgh")
pytestmark = pytest.mark.usefixtures("single_torch_thread")


def _char_model(window, chars=CHARS):
    model = GPT(GPTConfig(vocab_size=len(chars), block_size=32, n_layer=1, n_head=2, n_embd=16), seed=0).eval()
    window.session.adopt(model, name="a char model", source="test", tokenizer=CharTokenizer(chars),
                         tokenizer_name="characters")


@pytest.mark.parametrize("chars, start, first_id", [(CHARS, "a newline", 0), (list("xyz"), "'x' (token 0)", 0),
                                                    (list("ab\nc"), "a newline", 2)])
def test_an_empty_prompt_on_a_char_model_starts_from_what_the_model_has_and_says_so(
        qtbot, window, caplog, chars, start, first_id):
    _char_model(window, chars)
    window.actions["panel_generation"].trigger()
    pane = window.panel("generation").controller
    pane.view.set_prompt_text("")
    pane.refresh_logits()
    qtbot.waitUntil(lambda: pane.logits is not None and pane.logits.context.from_start and pane.distribution is not None,
                    timeout=WAIT)
    context = pane.logits.context
    assert context.ids.tolist() == [first_id] and context.start == start and "no end-of-text token" in context.start_why
    assert f"starts from {start}" in pane.view.prompt.placeholderText()
    assert f"starts from {start}" in pane.view.prompt_note.text() and "<|endoftext|>" not in pane.view.prompt_note.text()
    with caplog.at_level(logging.INFO, logger="explorer"), qtbot.waitSignal(pane.generationFinished, timeout=WAIT) as end:
        pane.view.set_settings(max_new_tokens=5, temperature=0.0)
        pane.view.generateRequested.emit()  # the button
    assert end.args == ["done"]
    assert pane.generated_ids == [s.token for s in generate(window.session.model, [first_id], max_new_tokens=5,
                                                            temperature=0)]
    assert window.errors_shown == [] and window.error_dialog is None
    assert not any(r.levelno >= logging.ERROR for r in caplog.records), [r.getMessage() for r in caplog.records]


def test_gpt2s_tokenizer_still_starts_from_endoftext_and_the_placeholder_says_so(qtbot, window):
    window.actions["panel_generation"].trigger()
    pane = window.panel("generation").controller
    qtbot.waitUntil(lambda: "<|endoftext|>" in pane.view.prompt.placeholderText(), timeout=WAIT)
    assert window.session.generation.empty_start() == (50256, "<|endoftext|>", "")


def test_an_expected_state_is_logged_as_one_line_without_a_traceback(qtbot, window, caplog, tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    window.actions["panel_features"].trigger()
    c = window.panel("features").controller
    with caplog.at_level(logging.INFO, logger="explorer"):
        c.use("sae", 0, "mlp")  # nothing trained for this model yet
        qtbot.waitUntil(lambda: "Train SAE" in c.view.status.text(), timeout=WAIT)
    said = [r for r in caplog.records if "no SAE has been trained" in r.getMessage()]
    assert said and all(r.exc_info is None and not r.exc_text for r in said)
    qtbot.waitUntil(lambda: not window.runner.busy, timeout=WAIT)


def test_a_bug_is_still_logged_with_its_traceback(caplog):
    from explorer.controllers.context import PanelContext
    from explorer.session.core import Session

    ctx = PanelContext(session=Session(), runner=None, window=None)
    try:
        raise KeyError("kaput")
    except KeyError as exc:
        with caplog.at_level(logging.ERROR, logger="explorer"):
            ctx.report_error(exc, "Something")
    assert caplog.records[-1].exc_info is not None
