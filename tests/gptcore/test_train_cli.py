"""`python -m gptcore.train` end to end on a tiny config: the run folder, its trace, resume, several
init schemes, stopping (signals, a non-finite loss) and the messages for bad input."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from gptcore.train import main
from gptcore.training.run import RunFolder, RunFolderError
from gptcore.training.trace import TraceReader, read_trace

ROOT = Path(__file__).resolve().parents[2]
TINY = ["--n_layer=1", "--n_head=2", "--n_embd=16", "--block_size=16", "--batch_size=2", "--eval_iters=1",
        "--eval_interval=4", "--probe_interval=4", "--log_interval=2", "--warmup_iters=2", "--lr_decay_iters=40",
        "--device=cpu"]  # named: "auto" is the GPU where there is one (issue 37)


@pytest.fixture(scope="module")
def text_file(tmp_path_factory):
    rng = np.random.default_rng(0)
    words = ["the", "cat", "sat", "on", "a", "mat", "and", "dog", "ran", "far", "away", "home"]
    text = " ".join(rng.choice(words, 1500)) + "\n"
    path = tmp_path_factory.mktemp("data") / "tiny.txt"
    path.write_text(text, encoding="utf-8")
    return path


def train(out, data, *extra) -> int:
    return main([f"--data={data}", f"--out_dir={out}", *TINY, *extra])


def state_of(ckpt: Path) -> dict:
    from gptcore.training.checkpoint import read_checkpoint

    ckpt_dict, _, state = read_checkpoint(ckpt)
    return ckpt_dict, state


def test_a_run_leaves_a_documented_folder_and_a_well_formed_trace(tmp_path, text_file, capsys):
    out = tmp_path / "run"
    assert train(out, text_file, "--max_iters=8") == 0
    progress = [line for line in capsys.readouterr().out.splitlines() if line.startswith("iter ")]
    assert len(progress) == 4 and all("tok/s" in line and "ETA" in line and "gpt2 " in line and " MB" in line
                                      for line in progress)
    folder = RunFolder(out)
    meta = folder.read_meta()
    assert meta["schemes"] == ["gpt2"] and meta["model_config"]["n_embd"] == 16
    assert meta["train_config"]["max_iters"] == 8 and meta["corpus"]["source"] == str(text_file.resolve())
    assert meta["tokenizer"] == {"kind": "char", "vocab": "char_vocab.json"}
    assert json.loads((out / "char_vocab.json").read_text())["chars"] == sorted(set(text_file.read_text()))

    lines = (out / "trace.jsonl").read_text().splitlines()
    records = [json.loads(line) for line in lines]  # every line plain JSON
    kinds = [r["kind"] for r in records]
    assert kinds[0] == "start" and kinds[-1] == "done"
    assert [r["step"] for r in records if r["kind"] == "train"] == list(range(8))
    assert [r["step"] for r in records if r["kind"] == "eval"] == [0, 4, 8]
    assert [r["step"] for r in records if r["kind"] == "checkpoint"] == [0, 4, 8]
    first = next(r for r in records if r["kind"] == "train")
    assert set(first["grad_norms"]) == {"embed", "pos_embed", "blocks.0", "ln_final"}
    assert first["loss"] > 0 and first["lr"] > 0 and first["tokens_per_s"] > 0
    assert 50 < first["memory_mb"] < 100_000  # this process holds torch: tens of MB at least

    probe = next(r for r in records if r["kind"] == "probe" and r["step"] == 8)
    assert np.asarray(probe["census"]["previous_token"]).shape == (1, 2)
    assert len(probe["residual"]["norms"]) == len(probe["residual"]["labels"]) == 3
    pattern = np.load(out / probe["attention"]["file"], allow_pickle=False)
    assert pattern.shape == (1, 2, 16, 16) == tuple(probe["attention"]["shape"])
    assert np.allclose(pattern.astype(np.float32).sum(-1), 1.0, atol=1e-2)  # rows of a softmax
    assert len(probe["attention"]["tokens"]) == 16
    assert probe["icl"]["score"] == pytest.approx(probe["icl"]["late"] - probe["icl"]["early"], abs=1e-3)
    assert isinstance(probe["sample"]["text"], str) and probe["sample"]["text"]

    # the kept weights are the checkpoint's weights at that step
    assert [s for s, _ in folder.steps("gpt2")] == [0, 4, 8]
    model = folder.load_step("gpt2", 8)
    ckpt, state = state_of(out / "ckpt.pt")
    assert ckpt["iter_num"] == 8
    assert torch.equal(model.state_dict()["blocks.0.attn.c_attn.weight"], state["blocks.0.attn.c_attn.weight"])

    # gptcore.load opens a kept step by itself: the config (exact GELU, heads) from the file's metadata
    from gptcore.io.loading import load

    loaded, info = load(folder.step_weights("gpt2", 4), device="cpu")
    assert loaded.config.activation == "gelu" and loaded.config.n_head == 2 and loaded.unembed.weight is loaded.embed.weight
    assert info.describe()["format"] == "gptcore training run, step 4"
    assert info.describe()["weights"].startswith("trained")
    assert load(folder.step_weights("gpt2", 0), device="cpu")[1].describe()["weights"].startswith("untrained")
    with pytest.raises(RunFolderError, match="kept steps: 0, 4, 8"):
        folder.load_step("gpt2", 5)


def test_resume_continues_the_steps_and_equals_an_uninterrupted_run(tmp_path, text_file):
    straight, split = tmp_path / "straight", tmp_path / "split"
    assert train(straight, text_file, "--max_iters=10") == 0
    assert train(split, text_file, "--max_iters=6") == 0
    assert main([f"--out_dir={split}", "--resume", "--max_iters=10"]) == 0  # data and settings from run.json

    records = read_trace(split / "trace.jsonl")
    starts = [r for r in records if r["kind"] == "start"]
    assert [(s["step"], s["resumed"]) for s in starts] == [(0, False), (6, True)]
    assert [r["step"] for r in records if r["kind"] == "train"] == list(range(10))
    assert RunFolder(split).read_meta()["resumes"][0]["step"] == 6
    _, a = state_of(straight / "ckpt.pt")
    _, b = state_of(split / "ckpt.pt")
    for name in a:
        torch.testing.assert_close(a[name], b[name], rtol=1e-5, atol=1e-6)


def test_several_init_schemes_train_side_by_side_into_one_folder(tmp_path, text_file):
    out = tmp_path / "two"
    assert train(out, text_file, "--max_iters=4", "--init=gpt2,pytorch-default") == 0
    records = read_trace(out / "trace.jsonl")
    for scheme in ("gpt2", "pytorch-default"):
        assert [r["step"] for r in records if r["kind"] == "train" and r["scheme"] == scheme] == [0, 1, 2, 3]
        assert {r["step"] for r in records if r["kind"] == "probe" and r["scheme"] == scheme} == {0, 4}
        assert (out / f"ckpt-{scheme}.pt").is_file()
    assert RunFolder(out).read_meta()["checkpoints"] == {"gpt2": "ckpt-gpt2.pt",
                                                          "pytorch-default": "ckpt-pytorch-default.pt"}
    first = {r["scheme"]: r["loss"] for r in records if r["kind"] == "train" and r["step"] == 0}
    assert first["gpt2"] != first["pytorch-default"]  # different models (on the same batch)


def test_a_non_finite_loss_stops_names_the_step_and_keeps_the_last_good_checkpoint(tmp_path, text_file, monkeypatch,
                                                                                    capsys):
    import gptcore.training.trainer as trainer_module

    real = trainer_module.lm_loss
    calls = {"n": 0}

    def poisoned(logits, targets):
        loss = real(logits, targets)
        if not torch.is_grad_enabled():  # an eval
            return loss
        calls["n"] += 1
        return loss * float("nan") if calls["n"] > 6 else loss  # training step 6 goes bad

    monkeypatch.setattr(trainer_module, "lm_loss", poisoned)
    out = tmp_path / "nan"
    assert train(out, text_file, "--max_iters=12", "--probe_interval=0") == 1
    records = read_trace(out / "trace.jsonl")
    assert records[-1]["kind"] == "error"
    bad = next(r for r in records if r["kind"] == "diverged")
    assert f"step {bad['step']}" in records[-1]["message"] and "not finite" in records[-1]["message"]
    assert "non-finite" in capsys.readouterr().err
    ckpt, state = state_of(out / "ckpt.pt")
    assert ckpt["iter_num"] == 4  # the last eval before the bad step
    assert all(torch.isfinite(t).all() for t in state.values())


def test_sigterm_during_a_run_saves_and_stops_cleanly(tmp_path, text_file, monkeypatch):
    from gptcore.training.trainer import Trainer

    real_launch = Trainer.launch

    def step_then_signal(self, x, y):
        real_launch(self, x, y)
        if self.iter_num == 3:
            os.kill(os.getpid(), signal.SIGTERM)  # the run's handler is installed: it asks the loop to stop

    monkeypatch.setattr(Trainer, "launch", step_then_signal)
    out = tmp_path / "term"
    assert train(out, text_file, "--max_iters=50") == 0
    records = read_trace(out / "trace.jsonl")
    assert records[-1] == {**records[-1], "kind": "stopped", "step": 3, "reason": "SIGTERM"}
    assert state_of(out / "ckpt.pt")[0]["iter_num"] == 3


def test_ctrl_c_in_a_real_process_leaves_a_loadable_checkpoint_while_a_reader_follows(tmp_path, text_file):
    out = tmp_path / "ctrlc"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-m", "gptcore.train", f"--data={text_file}", f"--out_dir={out}", *TINY,
                             "--max_iters=100000", "--probe_interval=0"], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        reader, seen, live = TraceReader(out / "trace.jsonl"), [], False
        deadline = time.monotonic() + 120
        while sum(r["kind"] == "train" for r in seen) < 5:
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the run wrote no train records"
            batch = reader.poll()
            live |= bool(batch)
            seen += batch
            time.sleep(0.05)
        assert live  # records arrived while the run was still going
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, stderr
    assert "Traceback" not in stderr
    seen += reader.poll()
    steps = [r["step"] for r in seen if r["kind"] == "train"]
    assert steps == list(range(len(steps)))  # in order, none lost, none repeated
    assert seen[-1]["kind"] == "stopped" and seen[-1]["reason"] == "SIGINT"
    assert state_of(out / "ckpt.pt")[0]["iter_num"] == seen[-1]["step"] == len(steps)
    assert "--init_from=resume" in stdout


@pytest.mark.parametrize("args, message", [
    (["--max_iter=5"], "--max_iter: unknown setting; did you mean --max_iters?"),
    (["--max_iters=five"], "--max_iters=five: expected a whole number"),
    (["--bias=maybe"], "--bias=maybe: expected True or False"),
    (["--init=gpt2,xavier"], "unknown scheme 'xavier'"),
    (["--tokenizer=bpe"], "use char (one id per character) or gpt2"),
    (["--n_head=3"], "n_head: n_embd=16 is not divisible by n_head=3"),
    (["--learning_rate=-1"], "learning_rate: must be at least 0.0"),
    (["--block_size=100000"], "fewer than block_size + 1"),
    (["--n_layer=200", "--n_embd=16384", "--n_head=128"], "free; make the model smaller"),
    (["--gradient_accumulation_steps=3", "--device=cuda"], "--device=cuda: torch sees no CUDA GPU"),
    (["stray"], "stray: no such config file"),
])
def test_bad_settings_are_refused_with_a_message_before_anything_starts(tmp_path, text_file, capsys, args, message,
                                                                        monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # the no-GPU message, on every machine
    out = tmp_path / "bad"
    assert train(out, text_file, *args) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    assert not out.exists()  # nothing written


def test_bad_data_and_folders_are_named(tmp_path, text_file, capsys):
    binary = tmp_path / "blob.bin"
    binary.write_bytes(b"\x00\x01" * 100)
    assert main([f"--data={binary}", f"--out_dir={tmp_path / 'a'}"]) == 2
    assert "is binary" in capsys.readouterr().err
    assert main([f"--data={tmp_path / 'missing.txt'}", f"--out_dir={tmp_path / 'a'}"]) == 2
    assert "no such file" in capsys.readouterr().err
    assert main([f"--out_dir={tmp_path / 'nothing'}", "--resume"]) == 2
    assert "is not a run folder" in capsys.readouterr().err
    damaged = tmp_path / "damaged"
    damaged.mkdir()
    (damaged / "run.json").write_text('{"format": "gptcore-run", "version": 1, "schemes": "gpt2"}')
    assert main([f"--out_dir={damaged}", "--resume"]) == 2
    assert "lacks schemes, train_config, model_config, corpus, tokenizer" in capsys.readouterr().err

    out = tmp_path / "once"
    assert train(out, text_file, "--max_iters=1", "--probe_interval=0") == 0
    capsys.readouterr()
    assert train(out, text_file, "--max_iters=1") == 2
    assert "already holds a run; continue it with --init_from=resume" in capsys.readouterr().err
    assert main([f"--out_dir={out}", "--resume", "--n_layer=3"]) == 2
    assert "a resumed run's model comes from its checkpoint" in capsys.readouterr().err
    other = tmp_path / "other.txt"
    other.write_text("ZYXWVUTSRQPONMLKJIHGFEDCBA 0123456789 " * 200)
    assert main([f"--out_dir={out}", "--resume", f"--data={other}", "--max_iters=3"]) == 2
    assert "has vocab_size 17 but other.txt needs 37 ids" in capsys.readouterr().err
    other.write_text("ZYXWVUTSRQ PONM\n" * 300)  # as few symbols, other characters
    assert main([f"--out_dir={out}", "--resume", f"--data={other}", "--max_iters=3"]) == 2
    assert "another character vocabulary" in capsys.readouterr().err
    assert [r["kind"] for r in read_trace(out / "trace.jsonl")].count("start") == 1  # the refused resume wrote nothing


def test_the_probe_cost_bench_prices_the_default_interval(capsys):
    from gptcore.benches import probe_cost
    from gptcore.train import DEFAULT_PROBE_INTERVAL

    assert probe_cost.main(["--rounds=1", "--steps=2"]) == 0
    out = capsys.readouterr().out
    assert f"probe_interval={DEFAULT_PROBE_INTERVAL}: probes cost" in out and "CPU time: step" in out


def test_max_time_ends_the_run_as_done_with_a_checkpoint_and_keep_every_thins_the_kept_weights(tmp_path, text_file):
    out = tmp_path / "timed"
    assert train(out, text_file, "--max_iters=1000000", "--max_time=1.5", "--probe_interval=0",
                 "--keep_every", "2", "--eval_interval=2") == 0  # `--key value` works too
    records = read_trace(out / "trace.jsonl")
    last = records[-1]
    assert last["kind"] == "done" and last["reason"] == "max_time" and 0 < last["step"] < 1000000
    assert state_of(out / "ckpt.pt")[0]["iter_num"] == last["step"]
    kept = [s for s, _ in RunFolder(out).steps("gpt2")]
    evals = [r["step"] for r in records if r["kind"] == "eval"]
    assert kept == sorted({s for s in evals if (s // 2) % 2 == 0} | {last["step"]})


def test_help_lists_every_setting_with_its_default(capsys):
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    for line in ("--max_iters=2000", "--learning_rate=0.001", "--n_layer=4", "--init=gpt2", "--probe_interval="):
        assert line in out


def test_a_save_that_fails_mid_run_ends_it_with_the_reason_and_keeps_the_previous_checkpoint(tmp_path, text_file,
                                                                                               monkeypatch, capsys):
    from gptcore.training import checkpoint
    from gptcore.training.errors import CheckpointError

    real_save = checkpoint.save_checkpoint
    saves = {"n": 0}

    def full_disk(path, trainer, **extra):
        saves["n"] += 1
        if saves["n"] == 2:
            raise CheckpointError(f"could not write {path} (No space left on device); the previous ckpt.pt is "
                                  f"unchanged. Free disk space or choose another out_dir")
        return real_save(path, trainer, **extra)

    monkeypatch.setattr(checkpoint, "save_checkpoint", full_disk)
    out = tmp_path / "full"
    assert train(out, text_file, "--max_iters=8", "--probe_interval=0") == 1
    err = capsys.readouterr().err
    assert "No space left on device" in err and "Traceback" not in err
    last = read_trace(out / "trace.jsonl")[-1]
    assert last["kind"] == "error" and "No space left" in last["message"] and last["step"] == 4
    assert state_of(out / "ckpt.pt")[0]["iter_num"] == 0  # the save before the failed one


def test_gpt2_tokenizer_runs_write_no_char_vocabulary_and_probe_in_bpe_tokens(tmp_path, text_file):
    out = tmp_path / "bpe"
    assert train(out, text_file, "--tokenizer=gpt2", "--max_iters=2") == 0
    meta = RunFolder(out).read_meta()
    assert meta["tokenizer"] == {"kind": "gpt2", "vocab": None} and meta["model_config"]["vocab_size"] == 50257
    assert not (out / "char_vocab.json").exists()
    probe = [r for r in read_trace(out / "trace.jsonl") if r["kind"] == "probe"][-1]
    tokens = probe["attention"]["tokens"]
    assert len(tokens) == 16 and any(len(t) > 1 for t in tokens)  # whole BPE pieces, not characters
    assert "".join(tokens) in text_file.read_text()


def test_a_block_too_short_for_the_census_still_probes_the_rest(tmp_path, text_file):
    out = tmp_path / "short"
    assert train(out, text_file, "--max_iters=1", "--block_size=4") == 0
    probe = [r for r in read_trace(out / "trace.jsonl") if r["kind"] == "probe"][-1]
    assert probe["census"] is None and "too short for a head census" in probe["notes"][0]
    assert probe["icl"]["score"] is None  # 4 positions: no early and late part either
    assert np.load(out / probe["attention"]["file"]).shape == (1, 2, 4, 4)


def test_the_induction_preset_brings_its_model_settings_and_data_and_resumes_with_them(tmp_path, capsys):
    from gptcore.training.presets import PRESETS

    out = tmp_path / "induction"
    assert main([f"--out_dir={out}", "--preset=induction", "--max_iters=6", "--eval_interval=3", "--eval_iters=1",
                 "--probe_interval=3", "--batch_size=8", "--log_interval=3", "--device=cpu"]) == 0
    meta = RunFolder(out).read_meta()
    preset = PRESETS["induction"]
    assert meta["preset"] == "induction" and meta["corpus"]["source"] is None
    assert meta["corpus"]["name"] == "induction rows"
    model = meta["model_config"]
    assert (model["n_layer"], model["n_head"], model["n_embd"], model["vocab_size"], model["pos_embedding"]) == \
        (2, 2, 64, 64, "rope")  # the preset's model, not the CPU recipe's
    train = meta["train_config"]
    assert train["learning_rate"] == preset.train["learning_rate"] and train["batch_size"] == 8  # the user's override wins
    records = read_trace(out / "trace.jsonl")
    probe = next(r for r in records if r["kind"] == "probe")
    assert len(probe["census"]["induction"]) == 2 and probe["sample"]["text"]  # census and sample on the rows' symbols
    vocab = json.loads((out / "char_vocab.json").read_text())
    assert len(vocab["chars"]) == 64  # the app reads the run with these symbols

    assert main([f"--out_dir={out}", "--resume", "--max_iters=9"]) == 0  # the preset's data comes back on resume
    assert [r["step"] for r in read_trace(out / "trace.jsonl") if r["kind"] == "train"][-1] == 8
    assert main([f"--out_dir={tmp_path / 'x'}", "--preset=induction", "--data=somewhere.txt"]) == 2
    assert "brings its own data" in capsys.readouterr().err
    assert main([f"--out_dir={tmp_path / 'y'}", "--preset=nothing"]) == 2
    assert "no such preset; choose one of induction" in capsys.readouterr().err


def test_the_induction_rows_corpus_is_seeded_like_text_windows():
    from gptcore.training.synthetic import induction_corpus

    corpus = induction_corpus()
    a, b = corpus.batch("train", 5, 4, 32, seed=0), corpus.batch("train", 5, 4, 32, seed=0)
    assert torch.equal(a[0], b[0]) and torch.equal(a[0][:, 1:], a[1][:, :-1])  # y is x shifted by one
    assert not torch.equal(a[0], corpus.batch("train", 6, 4, 32, seed=0)[0])
    assert not torch.equal(a[0], corpus.batch("val", 5, 4, 32, seed=0)[0])
    assert int(a[0].max()) < 64 and corpus.decode(a[0][0].tolist()).isprintable()
