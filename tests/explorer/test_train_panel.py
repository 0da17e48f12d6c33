"""The Train panel (issue 22): a real child training followed live, the scrubber putting a step's
weights into the session for every panel, Stop, quitting during a run, and a run folder that is
damaged or deleted while followed. Tiny runs (1 layer, 32 wide, block 32, 40 iterations)."""
from __future__ import annotations

import json
import os
import shutil

import numpy as np
import pytest
import torch

from explorer.controllers.train_settings import command_settings
from explorer.session.training.runs import RunFollower, RunFollowError

TINY = dict(n_layer=1, n_head=4, n_embd=32, block_size=32, max_iters=40, eval_interval=10, eval_iters=2,
            batch_size=4, probe_interval=20, warmup_iters=5, lr_decay_iters=40, init="gpt2")
WAIT_MS = 240_000  # a child importing torch on a loaded 2-core machine: generous, never a timing assertion


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie still answers kill(0): look at its state
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False
    return True


def _train_page(window):
    page = window.show_panel("train")
    assert page is not None
    return page.controller


def _wait_evals(qtbot, controller, n: int) -> None:
    qtbot.waitUntil(lambda: controller.follower is not None and "gpt2" in controller.follower.series
                    and len(controller.follower.series["gpt2"].eval_step) >= n, timeout=WAIT_MS)


def _step_weights(root, step):
    from safetensors.torch import load_file

    return load_file(str(root / "steps" / "gpt2" / f"step_{step:06d}.safetensors"))


def test_a_run_started_in_the_panel_is_followed_scrubbed_into_every_panel_and_stopped(qtbot, window, tmp_path):
    session = window.session
    c = _train_page(window)
    c.start_with(dict(TINY, max_iters=4000))  # long enough that Stop ends it, not max_iters
    assert c.process.running
    pid = c.process.pid
    _wait_evals(qtbot, c, 2)
    f = c.follower
    series = f.series["gpt2"]
    assert series.eval_step[:2] == [0, 10] and all(np.isfinite(series.eval_val[:2]))
    # The charts draw what the trace holds: one val point per eval, one train point per step. The
    # follower is filled by the poll task on the compute thread and the charts are drawn when its
    # result reaches the GUI thread, a moment later: wait for the drawing, not only the data.
    def val_steps() -> list:
        curve = c.view.charts._curves.get(("val", "gpt2"))  # made at the first drawing
        return [] if curve is None or curve.getData()[0] is None else list(curve.getData()[0])

    qtbot.waitUntil(lambda: len(val_steps()) >= 2, timeout=WAIT_MS)
    assert val_steps()[:2] == [0, 10]
    qtbot.waitUntil(lambda: 0 in f.kept_steps("gpt2") and 10 in f.kept_steps("gpt2"), timeout=WAIT_MS)
    assert c.view.step_slider.isEnabled()
    c.draw()  # the count follows the live run's folder (it stayed at "1 kept steps" before)
    assert c.view.step_label.text().endswith(f"{len(f.kept_steps('gpt2'))} kept steps)")  # "step N shown (…)"

    # Scrub to the first kept step: the session's model becomes that step's weights, with the run's
    # character tokenizer, and the window (every panel's status) says which step it is.
    c.view.choose_step(0)
    qtbot.waitUntil(lambda: "step 0 of 4,000" in session.info.name, timeout=WAIT_MS)
    assert session.config.n_embd == 32 and session.config.vocab_size < 200
    assert session.config.n_head == 4  # the run's head count, not one guessed from the tensors' shapes
    expected = _step_weights(f.root, 0)
    assert torch.equal(session.model.state_dict()["blocks.0.attn.c_attn.weight"],
                       expected["blocks.0.attn.c_attn.weight"])
    assert session.token_strings(session.encode("Hi")) == ["H", "i"]
    qtbot.waitUntil(lambda: "step 0 of 4,000" in window.status_labels["model"].text(), timeout=10_000)

    # Another step of the same run: weights copied in place (TrainingStepShown), status follows.
    attention = window.show_panel("attention").controller
    version = session.version
    c.view.choose_step(10)
    qtbot.waitUntil(lambda: "step 10 of 4,000" in session.info.name, timeout=WAIT_MS)
    assert session.version > version
    assert torch.equal(session.model.state_dict()["blocks.0.attn.c_attn.weight"],
                       _step_weights(f.root, 10)["blocks.0.attn.c_attn.weight"])
    qtbot.waitUntil(lambda: "step 10 of 4,000" in window.status_labels["model"].text(), timeout=10_000)
    # The Attention panel recomputes on the step's model (its result carries the session version).
    qtbot.waitUntil(lambda: getattr(attention, "result", None) is not None
                    and attention.result.version >= session.version, timeout=WAIT_MS)

    # Stop: the child saves and exits; the buttons come back; the trace ends with "stopped".
    c.view.form.stop_button.click()
    qtbot.waitUntil(lambda: not c.process.running, timeout=WAIT_MS)
    assert not _pid_alive(pid)
    qtbot.waitUntil(lambda: f.state == "stopped", timeout=10_000)
    assert c.view.form.start_button.isEnabled() and not c.view.form.stop_button.isEnabled()

    # "Use this model": the run's ckpt.pt (saved at the stop) becomes the session's model, as the run's
    # step it was saved at, with the run's characters as its tokenizer (issue 39).
    c.view.use_button.click()
    qtbot.waitUntil(lambda: session.info.run is not None and session.info.run.step == f.step
                    and not window.runner.is_running("train-use"), timeout=WAIT_MS)
    assert session.config.n_head == 4 and session.token_strings(session.encode("ok")) == ["o", "k"]

    # Save as a Hugging Face GPT-2 folder: it opens as a model again, with the run's characters.
    assert c.save_to("hf", tmp_path / "hf")  # through the one export entry point
    assert (tmp_path / "hf" / "model.safetensors").is_file()
    from gptcore.io.loading import load

    model, info = load(str(tmp_path / "hf"), device="cpu")
    assert model.config.n_head == 4 and info.tokenizer.kind == "char"


def _proc_state(pid: int) -> str:
    with open(f"/proc/{pid}/stat") as f:
        return f.read().split(")")[-1].split()[0]


@pytest.mark.skipif(not os.path.exists("/proc/self/stat"), reason="reads process states from Linux /proc")
def test_pause_resume_and_quitting_while_paused_leaves_no_child_process(qtbot, window):
    c = _train_page(window)
    c.start_with(dict(TINY, max_iters=100_000))
    pid = c.process.pid
    assert _pid_alive(pid)
    qtbot.waitUntil(lambda: c.follower.state == "running", timeout=WAIT_MS)
    form = c.view.form
    form.pause_button.click()
    assert form.pause_button.text() == "Resume"
    assert c.view.progress_text().endswith("· paused") and c.view.status_label.text().startswith("paused")
    qtbot.waitUntil(lambda: _proc_state(pid) == "T", timeout=10_000)  # the kernel delivers SIGSTOP soon after
    form.pause_button.click()
    assert form.pause_button.text() == "Pause"
    assert c.view.progress_text().endswith("· running")
    qtbot.waitUntil(lambda: _proc_state(pid) != "T", timeout=10_000)
    form.pause_button.click()  # paused again: quitting must still end it (SIGCONT, then SIGTERM)
    window.close()
    assert not _pid_alive(pid)


def _fake_run(root, steps=(0, 10, 20)):
    """A run folder written with gptcore's own writers (no training): run.json, trace, kept steps."""
    from gptcore.model.config import GPTConfig
    from gptcore.model.gpt import GPT
    from gptcore.training.run import RunFolder
    from gptcore.training.trace import TraceWriter

    folder = RunFolder(root)
    config = GPTConfig(vocab_size=5, block_size=16, n_layer=1, n_head=2, n_embd=16)
    folder.start({"schemes": ["gpt2"], "model_config": config.to_dict(), "train_config": {"max_iters": 20},
                  "corpus": {"name": "test corpus"}, "tokenizer": {"kind": "char", "vocab": "char_vocab.json"}},
                 resume=False)
    (root / "char_vocab.json").write_text(json.dumps({"format": "gptcore-char-vocab-1", "chars": list("\n abc")}))
    model = GPT(config, init="gpt2", seed=0)
    with TraceWriter(folder.trace) as w:
        w.write("start", run="x", schemes=["gpt2"], step=0, max_iters=20, resumed=False, world_size=1)
        for step in steps:
            w.write("train", scheme="gpt2", step=step, loss=3.0 - step / 10, lr=1e-3, grad_norm=1.0,
                    grad_norms={"embed": 0.5, "blocks.0": 0.3}, tokens_per_s=1000.0, dt=0.01)
            w.write("eval", scheme="gpt2", step=step, train=3.0 - step / 10, val=3.1 - step / 10)
            w.write("checkpoint", scheme="gpt2", step=step, latest="ckpt.pt",
                    path=folder.relative(folder.save_step_weights(model, "gpt2", step)))
            w.write("probe", scheme="gpt2", step=step, census={"previous_token": [[0.1, 0.2]],
                                                               "induction": [[0.0, step / 20]],
                                                               "position_copy": [[0.0, 0.0]]},
                    icl={"score": -step / 100}, sample={"prompt": "ab", "text": "cab"})
    return folder


def test_a_run_folder_damaged_or_deleted_while_followed_keeps_the_charts(qtbot, panel_context, tmp_path):
    from explorer.shell.registry import find_panel

    root = tmp_path / "run"
    _fake_run(root)
    panel_context.run = str(root)
    page = find_panel("train").build(panel_context)
    qtbot.addWidget(page)
    c = page.controller
    qtbot.waitUntil(lambda: c.follower is not None and c.follower.kept_steps("gpt2") == [0, 10, 20], timeout=60_000)
    # The poll task fills the follower on the compute thread; the charts are drawn a moment later.
    qtbot.waitUntil(lambda: c.view.charts.census_step() == 20 and bool(c.view.sample_text.toPlainText()), timeout=60_000)
    assert c.view.charts.census_step() == 20
    assert c.view.sample_text.toPlainText() == "abcab"
    drawn = len(c.view.charts._curves[("val", "gpt2")].getData()[0])
    assert drawn == 3

    with open(root / "trace.jsonl", "ab") as f:
        f.write(b"{this is not json}\n")
    qtbot.waitUntil(lambda: not c.ctx.runner.busy, timeout=60_000)
    c.poll()  # a task since issue 32: the file is read on the compute thread
    qtbot.waitUntil(lambda: "damaged" in c.view.message_label.text(), timeout=60_000)
    assert "line" in c.view.message_label.text() and "damaged" in c.view.message_label.text()
    assert not c.view.message_label.isHidden()
    assert len(c.view.charts._curves[("val", "gpt2")].getData()[0]) == drawn  # what was shown stays
    assert not c.timer.isActive()

    c.view.set_message("")  # so that the wait below sees the re-opening's own message, not the last one
    c.open_run(str(root))  # opening again reads up to the damage: the same charts, the message again
    qtbot.waitUntil(lambda: "damaged" in c.view.message_label.text(), timeout=60_000)

    other = tmp_path / "run2"
    _fake_run(other)
    c.open_run(str(other))
    qtbot.waitUntil(lambda: c.follower.root == other and c.timer.isActive(), timeout=60_000)
    qtbot.waitUntil(lambda: not c.ctx.runner.busy, timeout=60_000)
    shutil.rmtree(other)
    c.poll()
    qtbot.waitUntil(lambda: "deleted" in c.view.message_label.text(), timeout=60_000)
    assert "deleted" in c.view.message_label.text()
    assert len(c.view.charts._curves[("val", "gpt2")].getData()[0]) == 3
    page.shutdown()


def test_the_follower_reads_a_growing_trace_and_names_a_deleted_folder(tmp_path):
    root = tmp_path / "run"
    f = RunFollower(root)
    assert f.poll() is False and f.state == "waiting"  # nothing written yet: a run starting
    _fake_run(root, steps=(0,))
    assert f.poll() is True
    assert f.series["gpt2"].eval_val == [3.1] and f.kept_steps("gpt2") == [0]
    assert f.corpus_label() == "test corpus, char"
    shutil.rmtree(root)
    with pytest.raises(RunFollowError, match="deleted"):
        f.poll()
    assert f.series["gpt2"].eval_val == [3.1]  # kept


def test_bad_settings_are_named_before_anything_starts(tmp_path):
    base = dict(TINY, corpus="pydoc", path="")
    assert "data" not in command_settings(base)
    with pytest.raises(ValueError, match="tick at least one init scheme"):
        command_settings(dict(base, init=""))
    with pytest.raises(ValueError, match="is not a file"):
        command_settings(dict(base, corpus="file", path=str(tmp_path / "missing.txt")))
    with pytest.raises(ValueError, match="no train.bin"):
        command_settings(dict(base, corpus="folder", path=str(tmp_path)))
    text = tmp_path / "t.txt"
    text.write_text("hello")
    assert command_settings(dict(base, corpus="file", path=str(text)))["data"] == str(text)


def test_train_this_config_in_the_config_panel_fills_the_train_form(qtbot, window):
    window.session.build(dict(window.session.config.to_dict(), n_layer=3, n_embd=48, n_head=3), "gpt2", seed=0)
    config = window.show_panel("config").controller
    qtbot.waitUntil(lambda: config.config.n_layer == 3, timeout=30_000)
    config.view.train_button.click()
    assert window.current_panel_name() == "train"
    values = window.panel("train").controller.view.form.values()
    assert (values["n_layer"], values["n_embd"], values["n_head"]) == (3, 48, 3)
    assert "model from the Config panel: 3 layers × 48 wide" in window.panel("train").controller.view.status_label.text()


def test_the_training_bench_reads_iterations_per_second_from_the_trace(tmp_path):
    from explorer.benches.training import rate_between
    from gptcore.training.trace import TraceWriter

    with TraceWriter(tmp_path / "trace.jsonl") as w:
        w.write("start", run="x", schemes=["gpt2"], step=0, max_iters=10, resumed=False, world_size=1)
    lines = [json.dumps({"kind": "train", "time": 100.0 + 0.5 * i, "step": i, "scheme": "gpt2"}) for i in range(11)]
    with open(tmp_path / "trace.jsonl", "a") as f:
        f.write("\n".join(lines) + "\n")
    assert rate_between(tmp_path, 100.0, 105.0) == pytest.approx(2.0)  # one step every 0.5 s
    assert rate_between(tmp_path, 101.0, 102.0) == pytest.approx(2.0)
    assert np.isnan(rate_between(tmp_path, 200.0, 300.0))  # no steps there: unknown, not zero


def test_an_opened_run_is_listed_in_file_recent_runs_and_reopens_from_there(qtbot, window, tmp_path):
    first, second = tmp_path / "first", tmp_path / "second"
    _fake_run(first)
    _fake_run(second)
    window.open_run(str(first))
    c = window.panel("train").controller
    qtbot.waitUntil(lambda: c.follower is not None and c.follower.kept_steps("gpt2") == [0, 10, 20], timeout=60_000)
    window.open_run(str(second))
    qtbot.waitUntil(lambda: c.follower.root == second, timeout=60_000)
    window._fill_recent_runs()
    listed = [a.text() for a in window.recent_runs_menu.actions()]
    assert listed == [str(second), str(first)]  # latest first
    window.recent_runs_menu.actions()[1].trigger()
    qtbot.waitUntil(lambda: c.follower.root == first, timeout=60_000)
    # The form took the run's settings (Start would train the same again).
    assert c.view.form.values()["n_embd"] == 16 and c.view.form.values()["init"] == "gpt2"


def test_a_run_the_training_refuses_shows_its_reason_in_the_panel(qtbot, window, tmp_path):
    short = tmp_path / "short.txt"
    short.write_text("too short for a block of 32\\n", encoding="utf-8")
    c = _train_page(window)
    c.start_with(dict(TINY, corpus="file", path=str(short)))
    qtbot.waitUntil(lambda: not c.process.running, timeout=WAIT_MS)
    text = c.view.message_label.text()
    assert "exit status 2" in text and "block_size" in text, text  # gptcore.train's own words, no traceback
    assert "Traceback" not in text
    assert c.view.form.start_button.isEnabled() and not c.timer.isActive()
    assert c.view.progress_text() == "refused: nothing was trained"  # not "0 iterations · starting"


def test_the_run_option_opens_the_train_panel_and_names_a_missing_folder(tmp_path, capsys):
    from explorer.app import parse_args

    args = parse_args(["--run", str(tmp_path)])
    assert args.run == str(tmp_path) and args.panel == "train"
    assert parse_args(["--run", str(tmp_path), "--panel", "attention"]).panel == "attention"
    with pytest.raises(SystemExit):
        parse_args(["--run", str(tmp_path / "nowhere")])
    assert "no such folder" in capsys.readouterr().err


def test_a_resumed_run_reads_as_running_again_and_its_eta_ignores_the_pause(tmp_path):
    root = tmp_path / "run"
    _fake_run(root, steps=())
    lines = []
    for i in range(10):  # 1 s per step, then stopped, resumed an hour later at 2 s per step
        lines.append({"kind": "train", "time": 1000.0 + i, "step": i, "scheme": "gpt2", "loss": 2.0})
    lines[-1]["memory_mb"] = 123.4
    lines.append({"kind": "stopped", "time": 1010.0, "step": 10, "reason": "SIGTERM"})
    lines.append({"kind": "start", "time": 4600.0, "step": 10, "max_iters": 20, "schemes": ["gpt2"], "resumed": True})
    for i in range(10, 15):
        lines.append({"kind": "train", "time": 4600.0 + 2 * (i - 10), "step": i, "scheme": "gpt2", "loss": 2.0})
    with open(root / "trace.jsonl", "a") as f:
        f.write("".join(json.dumps(r) + "\n" for r in lines))
    f = RunFollower(root)
    f.poll()
    assert f.state == "running" and f.end_message == "" and f.describe().startswith("running ·")
    _tokens, left = f.rate(window=5)
    assert left == pytest.approx(5 * 2.0)  # 5 steps left at the resumed run's 2 s each, not the hour's pause
    assert f.memory_mb == 123.4  # the last train record that said it


def test_choosing_the_induction_preset_fills_the_form_with_it_and_starts_it(qtbot, window):
    from explorer.controllers.train_settings import command_settings

    form = _train_page(window).view.form
    index = form.corpus_combo.findData("induction")
    assert form.corpus_combo.model().item(index).isEnabled()  # gptcore ships the preset and --preset
    form.corpus_combo.setCurrentIndex(index)
    values = form.values()
    assert (values["n_layer"], values["n_head"], values["n_embd"], values["block_size"]) == (2, 2, 64, 32)
    assert values["batch_size"] == 128 and values["bias"] is True
    settings = command_settings(values)
    assert settings["preset"] == "induction" and "data" not in settings
