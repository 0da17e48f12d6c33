"""nanoGPT train.py's command line runs here unchanged (issue 34): its config files (read, never
run), its own settings (dataset, eval_only, always_save_checkpoint; wandb_* and backend accepted
with a note; compile honoured), and every refusal's advice works when followed."""
from __future__ import annotations

import math

import pytest

from gptcore.train import main
from gptcore.training.run import RunFolder
from gptcore.training.trace import read_trace
from test_nanogpt_interop import TEXT, prepare_py

# config/train_shakespeare_char.py's statements, scaled down to a few seconds
CONFIG = '''# train a miniature character-level shakespeare model
out_dir = 'out-shakespeare-char'
eval_interval = 2
eval_iters = 2
log_interval = 10
always_save_checkpoint = False
wandb_log = False
wandb_project = 'shakespeare-char'
wandb_run_name = 'mini-gpt'
dataset = 'tiny_char'
gradient_accumulation_steps = 1
batch_size = 4
block_size = 16
n_layer = 1
n_head = 2
n_embd = 16
dropout = 0.0
learning_rate = 1e-2
max_iters = 12
lr_decay_iters = 12
min_lr = 1e-3
beta2 = 0.99
warmup_iters = 100
'''


@pytest.fixture
def nanogpt_repo(tmp_path, monkeypatch):
    """nanoGPT's checkout: data/tiny_char prepared, config/ holding CONFIG; the current folder."""
    prepare_py(tmp_path / "data" / "tiny_char", TEXT)
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "train_tiny_char.py").write_text(CONFIG, encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_a_nanogpt_command_with_its_config_file_runs_as_train_py_would(nanogpt_repo, capsys):
    assert main(["config/train_tiny_char.py", "--device=cpu", "--compile=False", "--dtype=float32",
                 "--probe_interval=0", "--learning_rate=0.3", "--min_lr=0.3"]) == 0, capsys.readouterr().err
    out = nanogpt_repo / "out-shakespeare-char"
    meta = RunFolder(out).read_meta()
    assert meta["train_config"]["warmup_iters"] == 100 and meta["train_config"]["max_iters"] == 12  # from the file
    assert meta["train_config"]["learning_rate"] == 0.3  # the command line after the file overrides it
    assert meta["model_config"]["n_embd"] == 16 and meta["corpus"]["source"].endswith("data/tiny_char")
    records = read_trace(out / "trace.jsonl")
    said = [r["text"] for r in records if r["kind"] == "message"]
    assert any("lr_decay_iters=12 is not past warmup_iters=100" in t for t in said)  # a warning, not a refusal
    assert not any("compile" in t for t in said)  # compile=False: nothing to say
    best, skipped = math.inf, 0
    for record in (r for r in records if r["kind"] in ("eval", "checkpoint")):
        if record["kind"] == "eval":
            improved, best = record["val"] < best, min(best, record["val"])
        else:  # always_save_checkpoint=False: ckpt.pt only when val improved
            assert ("latest" in record) == improved, record
            skipped += not improved
    assert skipped  # lr 0.3 makes the val loss rise between some evals: those wrote no ckpt.pt


def test_eval_only_evaluates_step_zero_and_stops(nanogpt_repo):
    assert main(["config/train_tiny_char.py", "--eval_only=True", "--device=cpu", "--dtype=float32",
                 "--compile=True", "--wandb_log=True"]) == 0
    records = read_trace(nanogpt_repo / "out-shakespeare-char" / "trace.jsonl")
    assert [r["kind"] for r in records if r["kind"] in ("train", "eval")] == ["eval"]
    assert records[-1]["kind"] == "done" and records[-1]["reason"] == "eval_only"
    said = " ".join(r["text"] for r in records if r["kind"] == "message")
    assert "wandb_log=True" in said and "compile" not in said  # compile is a setting now, not a note
    assert RunFolder(nanogpt_repo / "out-shakespeare-char").read_meta()["train_config"]["compile"] is True


def test_a_config_line_that_computes_is_refused_with_advice_that_works(nanogpt_repo, capsys):
    config = nanogpt_repo / "config" / "finetune.py"
    config.write_text(CONFIG.replace("wandb_run_name = 'mini-gpt'", "import time\nwandb_run_name = 'ft-' + "
                                                                    "str(time.time())"), encoding="utf-8")
    assert main([str(config), "--device=cpu", "--dtype=float32", "--max_iters=2", "--eval_only=True"]) == 2
    err = capsys.readouterr().err
    assert "line 9: is not a `name = value` setting" in err and "read, not run" in err
    config.write_text(CONFIG.replace("wandb_run_name = 'mini-gpt'", "wandb_run_name = 'ft-' + str(1)"))
    assert main([str(config), "--device=cpu", "--dtype=float32", "--eval_only=True"]) == 2
    err = capsys.readouterr().err
    assert "computes wandb_run_name's value" in err and "wandb_run_name = 'ft'" in err
    config.write_text(CONFIG.replace("wandb_run_name = 'mini-gpt'", "wandb_run_name = 'ft'"))  # the advice
    assert main([str(config), "--device=cpu", "--dtype=float32", "--eval_only=True"]) == 0


def test_dataset_and_data_together_are_refused_and_either_alone_runs(nanogpt_repo, capsys):
    args = ["--device=cpu", "--dtype=float32", "--eval_only=True", "--n_layer=1", "--n_head=2", "--n_embd=16",
            "--block_size=16", "--eval_iters=1"]
    assert main(["--dataset=tiny_char", "--data=data/tiny_char", "--out_dir=a", *args]) == 2
    assert "keep one" in capsys.readouterr().err
    assert main(["--dataset=tiny_char", "--out_dir=b", *args]) == 0
    assert main(["--data=data/tiny_char", "--out_dir=c", *args]) == 0
