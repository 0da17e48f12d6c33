"""Issue 16's fault cases: what the window says after a bad --model, about weights nobody
trained, and for a model without a tokenizer."""
from __future__ import annotations

from PySide6.QtCore import QSettings

from explorer.shell.window import MainWindow
from explorer.session.core import Session

WAIT_MS = 120_000


def _text_ckpt(tmp_path):
    path = tmp_path / "broken" / "ckpt.pt"
    path.parent.mkdir()
    path.write_text("this is a note, not a checkpoint\n" * 40, encoding="utf-8")
    return path


def test_fault_bad_model_at_start_opens_the_default_and_does_not_claim_a_previous_model(qtbot, runner, tmp_path):
    window = MainWindow(None, runner, settings=QSettings(str(tmp_path / "s.ini"), QSettings.Format.IniFormat))
    window.auto_download = False
    qtbot.addWidget(window)
    window.show()
    window.start(str(_text_ckpt(tmp_path)), "cpu")
    qtbot.waitUntil(lambda: window.session is not None and window.session.has_model and not runner.busy,
                    timeout=WAIT_MS)
    heading, message = window.errors_shown[0]
    assert heading == "Could not load the model"
    assert "not a PyTorch checkpoint" in message and "it is text" in message
    assert "Opening the built-in default model instead" in message and "still loaded" not in message
    assert window.session.info.name == "GPT-2 small shape, random init"
    assert window.status_labels["trained"].text() == "UNTRAINED" and not window.banner.isHidden()
    page = window.show_panel("attention")  # not "waiting for the model" forever
    qtbot.waitUntil(lambda: page.is_ready, timeout=WAIT_MS)
    window.error_dialog.close()
    qtbot.waitUntil(lambda: not runner.busy, timeout=WAIT_MS)


def test_fault_bad_model_in_screenshot_mode_still_exits_2_with_the_message(run_screenshot, tmp_path):
    done = run_screenshot(tmp_path / "x.png", "attention", "900x600", "--model", str(_text_ckpt(tmp_path)))
    assert done.returncode == 2, done.stderr
    assert "not a PyTorch checkpoint" in done.stderr and not (tmp_path / "x.png").exists()


def test_weights_nobody_trained_are_loaded_not_trained(qtbot, window, hf_checkpoint):
    folder = hf_checkpoint()  # transformers' fresh random init, saved: no evidence of training
    window.session.load(str(folder))  # the session announces it; the window follows
    badge = window.status_labels["trained"]
    assert badge.text() == "loaded" and badge.property("trained") == "unknown"
    assert window.banner.isHidden()  # not called untrained either: nothing says which it is
    assert window.session.info.status_word == "loaded"
    qtbot.waitUntil(lambda: not window.runner.busy, timeout=WAIT_MS)


def test_model_without_tokenizer_reads_token_ids_and_says_why(qtbot, runner, tmp_path, hf_checkpoint):
    folder = hf_checkpoint(vocab_size=300)  # smaller than GPT-2's: its ids are its own
    session = Session(device="cpu")  # named: "auto" is the GPU where there is one
    session.load(str(folder))
    assert "token ids are shown" in session.info.tokenizer
    window = MainWindow(session, runner, settings=QSettings(str(tmp_path / "s.ini"), QSettings.Format.IniFormat))
    qtbot.addWidget(window)
    window.show()
    page = window.show_panel("attention")
    page.set_prompt("5 17 299")
    qtbot.waitUntil(lambda: page.controller.result is not None and page.controller.result.n_tokens == 3,
                    timeout=WAIT_MS)
    assert page.controller.result.token_ids.tolist() == [5, 17, 299]
    assert [label.strip() for label in page.view.chips.labels] == ["#5", "#17", "#299"]
    page.set_prompt("hello")  # words cannot be read without a tokenizer: the panel says what to type
    qtbot.waitUntil(lambda: "token ids" in page.view.status_label.text(), timeout=WAIT_MS)
    assert window.error_dialog is None
    qtbot.waitUntil(lambda: not runner.busy, timeout=WAIT_MS)
