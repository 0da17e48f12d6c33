"""The Train panel's labels follow the run folder and the model shown (issue 27), and the panel keeps
the contract (issue 26): status bar, badge and banner describe the scrubbed step; the kept-steps count
grows with the folder; the progress line names each state; a run without its trace opens from its
checkpoints; the form follows nanoGPT's lr-decay advice and an opened run's corpus. No child
processes here: run folders are written with gptcore's own writers (tests/explorer/test_train_panel.py)."""
from __future__ import annotations

import types
from pathlib import Path

import numpy as np
import pytest

from tests.explorer.test_train_panel import _fake_run

ROOT = Path(__file__).resolve().parents[2]


def _open(qtbot, panel_context, root):
    from explorer.shell.registry import find_panel

    panel_context.run = str(root)
    page = find_panel("train").build(panel_context)
    qtbot.addWidget(page)
    c = page.controller
    qtbot.waitUntil(lambda: c.follower is not None and c.follower.root == Path(root), timeout=60_000)
    qtbot.waitUntil(lambda: not panel_context.runner.busy, timeout=60_000)  # its latest step, shown (issue 32)
    return page, c


def _poll(qtbot, c) -> None:
    """One poll of the followed run (a task on the compute thread since issue 32), waited for."""
    c.poll()
    qtbot.waitUntil(lambda: not c.ctx.runner.busy, timeout=60_000)


def _save_ckpt(root, step=20):
    """A ckpt.pt as the run writes it (gptcore's save_checkpoint), for the run's model shape."""
    import torch

    from gptcore.model.config import GPTConfig
    from gptcore.model.gpt import GPT
    from gptcore.training.checkpoint import save_checkpoint
    from gptcore.training.config import TrainConfig

    model = GPT(GPTConfig(vocab_size=5, block_size=16, n_layer=1, n_head=2, n_embd=16), init="gpt2", seed=1)
    trainer = types.SimpleNamespace(model=model, config=TrainConfig(), iter_num=step, best_val_loss=1.0,
                                    optimizer=torch.optim.AdamW(model.parameters()))
    return save_checkpoint(root / "ckpt.pt", trainer)


def _append(root, *records):
    from gptcore.training.trace import TraceWriter

    with TraceWriter(root / "trace.jsonl") as w:
        for kind, fields in records:
            w.write(kind, **fields)


def test_scrubbing_a_run_makes_the_status_bar_badge_and_banner_describe_the_step(qtbot, window, tmp_path):
    root = tmp_path / "run"
    _fake_run(root)
    window.open_run(str(root))
    c = window.panel("train").controller
    qtbot.waitUntil(lambda: c.follower is not None and c.follower.kept_steps("gpt2") == [0, 10, 20], timeout=60_000)
    labels, banner, session = window.status_labels, window.banner, window.session

    def shows(step: int, badge: str) -> bool:
        return (f"step {step} of 20" in labels["model"].text() and labels["trained"].text() == badge
                and session.info.status_word == badge.lower())

    c.view.choose_step(0)  # the initialisation: untrained (the banner names the run and the step: issue 32)
    qtbot.waitUntil(lambda: shows(0, "UNTRAINED"), timeout=60_000)
    assert not banner.isHidden() and "UNTRAINED" in banner.text() and "step 0 of 20" in banner.text()
    c.view.choose_step(20)  # weights copied in place (TrainingStepShown): trained now, everywhere
    qtbot.waitUntil(lambda: shows(20, "trained"), timeout=60_000)
    assert not banner.isHidden() and "UNTRAINED" not in banner.text() and "Training run run" in banner.text()
    assert "step 20 of 20" in banner.text()
    assert "step 20" in labels["trained"].toolTip()
    c.view.choose_step(0)  # and back: the badge and banner follow the weights, not the first swap
    qtbot.waitUntil(lambda: shows(0, "UNTRAINED"), timeout=60_000)
    assert "UNTRAINED" in banner.text()


def test_the_kept_steps_count_grows_with_the_run_folder(qtbot, panel_context, tmp_path):
    from gptcore.model.config import GPTConfig
    from gptcore.model.gpt import GPT
    from gptcore.training.run import RunFolder

    root = tmp_path / "run"
    folder = _fake_run(root, steps=(0,))
    page, c = _open(qtbot, panel_context, root)
    assert c.view.step_label.text() == "step 0 shown (1 kept step)"  # opening a run shows its latest step
    model = GPT(GPTConfig(vocab_size=5, block_size=16, n_layer=1, n_head=2, n_embd=16), init="gpt2", seed=0)
    c.view.choose_step(0)
    qtbot.waitUntil(lambda: c.view.step_label.text().startswith("step 0 shown"), timeout=60_000)
    for step in (10, 20):  # the run keeps two more steps while it is followed
        path = RunFolder(root).save_step_weights(model, "gpt2", step)
        _append(root, ("checkpoint", dict(scheme="gpt2", step=step, latest="ckpt.pt", path=folder.relative(path))))
        _poll(qtbot, c)
    assert c.view.step_label.text() == "step 0 shown (3 kept steps)"  # a chosen step stays (not "latest")
    page.shutdown()


@pytest.mark.parametrize("end, word", [(("done", dict(step=20, reason="max_iters")), "finished"),
                                       (("stopped", dict(step=20, reason="SIGTERM")), "stopped"),
                                       (("error", dict(step=20, message="loss is nan")), "failed"),
                                       (None, "running")])
def test_the_progress_line_names_the_state_the_trace_ends_in(qtbot, panel_context, tmp_path, end, word):
    root = tmp_path / "run"
    _fake_run(root)
    if end:
        _append(root, end)
    page, c = _open(qtbot, panel_context, root)
    text = c.view.progress_text()
    assert text.endswith(f" / 20 iterations · {word}"), text
    assert c.view.status_label.text().startswith(word)
    page.shutdown()


class _FakeProcess:
    """What the controller reads of its child (explorer/runtime/train_process.py): no process started."""

    def __init__(self, running=True, paused=False):
        self.running, self.paused, self.pid = running, paused, 1

    def rss_bytes(self):
        return 0

    def shutdown(self):
        pass


@pytest.mark.parametrize("process, exit_code, word", [
    (_FakeProcess(paused=True), None, "paused"), (_FakeProcess(), None, "running"),
    (_FakeProcess(running=False), 130, "stopped"), (_FakeProcess(running=False), 1, "failed")])
def test_the_progress_line_follows_the_child_process(qtbot, panel_context, tmp_path, process, exit_code, word):
    root = tmp_path / "run"
    _fake_run(root)
    page, c = _open(qtbot, panel_context, root)
    real = c.process
    c.process, c._exit = process, exit_code
    c.draw()
    assert c.view.progress_text().endswith(f" / 20 iterations · {word}"), c.view.progress_text()
    assert c.view.status_label.text().startswith(word)
    c.process = real
    page.shutdown()


def test_a_refused_start_says_refused_not_starting(qtbot, panel_context, tmp_path):
    from explorer.session.training.runs import RunFollower

    page, c = _open(qtbot, panel_context, _fake_run(tmp_path / "other").root)
    c.follower = RunFollower(tmp_path / "never-written")  # a child that exited before writing its folder
    c._exit = 2
    c.process = _FakeProcess(running=False)
    c.draw()
    assert c.view.progress_text() == "refused: nothing was trained"
    assert "starting" not in c.view.progress_text() and c.view.status_label.text().startswith("refused")
    page.shutdown()


def test_a_run_folder_without_its_trace_opens_from_its_checkpoints(qtbot, panel_context, tmp_path):
    root = tmp_path / "run"
    _fake_run(root)
    _save_ckpt(root)
    (root / "trace.jsonl").unlink()
    page, c = _open(qtbot, panel_context, root)
    assert c.follower.kept_steps("gpt2") == [0, 10, 20]
    note = c.view.note_label.text()
    assert "trace.jsonl is missing" in note and "3 kept steps" in note and "ckpt.pt" in note
    assert not c.view.note_label.isHidden() and c.view.message_label.isHidden()
    assert "removed or moved" not in note + c.view.message_label.text()
    assert c.view.use_button.isEnabled() and c.view.step_slider.isEnabled()
    assert "starting" not in c.view.progress_text()
    session = panel_context.session
    c.view.choose_step(10)
    qtbot.waitUntil(lambda: "step 10 of 20" in session.info.name, timeout=60_000)
    c.view.use_button.click()  # ckpt.pt is usable too: the run's step it was saved at (issue 39)
    qtbot.waitUntil(lambda: session.info.run is not None and session.info.run.step == 20
                    and "step 20 of 20" in session.info.name, timeout=60_000)
    assert c.save_to("ckpt", tmp_path / "copy.pt") and (tmp_path / "copy.pt").is_file()
    page.shutdown()


def test_a_trace_deleted_while_followed_is_named_as_such(qtbot, panel_context, tmp_path):
    root = tmp_path / "run"
    _fake_run(root)
    page, c = _open(qtbot, panel_context, root)
    (root / "trace.jsonl").unlink()
    _poll(qtbot, c)
    text = c.view.message_label.text()
    assert "trace.jsonl was deleted" in text and "kept steps and ckpt.pt stay usable" in text
    assert "removed or moved" not in text
    page.shutdown()


def test_lr_decay_follows_max_iterations_until_edited_and_an_opened_run_sets_its_corpus(qtbot, panel_context,
                                                                                        tmp_path):
    from explorer.shell.registry import find_panel

    page = find_panel("train").build(panel_context)
    qtbot.addWidget(page)
    view = page.controller.view
    fields = view.form._fields
    fields["max_iters"].setValue(20_000)
    assert view.form_values()["lr_decay_iters"] == 20_000  # nanoGPT: lr_decay_iters ~= max_iters
    fields["lr_decay_iters"].setValue(5_000)  # the user sets it apart: it stays
    fields["max_iters"].setValue(30_000)
    assert view.form_values()["lr_decay_iters"] == 5_000
    page.shutdown()

    import json

    text = tmp_path / "corpus.txt"
    text.write_text("some text\n" * 50)
    for corpus, meta_change in (("induction", {"preset": "induction"}),
                                ("file", {"corpus": {"name": "corpus.txt", "source": str(text)}})):
        root = tmp_path / corpus
        _fake_run(root)
        meta = json.loads((root / "run.json").read_text())
        (root / "run.json").write_text(json.dumps({**meta, **meta_change}))
        page, c = _open(qtbot, panel_context, root)
        values = c.view.form_values()
        assert values["corpus"] == corpus and values["n_embd"] == 16 and values["max_iters"] == 20
        assert values["path"] == (str(text) if corpus == "file" else "")
        page.shutdown()


def test_the_charts_show_axes_only_with_data_census_on_0_to_1_and_the_legend_beside_the_curves(
        qtbot, panel_context, tmp_path):
    from explorer.shell.registry import find_panel

    page = find_panel("train").build(panel_context)
    qtbot.addWidget(page)
    charts = page.controller.view.charts
    assert not any(charts.axes_shown().values())  # empty charts: titles only, no placeholder axes
    page.shutdown()
    root = tmp_path / "run"
    _fake_run(root)
    page, c = _open(qtbot, panel_context, root)
    charts = c.view.charts
    assert all(charts.axes_shown().values())
    heatmap = charts.census_maps["induction"]
    assert tuple(heatmap.colorbar.levels()) == (0.0, 1.0)  # scores 0..1, not a -1..1 diverging scale
    assert np.allclose(heatmap.values, [[0.0, 1.0]])
    assert charts.grad_plot.getPlotItem().legend is None  # no legend over the curves
    assert "embed" in charts.grad_legend.text() and "blocks.0" in charts.grad_legend.text()
    page.shutdown()


def test_the_window_asks_the_page_never_the_train_controller():
    source = (ROOT / "explorer" / "shell" / "window.py").read_text(encoding="utf-8")
    assert ".controller." not in source


def test_a_run_opened_scrubbed_and_a_second_run_started_are_named_alike_by_banner_badge_and_status(
        qtbot, window, tmp_path):
    """Issue 32: the run and step shown are one typed fact (ModelInfo.run) that banner, badge and status
    bar all read — from the moment a run is opened (as --run does), at every scrubbed step, and for a
    second run started in the panel, whose first kept step replaces the first run's everywhere."""
    from tests.explorer.test_train_panel import TINY, WAIT_MS, _fake_run

    root = tmp_path / "first-run"
    _fake_run(root)
    labels, banner, session = window.status_labels, window.banner, window.session

    def says(run_name: str, step: int, of: int, badge: str) -> bool:
        run = session.info.run
        return (run is not None and run.step == step and f"step {step} of {of}" in labels["model"].text()
                and labels["trained"].text() == badge and not banner.isHidden()
                and f"Training run {run_name}" in banner.text() and f"step {step} of {of}" in banner.text())

    window.open_run(str(root))  # what `gpt-explorer --run DIR` does
    qtbot.waitUntil(lambda: says("first-run", 20, 20, "trained"), timeout=60_000)  # no slider moved
    assert "UNTRAINED" not in banner.text()
    c = window.panel("train").controller
    c.view.choose_step(0)
    qtbot.waitUntil(lambda: says("first-run", 0, 20, "UNTRAINED"), timeout=60_000)
    assert "UNTRAINED" in banner.text()  # and it still names the run and the step
    c.view.choose_step(10)
    qtbot.waitUntil(lambda: says("first-run", 10, 20, "trained"), timeout=60_000)

    c.view.latest_box.setChecked(True)  # "latest": a started run's kept steps become the session's model
    c.start_with(dict(TINY, max_iters=40))  # a second run, started here: its steps replace the first's
    second = c.follower.root.name
    qtbot.waitUntil(lambda: session.info.run is not None and session.info.run.root.endswith(second),
                    timeout=WAIT_MS)
    step = session.info.run.step
    qtbot.waitUntil(lambda: says(second, session.info.run.step, 40, "UNTRAINED" if not session.info.run.step
                                 else "trained"), timeout=WAIT_MS)
    assert "first-run" not in labels["model"].toolTip() and "first-run" not in banner.text()
    assert step in c.follower.kept_steps("gpt2")
    c.stop()
    qtbot.waitUntil(lambda: not c.process.running, timeout=WAIT_MS)
