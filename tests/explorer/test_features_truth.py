"""What an SAE is and says stays true (issue 39, items 1-3, 8, 10):

- its metrics belong to the saved SAE: measured once on the model itself, saved beside it with the
  text they were measured on, and shown whenever it is shown (after a clamp and Reset, at another
  step of the run, in a new session); an SAE trained again gets its own;
- the walk over training leaves the SAE the user trained as it was and writes only the other steps
  (their cfg.json naming their own step), and its chart shows when it ends — also in a new session,
  from what is on disk, and from the steps' SAEs alone when the series file is gone;
- an SAE is trained on the model itself whatever edit is held for viewing (the same SAE as without
  the edit, which stays in force), and an edit made during the walk does not drop the walk;
- a feature index does not carry over between dictionaries; the walk lets other work through between
  its forwards."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from explorer.session.core import Session
from explorer.session.features.store import METRICS_FILE, read_metrics
from tests.explorer.test_session_features import _char_run

WAIT = 240_000
pytestmark = pytest.mark.usefixtures("single_torch_thread")


def _weights(folder) -> bytes:
    return (Path(folder) / "sae_weights.safetensors").read_bytes()


# -- metrics ------------------------------------------------------------------------------------------
def test_metrics_are_saved_beside_the_sae_and_come_back_with_it_whatever_is_edited(corpus, monkeypatch):
    import gptcore

    session = Session.tiny(block_size=64)
    trained = session.features.train(1, "resid", width=64, k=4, tokens=16_384, corpus="file", path=corpus)
    folder = trained.source.folder
    saved, on = read_metrics(folder)
    assert saved == trained.metrics and saved["l0"] == pytest.approx(4.0)
    assert "held-out tokens of corpus.txt" in on and trained.metrics_on == on
    record = json.loads((Path(folder) / METRICS_FILE).read_text())
    assert record["measured_on"] == on

    real = gptcore.sae_metrics

    def never(*_a, **_k):
        raise AssertionError("metrics measured again: they were saved beside the SAE")

    monkeypatch.setattr(gptcore, "sae_metrics", never)
    session.features.edit({3: 5.0})  # a clamp: the table is measured on the edited model, the metrics stay the SAE's
    assert session.features.use("sae", 1, "resid", corpus="file", path=corpus).metrics == saved
    session.interp.set_ablation(mlps=[0])
    assert session.features.use("sae", 1, "resid", corpus="file", path=corpus).metrics == saved
    session.interp.clear_ablation()
    again = Session.tiny(block_size=64)  # a restart: the same weights (seed 0), a new session
    assert again.features.use("sae", 1, "resid", corpus="file", path=corpus).metrics == saved
    monkeypatch.setattr(gptcore, "sae_metrics", real)
    retrained = session.features.train(1, "resid", width=64, k=4, tokens=8192, corpus="file", path=corpus, seed=3)
    assert retrained.source.folder == folder and read_metrics(folder)[0] == retrained.metrics != saved


def test_an_sae_without_saved_metrics_is_measured_once_on_the_model_itself(corpus):
    session = Session.tiny(block_size=64)
    folder = Path(session.features.train(0, "mlp", width=32, k=2, tokens=8192, corpus="file", path=corpus).source.folder)
    clean = read_metrics(folder)[0]
    (folder / METRICS_FILE).unlink()  # an SAE saved before metrics were kept
    session.interp.set_ablation(mlps=[0])  # the site itself zeroed: on the edited model the metrics would be nonsense
    table = session.features.use("sae", 0, "mlp", corpus="file", path=corpus)
    assert table.metrics == pytest.approx(clean) and read_metrics(folder)[0] == table.metrics


# -- the model itself -------------------------------------------------------------------------------
def test_an_sae_trained_under_an_ablation_is_the_one_trained_on_the_model_itself(corpus):
    plain = Session.tiny(block_size=64)
    edited = Session.tiny(block_size=64)
    want = plain.features.train(0, "mlp", width=32, k=2, tokens=8192, corpus="file", path=corpus)
    edited.interp.set_ablation(mlps=[0])  # layer 0's MLP ablated in Attribution: its output is all zeros
    said = []
    got = edited.features.train(0, "mlp", width=32, k=2, tokens=8192, corpus="file", path=corpus,
                                progress=lambda d, t, m: said.append(m))
    from gptcore import load_sae

    a, b = load_sae(want.source.folder), load_sae(got.source.folder)
    torch.testing.assert_close(a.W_dec, b.W_dec, rtol=0, atol=0)  # the same rows, the same seed: the same SAE
    assert any("read from the model itself (1 MLP ablated set aside)" in m for m in said)
    ids = torch.tensor([edited.encode("the quick brown fox")])
    with torch.no_grad():
        zeros = []
        with edited.model.hooks([("blocks.0.hook_mlp_out", lambda x, hp: zeros.append(x.abs().max()) or x)]):
            edited.model(ids)
    assert float(zeros[0]) == 0.0  # the ablation is back in force for every panel


# -- the walk over training ---------------------------------------------------------------------------
def _run_session(tmp_path):
    root = tmp_path / "run"
    _char_run(root)
    session = Session.tiny()
    follower = session.training.open(root)
    session.training.show_step(follower, "gpt2", 20)
    return root, session, follower


def test_the_walk_keeps_the_users_sae_writes_the_other_steps_and_names_their_steps(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    root, session, follower = _run_session(tmp_path)
    session.training.show_step(follower, "gpt2", 10)  # trained in the middle of the run: the walk goes both ways
    trained = session.features.train(0, "resid", width=32, k=4, tokens=8192, corpus="run")
    before = _weights(trained.source.folder)
    cfg_before = (root / "sae" / "gpt2-step000010-L0-resid-w32-k4" / "cfg.json").read_text()
    over = session.features.over_training(trained.source.folder, tokens=8192 * 5)
    assert list(over.steps) == [0, 10, 20]
    assert _weights(trained.source.folder) == before  # the SAE the user trained, as trained
    assert (root / "sae" / "gpt2-step000010-L0-resid-w32-k4" / "cfg.json").read_text() == cfg_before
    for step in (0, 20):
        cfg = json.loads((root / "sae" / f"gpt2-step{step:06d}-L0-resid-w32-k4" / "cfg.json").read_text())
        name = cfg["metadata"]["model_name"]
        assert f"step {step} of 20" in name and "step 10" not in name and name.startswith("training run run:")
    np.testing.assert_allclose(over.density[1], trained.density, atol=1e-6)  # the table's sample and numbers


def test_a_new_session_charts_the_walk_from_disk_and_from_the_steps_saes_alone(tmp_path, monkeypatch):
    from explorer.session.features.store import over_training_file

    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    root, session, _follower = _run_session(tmp_path)
    trained = session.features.train(0, "resid", width=32, k=4, tokens=8192, corpus="run")
    over = session.features.over_training(trained.source.folder, tokens=8192 * 5)
    restarted = Session.tiny()  # a new session on the same run
    follower = restarted.training.open(root)
    restarted.training.show_step(follower, "gpt2", 20)
    table = restarted.features.use("sae", 0, "resid", corpus="run")
    assert table.source.lineage == trained.source.lineage and restarted.features.over_training_of(0, "resid") is None
    again = restarted.features.saved_over_training()  # the series the walk saved
    np.testing.assert_array_equal(again.steps, over.steps)
    np.testing.assert_allclose(again.density, over.density)
    np.testing.assert_array_equal(again.formed, over.formed)
    assert again.labels == over.labels
    assert restarted.features.over_training_of(0, "resid", 32, 4) is again
    over_training_file(restarted.info.run, 0, "resid", 32, 4).unlink()  # a walk cut short: only the SAEs are there
    third = Session.tiny()
    third.training.show_step(third.training.open(root), "gpt2", 20)
    third.features.use("sae", 0, "resid", corpus="run")
    measured = third.features.saved_over_training()
    np.testing.assert_allclose(measured.density, over.density, atol=1e-6)
    assert measured.labels == over.labels
    third.features.train(0, "resid", width=32, k=4, tokens=8192, corpus="run", seed=5)  # trained again: a new SAE
    fourth = Session.tiny()
    fourth.training.show_step(fourth.training.open(root), "gpt2", 20)
    fourth.features.use("sae", 0, "resid", corpus="run")
    assert fourth.features.saved_over_training() is None  # the other steps' SAEs came from the old one's walk


def test_the_walk_lets_waiting_work_through_between_its_forwards(tmp_path, monkeypatch):
    from explorer.session.features import stats

    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    root, session, _follower = _run_session(tmp_path)
    trained = session.features.train(0, "resid", width=32, k=4, tokens=8192, corpus="run")
    forwards, reports = [], []
    real = stats.hook_rows

    def counted(model, ids, hook, cancel=None, chunk=32):
        def check():
            forwards.append(len(reports))  # how many reports came before each forward
            return cancel() if cancel is not None else False

        return real(model, ids, hook, check, chunk)

    monkeypatch.setattr(stats, "hook_rows", counted)
    session.features.over_training(trained.source.folder, tokens=8192 * 5,
                                   progress=lambda d, t, m: reports.append(m))
    assert forwards and all(a < b for a, b in zip(forwards, forwards[1:]))  # a report (a yield) before every forward


# -- the panel -------------------------------------------------------------------------------------------
def test_the_panel_keeps_the_metrics_the_walk_survives_an_edit_and_its_tab_opens_when_it_ends(
        qtbot, window, tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    root = tmp_path / "run"
    _char_run(root)
    window.open_run(str(root))
    qtbot.waitUntil(lambda: window.session.info.run is not None and window.session.info.run.step == 20, timeout=WAIT)
    window.actions["panel_features"].trigger()
    c = window.panel("features").controller
    view = c.view
    qtbot.waitUntil(lambda: c.table is not None and c.detail is not None, timeout=WAIT)
    neuron = (c.detail.feature + 1) % len(c.table.ids)
    with qtbot.waitSignal(c.detailed, timeout=WAIT):
        view.featureSelected.emit(neuron)
    with qtbot.waitSignal(c.drawn, timeout=WAIT, check_params_cb=lambda t: t.source.kind == "sae"):
        view.trainRequested.emit(dict(layer=0, site="resid", width=32, k=4, tokens=8192, corpus="run", path=""))
    from explorer.controllers.features import _busiest

    qtbot.waitUntil(lambda: c.detail.feature == c.selected, timeout=WAIT)
    assert c.selected == _busiest(c.table)  # neuron `neuron`'s index was not carried into the SAE
    before = _weights(c.table.source.folder)
    # an edit made while the walk runs: the walk goes on (it reads each step from the run itself)
    window.ctx.change_ablation(lambda s: s.interp.set_ablation(mlps=[0]), on_error=lambda e: None)
    qtbot.waitUntil(lambda: not window.runner.is_running("features-over-training"), timeout=WAIT)
    qtbot.waitUntil(lambda: view.detail.tabs.isTabEnabled(1), timeout=WAIT)  # no click needed
    assert _weights(c.table.source.folder) == before
    assert "explained variance" in view.metrics.text()
    feature = c.detail.feature
    with qtbot.waitSignal(c.drawn, timeout=WAIT):
        view.editRequested.emit(feature, 4.0)  # Clamp
    assert "explained variance" in view.metrics.text() and c.detail is not None
    window.status_bar.ablation_label.linkActivated.emit("reset")
    qtbot.waitUntil(lambda: not window.session.interp.ablation.active and not window.runner.busy, timeout=WAIT)
    assert "explained variance" in view.metrics.text()
    qtbot.waitUntil(lambda: c.detail is not None and c.detail.feature == feature, timeout=WAIT)  # same dictionary
    train = window.panel("train").controller
    train.view.choose_step(10)  # another step: its own SAE (the walk's), with its own metrics
    qtbot.waitUntil(lambda: c.table is not None and "step000010" in c.table.source.folder
                    and not window.runner.busy, timeout=WAIT)
    assert "explained variance" in view.metrics.text() and read_metrics(c.table.source.folder) is not None
    qtbot.waitUntil(lambda: view.detail.tabs.isTabEnabled(1), timeout=WAIT)


def test_a_new_window_on_the_run_opens_the_over_training_tab_from_disk(qtbot, runner, tmp_path, monkeypatch):
    from PySide6.QtCore import QSettings

    from explorer.shell.window import MainWindow

    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    root, session, _follower = _run_session(tmp_path)
    trained = session.features.train(0, "resid", width=32, k=4, tokens=8192, corpus="run")
    session.features.over_training(trained.source.folder, tokens=8192 * 5)  # the walk, in an earlier session
    w = MainWindow(Session.tiny(), runner, settings=QSettings(str(tmp_path / "s.ini"), QSettings.Format.IniFormat))
    qtbot.addWidget(w)
    w.show()
    w.open_run(str(root))
    qtbot.waitUntil(lambda: w.session.info.run is not None and w.session.info.run.step == 20, timeout=WAIT)
    w.actions["panel_features"].trigger()
    c = w.panel("features").controller
    qtbot.waitUntil(lambda: c.table is not None and c.table.source.kind == "sae", timeout=WAIT)  # reopened
    qtbot.waitUntil(lambda: c.view.detail.tabs.isTabEnabled(1) and "formed at step" in c.view.detail.title.text()
                    or "its token over training" in c.view.detail.title.text(), timeout=WAIT)
    assert c.view.detail.tabs.isTabEnabled(1)
    qtbot.waitUntil(lambda: not runner.busy, timeout=WAIT)
