"""The run every label names is the run every panel shows (issue 39, items 4-6):

- `--run RUN` makes the run's latest kept step the session's model from the start (not the default
  model), `--panel features` with it keeps Features in front, and the README's Features screenshot
  command renders that run's model;
- "Use this model" keeps the run: the same `ModelInfo.run` facts as the step slider gives, the Train
  panel does not call its own weights "another model", Features finds the step's SAE and reads the
  run's data;
- after going back to an earlier step (leaving "latest"), Start follows the new run: the banner and
  the status bar name it once it keeps a step.

Run folders are written with gptcore's own writers (no training) except where Start runs one."""
from __future__ import annotations

import subprocess
import sys
import types
from pathlib import Path

import pytest

from explorer.session.results import RunStep
from tests.explorer.test_session_features import _char_run
from tests.explorer.test_shell_app import ROOT, _env
from tests.explorer.test_train_panel import TINY

WAIT = 240_000
pytestmark = pytest.mark.usefixtures("single_torch_thread")


def _ckpt(root, step: int):
    """ckpt.pt as the run writes it (gptcore's save_checkpoint), of _char_run's model shape, at `step`."""
    import torch

    from gptcore.model.config import GPTConfig
    from gptcore.model.gpt import GPT
    from gptcore.training.checkpoint import save_checkpoint
    from gptcore.training.config import TrainConfig

    model = GPT(GPTConfig(vocab_size=5, block_size=32, n_layer=1, n_head=2, n_embd=16), init="gpt2", seed=99)
    trainer = types.SimpleNamespace(model=model, config=TrainConfig(), iter_num=step, best_val_loss=1.0,
                                    optimizer=torch.optim.AdamW(model.parameters()))
    save_checkpoint(root / "ckpt.pt", trainer)
    return model


@pytest.fixture
def fresh_window(qtbot, runner, tmp_path):
    """The app's window as `gpt-explorer --run RUN --panel features` makes it: no session yet."""
    from PySide6.QtCore import QSettings

    from explorer.shell.window import MainWindow

    w = MainWindow(None, runner, settings=QSettings(str(tmp_path / "s.ini"), QSettings.Format.IniFormat),
                   panel="features")
    qtbot.addWidget(w)
    w.show()
    yield w
    qtbot.waitUntil(lambda: not runner.busy, timeout=WAIT)
    w.close()


def test_the_run_option_opens_the_runs_latest_step_and_keeps_the_chosen_panel_in_front(
        qtbot, fresh_window, tmp_path):
    w, root = fresh_window, tmp_path / "run"
    _char_run(root)
    w.open_run(str(root), show=False)  # what app.main does with --run
    w.start(None, "cpu", run=str(root))
    qtbot.waitUntil(lambda: w.session is not None and w.session.info.run is not None, timeout=WAIT)
    session = w.session
    assert session.info.run == RunStep(str(root), "gpt2", 20, max_iters=20, schemes=1)  # never the default model
    assert w.current_panel_name() == "features"
    features = w.panel("features").controller
    qtbot.waitUntil(lambda: features.table is not None, timeout=WAIT)
    assert features.table.corpus.startswith("the run's data")  # the run's own text, its characters
    assert "Training run run" in w.banner.text() and "step 20 of 20" in w.status_labels["model"].text()
    train = w.panel("train", create=False)  # built behind Features: it follows the run from the start
    assert train is not None
    qtbot.waitUntil(lambda: train.controller.follower is not None and not w.runner.busy, timeout=WAIT)
    version = session.version
    train.controller.draw()  # following "latest": the step in the session is already the latest one
    qtbot.waitUntil(lambda: not w.runner.busy, timeout=WAIT)
    assert session.version == version and train.controller.shown == (str(root), "gpt2", 20)


def test_the_readme_features_screenshot_command_renders_the_runs_model(tmp_path):
    root = tmp_path / "run"
    _char_run(root)
    out = tmp_path / "features.png"
    done = subprocess.run([sys.executable, "-m", "explorer", "--screenshot", str(out), "--run", str(root),
                           "--panel", "features", "--size", "900x600", "--device", "cpu"],  # cpu: the suite names its device
                          cwd=ROOT, env=_env(tmp_path),
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "panel features, model trained · step 20 of 20" in done.stdout and out.is_file()


@pytest.mark.parametrize("ckpt_step", [20, 15])  # a kept step (read from its file), and one that was not kept
def test_use_this_model_keeps_the_run_its_sae_and_its_data(qtbot, window, tmp_path, monkeypatch, ckpt_step):
    import torch

    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    root = tmp_path / "run"
    _char_run(root)
    saved = _ckpt(root, ckpt_step)
    session = window.session
    window.open_run(str(root))
    train = window.panel("train").controller
    qtbot.waitUntil(lambda: session.info.run is not None and session.info.run.step == 20, timeout=WAIT)
    if ckpt_step == 20:  # an SAE trained on the step the checkpoint holds
        session.features.train(0, "resid", width=16, k=2, tokens=4096, corpus="run")
    train.view.use_button.click()
    want = RunStep(str(root), "gpt2", ckpt_step, max_iters=20, schemes=1)
    qtbot.waitUntil(lambda: session.info.run == want and not window.runner.busy, timeout=WAIT)
    assert f"step {ckpt_step} of 20" in window.status_labels["model"].text() and "Training run run" in window.banner.text()
    assert train.view.step_label.text().startswith(f"step {ckpt_step} shown")  # not "another model is loaded"
    assert session.token_strings(session.encode("ab")) == ["a", "b"]  # the run's characters
    if ckpt_step == 15:  # read from ckpt.pt: its weights
        torch.testing.assert_close(session.model.state_dict()["blocks.0.attn.c_attn.weight"],
                                   saved.state_dict()["blocks.0.attn.c_attn.weight"])
    else:
        assert session.features.saved() == (0, "resid")  # Features finds the step's SAE
    from explorer.session.features.store import corpus_ids

    assert corpus_ids(session, "run")[2].startswith("the run's data")


def test_start_after_leaving_latest_follows_the_new_run_in_the_banner_and_status_bar(qtbot, window, tmp_path):
    root = tmp_path / "run"
    _char_run(root)
    window.open_run(str(root))
    c = window.panel("train").controller
    qtbot.waitUntil(lambda: window.session.info.run is not None and window.session.info.run.step == 20, timeout=WAIT)
    c.view.choose_step(10)  # back to an earlier step: "latest" is unticked
    qtbot.waitUntil(lambda: window.session.info.run.step == 10, timeout=WAIT)
    assert not c.view.follows_latest()
    c.start_with(dict(TINY, max_iters=30, eval_interval=10))  # "of 30": its own steps never read "step 10 of 20"
    new_root = c.follower.root
    qtbot.waitUntil(lambda: window.session.info.run is not None and Path(window.session.info.run.root) == new_root,
                    timeout=WAIT)
    assert c.view.follows_latest()
    qtbot.waitUntil(lambda: f"Training run {new_root.name}</b>" in window.banner.text(), timeout=WAIT)
    assert "Training run run</b>" not in window.banner.text()
    assert "step 10 of 20" not in window.status_labels["model"].text()  # the old run's step is gone from the labels
    assert " of 30" in window.status_labels["model"].text()  # ...and the new run's is there
    qtbot.waitUntil(lambda: not c.process.running, timeout=WAIT)
