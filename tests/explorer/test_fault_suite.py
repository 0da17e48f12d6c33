"""Issue 9 at the window level: each fault reaches the user as a message naming the problem
and the fix, the app keeps running, and nothing the user had is lost (the previous model,
the attention prompt, the config form's edits, the generation settings).

gptcore's own tests (tests/gptcore/test_loading_faults.py, ...) pin the exact wording of
each refusal; here the same bad files go through File → Open (`window.load_model`), a
worker, the error dialog and the panels, which is the path a user takes. Also the cases a
user can hit that issue 9 does not list: a custom vocab_size below the GPT-2 tokenizer's
ids, a block_size of 1, a model swap during a residual sweep, and --device cuda without a GPU.
"""
from __future__ import annotations

import json
import os
import pickle
import random
import struct
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from PySide6.QtCore import QSettings, QTimer

from explorer.controllers.attention import AttentionController
from explorer.controllers.base import PanelPage
from explorer.controllers.generation import GenerationController
from explorer.shell.window import MainWindow
from explorer.controllers.context import PanelContext
from explorer.session.core import Session

transformers = pytest.importorskip("transformers")
safetensors_torch = pytest.importorskip("safetensors.torch")

ROOT = Path(__file__).resolve().parents[2]
WAIT_MS = 30000
USER_PROMPT = "my carefully typed prompt"
USER_SETTINGS = dict(temperature=0.7, top_k=40, max_new_tokens=5)


# Tiny models: a second OpenMP thread only adds spin-waiting on a shared 2-core machine.
pytestmark = pytest.mark.usefixtures("single_torch_thread")


def wait_quiet(qtbot, runner) -> None:
    qtbot.waitUntil(lambda: not runner.busy, timeout=WAIT_MS)


def user_state(window, qtbot):
    """Open the panels and leave what a user would have: a prompt, a config edit, settings."""
    attention = window.show_panel("attention")
    attention.set_prompt(USER_PROMPT)
    qtbot.waitUntil(lambda: attention.controller.result is not None
                    and attention.controller.result.text == USER_PROMPT, timeout=WAIT_MS)
    config = window.show_panel("config").view
    config.inputs["n_layer"].setValue(7)  # an unsaved edit
    generation = window.show_panel("generation")
    generation.view.set_settings(**USER_SETTINGS)
    wait_quiet(qtbot, window.runner)
    window.show_panel("attention")  # in front: only the panel shown computes (issue 32)
    return attention, config, generation


def snapshot(window, attention, config, generation) -> dict:
    s = window.session
    return dict(model=s.model, info=s.info, version=s.version, status=window.status_labels["model"].text(),
                prompt=attention.view.prompt_text(), drawn=attention.controller.result.text,
                config=config.values(), settings=generation.view.settings())


def assert_still_running(qtbot, window, attention) -> None:
    """The event loop ticks and a new edit is still computed and drawn by a worker (in front: a hidden
    panel computes nothing until shown)."""
    window.show_panel("attention")
    ticks = []
    QTimer.singleShot(0, lambda: ticks.append(1))
    qtbot.waitUntil(lambda: ticks == [1], timeout=5000)
    attention.set_prompt(USER_PROMPT + " again")
    qtbot.waitUntil(lambda: attention.controller.result.text == USER_PROMPT + " again", timeout=WAIT_MS)
    attention.set_prompt(USER_PROMPT)
    qtbot.waitUntil(lambda: attention.controller.result.text == USER_PROMPT, timeout=WAIT_MS)
    wait_quiet(qtbot, window.runner)


# --- items 1-7: bad checkpoints through File → Open -------------------------------------------------

class RunsCode:
    """A pickle payload that would create `marker` if it were ever unpickled unsafely."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (exec, (f"open({self.marker!r}, 'w').close()",))


class TrainingState:
    """A custom class a training script might pickle next to its weights."""

    step = 100


def _hf_tiny():
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(vocab_size=300, n_positions=16, n_embd=32, n_layer=2, n_head=4)
    return transformers.GPT2LMHeadModel(cfg).eval()


def _weights(hf) -> dict:
    return {k: v.clone() for k, v in hf.state_dict().items() if k != "lm_head.weight"}


def _hf_folder(tmp_path, state: dict, config: dict) -> Path:
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(config))
    safetensors_torch.save_file(state, folder / "model.safetensors")
    return folder


def make_bad_source(case: str, tmp_path: Path) -> tuple[str, list[str]]:
    """(source to open, fragments the dialog must show: the problem, and the fix)."""
    hf = _hf_tiny()
    if case == "1-code-pickle":
        path = tmp_path / "ckpt.pt"
        torch.save({"model": hf.state_dict(), "model_args": {}, "hook": RunsCode(tmp_path / "code-ran")}, path)
        return str(path), ["refused", "run any code"]
    if case == "1-raw-pickle":  # pickle.dump at protocol 4: no zip, no torch header (issue 23)
        path = tmp_path / "model.pth"
        path.write_bytes(pickle.dumps({"model": hf.state_dict(), "hook": RunsCode(tmp_path / "code-ran")}, protocol=4))
        return str(path), ["refused", "asks to call `builtins.exec`", "Nothing was executed"]
    if case == "2-custom-class":
        path = tmp_path / "ckpt.pt"
        torch.save({"model": hf.state_dict(), "model_args": {}, "state": TrainingState()}, path)
        return str(path), ["custom class", "TrainingState"]
    if case == "3-truncated-safetensors":
        folder = _hf_folder(tmp_path, _weights(hf), hf.config.to_dict())
        blob = (folder / "model.safetensors").read_bytes()
        (folder / "model.safetensors").write_bytes(blob[: len(blob) // 2])
        return str(folder), ["corrupt file", "re-download"]
    if case == "3-random-bin":
        path = tmp_path / "model" / "pytorch_model.bin"
        path.parent.mkdir()
        (path.parent / "config.json").write_text(json.dumps(hf.config.to_dict()))
        path.write_bytes(random.Random(4096).randbytes(4096))  # seeded: its first bytes decide what it is taken for
        return str(path.parent), ["corrupt file", "re-download"]
    if case == "3-truncated-torch":  # a cut-short torch.save zip: our words, not torch's miniz text
        path = tmp_path / "ckpt.pt"
        torch.save({"model": hf.state_dict(), "model_args": {}}, path)
        path.write_bytes(path.read_bytes()[:20000])
        return str(path), ["corrupt file", "cut short", "re-download"]
    if case == "4-lying-header":
        path = tmp_path / "lies.safetensors"
        header = json.dumps({"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}}).encode()
        path.write_bytes(struct.pack("<Q", 10_000_000) + header + bytes(16))
        return str(path), ["corrupt file", "header claims"]
    if case == "5-nan-weights":
        state = _weights(hf)
        state["transformer.h.1.mlp.c_fc.weight"][0, :3] = float("nan")
        return str(_hf_folder(tmp_path, state, hf.config.to_dict())), ["NaN/Inf", "blocks.1.mlp.c_fc.weight"]
    if case == "6-shape-mismatch":
        config = dict(hf.config.to_dict(), vocab_size=256)
        return str(_hf_folder(tmp_path, _weights(hf), config)), ["shape mismatch", "embed.weight", "config.json"]
    if case == "7-hub-not-cached":
        return "gpt2-medium", ["not cached", "HF_HUB_OFFLINE", "local folder"]
    raise AssertionError(case)


LOAD_FAULTS = ["1-code-pickle", "1-raw-pickle", "2-custom-class", "3-truncated-safetensors", "3-random-bin",
               "3-truncated-torch", "4-lying-header",
               "5-nan-weights", "6-shape-mismatch", "7-hub-not-cached"]


@pytest.mark.parametrize("case", LOAD_FAULTS)
def test_fault_bad_checkpoint_opened_in_the_window_loses_nothing(qtbot, window, tmp_path, case):
    attention, config, generation = user_state(window, qtbot)
    before = snapshot(window, attention, config, generation)
    source, fragments = make_bad_source(case, tmp_path)
    window.load_model(source)
    qtbot.waitUntil(lambda: window.error_dialog is not None, timeout=WAIT_MS)
    wait_quiet(qtbot, window.runner)
    message = window.error_dialog.text()
    assert window.error_dialog.windowTitle() == "Could not load the model"
    for fragment in fragments:
        assert fragment in message, (fragment, message)
    assert "is still loaded" in message and "Traceback" not in message and "Please file an issue" not in message and "miniz" not in message
    assert not (tmp_path / "code-ran").exists()  # item 1: the payload never ran
    assert snapshot(window, attention, config, generation) == before  # nothing lost
    window.error_dialog.close()
    assert_still_running(qtbot, window, attention)


# --- item 8: a tampered tokenizer file, as the app would meet it -------------------------------------

def test_fault_tampered_tokenizer_is_reported_and_not_used(qtbot, runner, tiny_session, tmp_path, monkeypatch):
    import shutil

    import gptcore.io.tokenizer as tokenizer_module

    data = tmp_path / "data"
    shutil.copytree(tokenizer_module._data_dir(), data)
    blob = bytearray((data / "vocab.bpe").read_bytes())
    blob[len(blob) // 2] ^= 1
    (data / "vocab.bpe").write_bytes(bytes(blob))
    monkeypatch.setattr(tokenizer_module, "_data_dir", lambda: data)
    tokenizer_module.gpt2_tokenizer.cache_clear()  # the app's first use of the tokenizer happens now
    try:
        session = Session(tiny_session.model)  # a fresh session: no tokenizer built yet
        w = MainWindow(session, runner, settings=QSettings(str(tmp_path / "s.ini"), QSettings.Format.IniFormat))
        qtbot.addWidget(w)
        w.show()
        attention = w.show_panel("attention")
        attention.set_prompt("hello")
        qtbot.waitUntil(lambda: w.error_dialog is not None, timeout=WAIT_MS)
        wait_quiet(qtbot, runner)
        message = w.error_dialog.text()
        assert w.error_dialog.windowTitle() == "Tokenizer problem"
        assert "hash mismatch" in message and "not used" in message and "pip install --force-reinstall" in message
        assert session._tokenizer is None  # the tampered file was not turned into a tokenizer
        assert attention.controller.result is None and attention.view.prompt_text() == "hello"
        w.error_dialog.close()
        w.close()
    finally:
        monkeypatch.undo()
        tokenizer_module.gpt2_tokenizer.cache_clear()  # later tests build the real one again


# --- item 12: CUDA out of memory raised from the session, on the panels' own paths --------------------

def _oom(*_args, **_kwargs):
    raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 512.00 MiB (GPU 0; 7.79 GiB total)")


def test_fault_cuda_oom_in_the_attention_forward(qtbot, window, tiny_session, monkeypatch):
    attention, config, generation = user_state(window, qtbot)
    before = snapshot(window, attention, config, generation)
    monkeypatch.setattr(tiny_session.model, "forward", _oom)
    attention.set_prompt(USER_PROMPT + " longer")
    qtbot.waitUntil(lambda: window.error_dialog is not None, timeout=WAIT_MS)
    wait_quiet(qtbot, window.runner)
    message = window.error_dialog.text()
    assert window.error_dialog.windowTitle() == "Out of GPU memory"
    assert "--device cpu" in message and "smaller model" in message
    assert "out of memory" in attention.view.status_label.text().lower()
    assert attention.view.prompt_text() == USER_PROMPT + " longer"  # the user's text stays
    assert attention.controller.result.text == USER_PROMPT  # the last good picture stays
    monkeypatch.undo()
    window.error_dialog.close()
    after = snapshot(window, attention, config, generation)
    assert {k: v for k, v in after.items() if k not in ("prompt",)} == \
        {k: v for k, v in before.items() if k not in ("prompt",)}
    assert_still_running(qtbot, window, attention)


def test_fault_cuda_oom_during_generation(qtbot, window, tiny_session, monkeypatch):
    attention, config, generation = user_state(window, qtbot)
    generation.view.set_settings(max_new_tokens=50, temperature=0.0)
    settings = generation.view.settings()
    model = tiny_session.model
    real_forward = model.forward
    calls = []

    def fails_on_the_fourth_step(*args, **kwargs):
        # Count the generation loop's own (KV-cached) forwards only: under load the panel's
        # live next-token request can run a forward in between, and must not take the failure.
        if kwargs.get("kv_cache") is not None:
            calls.append(1)
            if len(calls) == 4:
                _oom()
        return real_forward(*args, **kwargs)

    monkeypatch.setattr(model, "forward", fails_on_the_fourth_step)
    with qtbot.waitSignal(generation.controller.generationFinished, timeout=WAIT_MS) as finished:
        generation.view.generate_button.click()
    qtbot.waitUntil(lambda: window.error_dialog is not None, timeout=WAIT_MS)
    wait_quiet(qtbot, window.runner)
    monkeypatch.undo()
    assert finished.args == ["error"]
    message = window.error_dialog.text()
    assert window.error_dialog.windowTitle() == "Out of GPU memory" and "--device cpu" in message
    assert "out of memory" in generation.view.stream_status.text().lower()
    shown = len(generation.view.stream.tokens())
    assert 1 <= shown < 50  # the tokens made before the failure stay on screen
    assert generation.view.generate_button.isEnabled() and not generation.controller.running
    assert generation.view.settings() == settings and tiny_session.model is model
    window.error_dialog.close()
    with qtbot.waitSignal(generation.controller.generationFinished, timeout=WAIT_MS) as finished:
        generation.view.generate_button.click()  # and generating works again
    assert finished.args == ["done"] and len(generation.controller.generated_ids) == 50
    wait_quiet(qtbot, window.runner)


# --- item 13: closing the window during a generation or a residual sweep ----------------------------

CLOSE_DRIVER = r'''
import sys, time
import torch
torch.set_num_threads(1)
from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QApplication
import explorer.app as explorer_app
from explorer.shell.window import MainWindow
from explorer.session.core import Session

mode = sys.argv[1]

def close(w):
    print(f"CLOSE {time.time():.3f}", file=sys.stderr, flush=True)
    w.close()

def poll():
    app = QApplication.instance()
    w = next((t for t in app.topLevelWidgets() if isinstance(t, MainWindow) and t.isVisible()), None)
    if w is None or w.session is None or not w.session.has_model or w.runner.busy:
        return QTimer.singleShot(20, poll)
    if w.session.config.n_layer != 2:  # swap the GPT-2-sized stand-in for a small model first
        w.session.build(Session.tiny().config.to_dict(), seed=0)  # the window and panels follow its event
        return QTimer.singleShot(20, poll)
    if mode == "generation":
        pane = w.show_panel("generation").controller
        pane.view.set_settings(max_new_tokens=100000, temperature=1.0)
        pane.view.generate_button.click()
        busy = lambda: pane.running and pane._run.shown >= 2
    else:
        view = w.show_panel("residual")
        view.view.seeds_box.setValue(8)
        view.view.run_button.click()
        busy = lambda: view.view.progress.value() >= 1
    def wait_busy():
        if not busy():
            return QTimer.singleShot(10, wait_busy)
        assert w.runner.busy, "the work ended before the window could be closed"
        close(w)
    wait_busy()

QTimer.singleShot(0, poll)
sys.exit(explorer_app.main(["--device", "cpu"]))
'''


@pytest.mark.parametrize("mode", ["generation", "residual"])
def test_fault_closing_during_generation_or_residual_sweep_exits_cleanly(tmp_path, mode):
    from explorer.app import QUIT_WAIT_MS

    driver = tmp_path / "driver.py"
    driver.write_text(CLOSE_DRIVER, encoding="utf-8")
    env = dict(os.environ, QT_QPA_PLATFORM="offscreen", HF_HUB_OFFLINE="1", HF_HOME=str(tmp_path / "hf"),
               XDG_CONFIG_HOME=str(tmp_path / "config"), XDG_STATE_HOME=str(tmp_path / "state"),
               XDG_DATA_HOME=str(tmp_path / "data"), XDG_CACHE_HOME=str(tmp_path / "cache"))
    done = subprocess.run([sys.executable, str(driver), mode], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert any(line.startswith("CLOSE ") for line in done.stderr.splitlines()), done.stderr[-3000:]
    assert "QThread" not in done.stderr and "Fatal" not in done.stderr and "Traceback" not in done.stderr
    log = (tmp_path / "state" / "gpt-explorer" / "log" / "gpt-explorer.log").read_text(encoding="utf-8")
    quit_lines = [line for line in log.splitlines() if "quit: background work" in line]
    assert len(quit_lines) == 1 and "abandoned" not in quit_lines[0], log[-3000:]
    waited = float(quit_lines[0].rsplit("after ", 1)[1].split()[0])
    assert waited <= QUIT_WAIT_MS / 1000 + 0.5, quit_lines[0]  # within the 2 s the issue allows


# --- not on the list: a vocab_size below the tokenizer's ids ------------------------------------------

@pytest.fixture
def small_vocab_context(runner):
    return PanelContext(session=Session.tiny(vocab_size=500), runner=runner, window=None, prompt=None)


VOCAB_FIX = ["outside this model", "vocab_size=500"]  # the problem (HTML may escape the apostrophe)


def test_fault_small_vocab_model_explains_out_of_vocabulary_text_in_attention(qtbot, small_vocab_context):
    session = small_vocab_context.session
    view = PanelPage(small_vocab_context, AttentionController)
    qtbot.addWidget(view)
    view.set_prompt("Hello world")  # 'Hello' is id 15496
    qtbot.waitUntil(lambda: "vocabulary" in view.view.status_label.text(), timeout=WAIT_MS)
    wait_quiet(qtbot, small_vocab_context.runner)
    status = view.view.status_label.text()
    assert all(f in status for f in VOCAB_FIX) and "index out of range" not in status
    assert view.view.prompt_text() == "Hello world"
    low = "a b c d"  # single-byte and early-merge tokens, all below 500
    assert max(session.encode(low)) < 500
    view.set_prompt(low)  # the fix the message suggests works
    qtbot.waitUntil(lambda: view.controller.result is not None and view.controller.result.text == low,
                    timeout=WAIT_MS)
    wait_quiet(qtbot, small_vocab_context.runner)


def test_fault_small_vocab_model_explains_out_of_vocabulary_text_in_generation(qtbot, small_vocab_context):
    session = small_vocab_context.session
    page = PanelPage(small_vocab_context, GenerationController)
    qtbot.addWidget(page)
    pane = page.controller
    pane.view.set_prompt_text("Hello world")
    pane.refresh_logits()
    qtbot.waitUntil(lambda: "vocabulary" in pane.view.chart.note.text(), timeout=WAIT_MS)
    wait_quiet(qtbot, small_vocab_context.runner)
    note = pane.view.chart.note.text()
    assert all(f in note for f in VOCAB_FIX) and "index out of range" not in note
    with qtbot.waitSignal(pane.generationFinished, timeout=WAIT_MS) as finished:
        assert pane.start_generation()
    assert finished.args == ["error"]
    assert all(f in pane.view.stream_status.text() for f in VOCAB_FIX)
    assert pane.view.generate_button.isEnabled() and pane.view.prompt_text() == "Hello world"
    # The session refuses before the model runs, for both paths, naming the token.
    with pytest.raises(ValueError, match=r"token 'Hello' \(id 15,496\) is outside"):
        session.generation.next_token("Hello world")
    with pytest.raises(ValueError, match="<\\|endoftext\\|>"):  # an empty prompt starts from id 50256
        session.generation.next_token("")
    pane.view.set_prompt_text("a b c")
    pane.view.set_settings(max_new_tokens=3, temperature=0.0)
    pane.refresh_logits()
    qtbot.waitUntil(lambda: pane.logits is not None, timeout=WAIT_MS)
    with qtbot.waitSignal(pane.generationFinished, timeout=WAIT_MS) as finished:
        assert pane.start_generation()
    assert finished.args == ["done"] and all(0 <= t < 500 for t in pane.generated_ids)
    wait_quiet(qtbot, small_vocab_context.runner)


# --- not on the list: block_size 1 ------------------------------------------------------------------

def test_fault_block_size_one_model_works_in_attention_and_generation(qtbot, runner):
    session = Session.tiny(block_size=1)
    ctx = PanelContext(session=session, runner=runner, window=None, prompt=None)
    view = PanelPage(ctx, AttentionController)
    qtbot.addWidget(view)
    view.set_prompt("The quick brown fox")
    qtbot.waitUntil(lambda: view.controller.result is not None and view.controller.result.text == "The quick brown fox",
                    timeout=WAIT_MS)
    result = view.controller.result
    assert result.n_tokens == 1 and result.cropped == len(session.encode("The quick brown fox")) - 1
    np.testing.assert_allclose(result.thumbnails, 1.0)  # one token attends only to itself
    assert not view.view.crop_note.isHidden()
    page = PanelPage(ctx, GenerationController)
    qtbot.addWidget(page)
    pane = page.controller
    pane.view.set_prompt_text("The quick brown fox")
    pane.view.set_settings(max_new_tokens=3, temperature=0.0)
    pane.refresh_logits()
    # The pane's own first request (the empty prompt) may land first: one run in flight, then this one.
    qtbot.waitUntil(lambda: pane.logits is not None and pane.distribution is not None
                    and not pane.logits.context.from_start, timeout=WAIT_MS)
    assert pane.logits.context.ids.tolist() == session.encode("The quick brown fox")[-1:]
    with qtbot.waitSignal(pane.generationFinished, timeout=WAIT_MS) as finished:
        assert pane.start_generation()
    assert finished.args == ["done"] and len(pane.generated_ids) == 3
    # Greedy with a one-token window: each token depends on the one before it only.
    with torch.no_grad():
        prev, expected = session.encode("The quick brown fox")[-1], []
        for _ in range(3):
            prev = int(session.model(torch.tensor([[prev]]))[0, -1].argmax())
            expected.append(prev)
    assert pane.generated_ids == expected
    wait_quiet(qtbot, runner)


# --- not on the list: swapping the model during a residual sweep ----------------------------------------

def test_fault_model_swap_during_residual_sweep_draws_the_new_models_curve(qtbot, runner, tmp_path):
    from explorer.controllers.base import PanelPage
    from explorer.controllers.residual import ResidualController
    from gptcore.interp.probes.residual import model_residual_norms

    def trained_folder(name, seed):
        torch.manual_seed(seed)
        cfg = transformers.GPT2Config(vocab_size=50257, n_positions=128, n_embd=64, n_layer=2, n_head=4)
        transformers.GPT2LMHeadModel(cfg).save_pretrained(tmp_path / name)
        return str(tmp_path / name)

    session = Session(device="cpu")
    session.load(trained_folder("first", 1))
    first_model = session.model
    view = PanelPage(PanelContext(session=session, runner=runner), ResidualController, autorun=False)
    qtbot.addWidget(view)
    p = view.view
    p.set_shape(2, 64, 4)
    p.batch_box.setValue(2)
    p.length_box.setValue(8)
    p.seeds_box.setValue(4)
    references = []  # every reference curve the controller hands the panel, in order
    set_reference = p.set_reference

    def spy(x, y=None, name=""):
        references.append(None if x is None else (np.asarray(y, float), name))
        set_reference(x, y, name)

    p.set_reference = spy
    second = trained_folder("second", 2)
    p.run_button.click()
    # The swap lands after the sweep measured the first model's curve but before its result
    # reached the GUI thread (no events are processed while we wait for the worker).
    deadline = time.monotonic() + WAIT_MS / 1000
    while runner.active_count() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert runner.busy  # finished in the worker, not yet delivered
    swapped_at = len(references)
    session.load(second)  # the user opens another trained model meanwhile (the panel follows its event)
    qtbot.waitUntil(lambda: "norms" in view.controller.results and not runner.busy, timeout=WAIT_MS)
    want = model_residual_norms(session.model, batch=2, length=8, seed=0)
    stale = model_residual_norms(first_model, batch=2, length=8, seed=0)
    assert not np.allclose(want, stale, rtol=1e-3)
    after = [r for r in references[swapped_at:] if r is not None]
    assert after, "the new model's own curve was never drawn"
    for y, _name in after:
        assert not np.allclose(y, stale, rtol=1e-6), "drew the previous model's curve after the swap"
    np.testing.assert_allclose(after[-1][0], want, rtol=1e-5)  # the last drawn is the new model's
    assert "second" in after[-1][1]
    assert after[-1][1] in p.curve_names()  # drawn, under the name the legend gives the loaded model


# --- not on the list: --device cuda on a machine without a GPU -------------------------------------------

def test_fault_device_cuda_without_a_gpu(tiny_session, tmp_path, monkeypatch):
    """On every machine: torch is told there is no GPU (in this process by replacing its answer, in
    the app's by hiding every GPU with CUDA_VISIBLE_DEVICES)."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    before = tiny_session.model
    with pytest.raises(ValueError, match="CUDA was requested but is not available.*use --device cpu"):
        tiny_session.load(str(tmp_path / "whatever"), device="cuda")
    assert tiny_session.model is before
    env = dict(os.environ, QT_QPA_PLATFORM="offscreen", HF_HUB_OFFLINE="1", XDG_STATE_HOME=str(tmp_path / "state"),
               CUDA_VISIBLE_DEVICES="")
    done = subprocess.run([sys.executable, "-m", "explorer", "--device", "cuda"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=240)
    assert done.returncode == 2
    assert "CUDA" in done.stderr and "--device cpu" in done.stderr and "Traceback" not in done.stderr
