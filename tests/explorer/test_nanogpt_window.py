"""Issue 27: nanoGPT's char ckpt.pt opened number-only without a word, and screenshot mode with a
text --prompt waited 120 s and wrote nothing. Now the window finds meta.pkl from the checkpoint's
config['dataset'] or asks for it (MetaDialog), and screenshot mode exits 2 at once naming why."""
from __future__ import annotations

import pickle
from pathlib import Path

import pytest
import torch

from gptcore.io.char_tokenizer import CharTokenizer
from gptcore.io.folder_tokenizer import IdTokenizer

CHARS = sorted(set("the cat sat on a mat; dog ran far.\n"))
WAIT_MS = 30000

pytestmark = pytest.mark.usefixtures("single_torch_thread")


def write_meta(folder: Path) -> Path:
    """shakespeare_char's prepare.py meta.pkl for CHARS."""
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / "meta.pkl", "wb") as f:
        pickle.dump({"vocab_size": len(CHARS), "itos": dict(enumerate(CHARS)),
                     "stoi": {c: i for i, c in enumerate(CHARS)}}, f)
    return folder / "meta.pkl"


def write_nanogpt_ckpt(out_dir: Path, dataset: str) -> Path:
    """nanoGPT's train.py ckpt.pt of a 1-layer char model (random weights), config['dataset'] set."""
    from gptcore.model.config import GPTConfig
    from gptcore.model.gpt import GPT
    from gptcore.training.checkpoint import to_nanogpt_names

    args = dict(n_layer=1, n_head=2, n_embd=16, block_size=32, bias=False, vocab_size=len(CHARS), dropout=0.0)
    model = GPT(GPTConfig(**args, activation="gelu"), seed=0)
    out_dir.mkdir(parents=True, exist_ok=True)
    torch.save({"model": to_nanogpt_names(model.state_dict()), "optimizer": {"state": {}, "param_groups": []},
                "model_args": args, "iter_num": 100, "best_val_loss": 1.5,
                "config": {"dataset": dataset, "out_dir": str(out_dir)}}, out_dir / "ckpt.pt")
    return out_dir / "ckpt.pt"


def test_the_window_asks_for_a_missing_meta_pkl_and_reads_text_with_it(qtbot, window, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    ckpt = write_nanogpt_ckpt(tmp_path / "out-shk", "shk_char")  # no data/shk_char anywhere
    meta = write_meta(tmp_path / "elsewhere")
    window.load_model(str(ckpt))
    qtbot.waitUntil(lambda: window.meta_dialog is not None, timeout=WAIT_MS)
    dialog = window.meta_dialog
    assert isinstance(window.session.tokenizer, IdTokenizer)  # opened, number-only, and it says why
    assert "'shk_char'" in dialog.reason.text() and "data/shk_char/meta.pkl" in dialog.reason.text()
    dialog.grab().save(str(tmp_path / "meta_dialog.png"))
    dialog.choose(str(meta))
    qtbot.waitUntil(lambda: isinstance(window.session.tokenizer, CharTokenizer) and not window.runner.busy,
                    timeout=WAIT_MS)
    assert window.session.encode("dog") == [CHARS.index(c) for c in "dog"]
    assert window.meta_dialog is None


def test_declining_keeps_token_ids_and_says_so(qtbot, window, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    ckpt = write_nanogpt_ckpt(tmp_path / "out-shk", "shk_char")
    window.load_model(str(ckpt))
    qtbot.waitUntil(lambda: window.meta_dialog is not None, timeout=WAIT_MS)
    window.meta_dialog.ids_button.click()
    qtbot.waitUntil(lambda: window.meta_dialog is None and not window.runner.busy, timeout=WAIT_MS)
    assert isinstance(window.session.tokenizer, IdTokenizer)
    assert "token ids are shown" in window.statusBar().currentMessage()


def test_found_next_to_the_out_dir_no_question_is_asked(qtbot, window, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write_meta(tmp_path / "nanoGPT" / "data" / "shk_char")
    ckpt = write_nanogpt_ckpt(tmp_path / "nanoGPT" / "out-shk", "shk_char")
    before = window.session.model
    window.load_model(str(ckpt))
    qtbot.waitUntil(lambda: window.session.model is not before and not window.runner.busy, timeout=WAIT_MS)
    assert isinstance(window.session.tokenizer, CharTokenizer) and window.meta_dialog is None


def test_screenshot_mode_with_a_prompt_the_model_cannot_read_exits_2_naming_why(tmp_path, run_screenshot):
    ckpt = write_nanogpt_ckpt(tmp_path / "nanoGPT" / "out-shk", "shk_char")
    out = tmp_path / "shot.png"
    args = (out, "attention", "1000x700", "--model", str(ckpt), "--prompt", "dog")
    done = run_screenshot(*args, OMP_NUM_THREADS="1")
    assert done.returncode == 2 and not out.exists() and "Traceback" not in done.stderr
    assert "--prompt 'dog' cannot be read" in done.stderr and "type numbers separated by spaces" in done.stderr
    assert "shk_char" in done.stderr and "meta.pkl" in done.stderr  # why the model is number-only
    write_meta(tmp_path / "nanoGPT" / "data" / "shk_char")  # now found beside the out_dir: text reads
    done = run_screenshot(*args, OMP_NUM_THREADS="1")
    assert done.returncode == 0, done.stderr
    assert out.stat().st_size > 10_000
