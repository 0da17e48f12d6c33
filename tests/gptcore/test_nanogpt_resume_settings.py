"""Whatever nanoGPT's train.py runs, `python -m gptcore.train --init_from=resume` continues, the
same way (issue 34). Each row of the table is a run of train.py's loop (nanogpt_oracle.train_py_run,
restated from train.py) with settings its configurator accepts; its out_dir/ckpt.pt is resumed here,
and every step's lr must be train.py's get_lr (restated below) and its loss the reference loop's
continued from the same checkpoint. What we think unwise is a warning in the trace, not a refusal;
each remaining refusal names a value that, set, clears it.
"""
from __future__ import annotations

import math

import pytest
import torch

from gptcore.train import main
from gptcore.training.config import TrainConfig, TrainConfigError
from gptcore.training.trace import read_trace
from nanogpt_oracle import NanoGPTShaped, reference_step, train_py_run, train_py_settings
from test_nanogpt_interop import TEXT, prepare_py

ARGS = dict(n_layer=1, n_head=2, n_embd=16, block_size=16, bias=False, dropout=0.0)
SMALL = dict(batch_size=2, gradient_accumulation_steps=1, eval_iters=1, learning_rate=3e-3, min_lr=3e-4,
             dataset="tiny_char", device="cpu")


def get_lr(it, s):
    """train.py: `lr = get_lr(iter_num) if decay_lr else learning_rate`, get_lr as written there."""
    if not s.decay_lr:
        return s.learning_rate
    if it < s.warmup_iters:
        return s.learning_rate * (it + 1) / (s.warmup_iters + 1)
    if it > s.lr_decay_iters:
        return s.min_lr
    decay_ratio = (it - s.warmup_iters) / (s.lr_decay_iters - s.warmup_iters)
    assert 0 <= decay_ratio <= 1
    coeff = 0.5 * (1.0 + math.cos(math.pi * decay_ratio))
    return s.min_lr + coeff * (s.learning_rate - s.min_lr)


# (what train.py ran with, what the resume's command line adds)
TABLE = {
    "issue 34: warmup_iters=2000 past lr_decay_iters=max_iters": (
        dict(max_iters=8, lr_decay_iters=8, eval_interval=4), dict(max_iters=12)),
    "warm-up ends past lr_decay_iters, then the floor": (
        dict(max_iters=4, warmup_iters=6, lr_decay_iters=3, eval_interval=2), dict(max_iters=9)),
    "decay_lr False with warmup past lr_decay_iters": (
        dict(max_iters=6, decay_lr=False, warmup_iters=50, lr_decay_iters=5, eval_interval=3), dict(max_iters=9)),
    "max_iters below eval_interval on resume": (
        dict(max_iters=4, warmup_iters=2, lr_decay_iters=20, eval_interval=4), dict(max_iters=7, eval_interval=100)),
    "gradient_accumulation_steps odd": (
        dict(max_iters=4, gradient_accumulation_steps=3, warmup_iters=1, lr_decay_iters=9, eval_interval=2),
        dict(max_iters=7)),
    "always_save_checkpoint False": (
        dict(max_iters=6, always_save_checkpoint=False, warmup_iters=2, lr_decay_iters=10, eval_interval=2),
        dict(max_iters=9)),
    "min_lr above learning_rate": (
        dict(max_iters=4, min_lr=6e-3, warmup_iters=1, lr_decay_iters=8, eval_interval=4), dict(max_iters=9)),
    "learning_rate 0 and grad_clip 0": (
        dict(max_iters=4, learning_rate=0.0, min_lr=0.0, grad_clip=0.0, warmup_iters=0, lr_decay_iters=8,
             eval_interval=2), dict(max_iters=6)),
    "warmup_iters 0, lr_decay_iters below max_iters": (
        dict(max_iters=6, warmup_iters=0, lr_decay_iters=4, eval_interval=3), dict(max_iters=9)),
    "eval_iters 0 (every eval NaN)": (
        dict(max_iters=4, eval_iters=0, warmup_iters=1, lr_decay_iters=8, eval_interval=2), dict(max_iters=6)),
}


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    root = tmp_path_factory.mktemp("nanoGPT")
    prepare_py(root / "data" / "tiny_char", TEXT)
    return root


@pytest.mark.parametrize("name", list(TABLE))
def test_a_run_nanogpt_accepts_resumes_here_with_its_lr_at_every_step(repo, name, capsys):
    from gptcore.training.data import load_corpus

    ran_with, resume_with = TABLE[name]
    settings = train_py_settings(**{**SMALL, **ran_with})
    corpus = load_corpus(repo / "data" / "tiny_char")
    rows = settings.gradient_accumulation_steps * settings.batch_size

    def batches(it):  # the global batch our loop draws at `it` (seed 1337, train.py's)
        return corpus.batch("train", it, rows, ARGS["block_size"], 1337)

    def eval_batches(split, k):
        return corpus.batch(split, k, settings.batch_size, ARGS["block_size"], 1337, stream="eval")

    out = repo / f"out-{list(TABLE).index(name)}"
    model_args = {**ARGS, "vocab_size": corpus.vocab_size}
    saved = train_py_run(out, settings, model_args, batches, eval_batches)
    assert saved is not None  # train.py wrote a checkpoint
    ckpt = torch.load(out / "ckpt.pt", weights_only=True)  # what train.py's resume starts from

    command = [f"--{k}={v}" for k, v in resume_with.items()]
    exit_code = main(["--init_from=resume", f"--out_dir={out}", "--dtype=float32", "--device=cpu", *command])
    assert exit_code == 0, capsys.readouterr().err
    records = read_trace(out / "trace.jsonl")
    trained = [r for r in records if r["kind"] == "train"]
    resumed = train_py_settings(**{**vars(settings), **resume_with})
    assert [r["step"] for r in trained] == list(range(saved, resumed.max_iters))
    model = NanoGPTShaped(**ckpt["model_args"])
    model.load_state_dict({k.removeprefix("_orig_mod."): v for k, v in ckpt["model"].items()})
    optimizer = torch.optim.AdamW([{"params": [p for p in model.parameters() if p.dim() >= 2]},
                                   {"params": [p for p in model.parameters() if p.dim() < 2]}])
    optimizer.load_state_dict(ckpt["optimizer"])
    b = settings.batch_size
    for record in trained:
        it = record["step"]
        assert record["lr"] == get_lr(it, resumed), (name, it)
        x, y = batches(it)
        micro = [(x[i * b:(i + 1) * b], y[i * b:(i + 1) * b]) for i in range(resumed.gradient_accumulation_steps)]
        assert record["loss"] == pytest.approx(reference_step(model, optimizer, it, micro, resumed), abs=2e-4), it
    warned = [r["text"] for r in records if r["kind"] == "message" and r["text"].startswith("warning:")]
    assert bool(warned) == bool(TrainConfig.from_dict(_ours(resumed)).warnings())


def _ours(s) -> dict:
    fields = {f for f in TrainConfig.__dataclass_fields__ if f not in ("device", "dtype", "seed")}
    return {k: v for k, v in vars(s).items() if k in fields}


def test_the_issue_run_warns_and_says_why_instead_of_refusing():
    cfg = TrainConfig(max_iters=150, lr_decay_iters=100)  # warmup_iters=2000, train.py's default
    (text,) = cfg.warnings()
    assert "lr_decay_iters=100 is not past warmup_iters=2000" in text and "ends inside the warm-up" in text
    assert [cfg.lr_at(it) for it in (0, 149)] == [6e-4 * 1 / 2001, 6e-4 * 150 / 2001]
    advised = cfg.replace(warmup_iters=int(text.rsplit("warmup_iters=", 1)[1].rstrip(")")))
    assert advised.warnings() == [] and advised.lr_at(100) == advised.min_lr  # the advice, followed, is a cosine


def test_where_train_py_divides_zero_by_zero_the_lr_is_the_floor():
    """warmup_iters == lr_decay_iters: train.py's get_lr raises ZeroDivisionError at that step;
    we give min_lr (the zero-length cosine at its end), as the step after it."""
    s = train_py_settings(warmup_iters=5, lr_decay_iters=5, learning_rate=1e-3, min_lr=1e-4)
    cfg = TrainConfig(**_ours(s))
    with pytest.raises(ZeroDivisionError):
        get_lr(5, s)
    assert cfg.lr_at(5) == cfg.lr_at(6) == 1e-4
    assert [cfg.lr_at(it) for it in range(5)] == [get_lr(it, s) for it in range(5)]


@pytest.mark.parametrize("field, value", [
    ("batch_size", 0), ("gradient_accumulation_steps", 0), ("eval_interval", 0), ("max_iters", -1),
    ("learning_rate", -1e-3), ("learning_rate", float("nan")), ("weight_decay", -0.1), ("beta1", 1.0),
    ("beta2", -0.5), ("decay_lr", "yes"), ("dtype", "fp8"), ("device", 3), ("batch_size", 2.5),
    ("grad_clip", float("inf")),
])
def test_every_refusal_names_a_value_that_clears_it(field, value):
    with pytest.raises(TrainConfigError) as info:
        TrainConfig.cpu_recipe(**{field: value})
    error = info.value
    assert error.field == field and f"{field}={error.fix}" in str(error)
    TrainConfig.cpu_recipe(**{field: error.fix})  # followed: no error


def test_the_accumulation_refusal_names_a_multiple_that_clears_it():
    cfg = TrainConfig.cpu_recipe(gradient_accumulation_steps=3)
    with pytest.raises(TrainConfigError) as info:
        cfg.local_accumulation(2)
    assert "gradient_accumulation_steps=4" in str(info.value) and "(1, 3)" in str(info.value)
    assert cfg.replace(gradient_accumulation_steps=info.value.fix).local_accumulation(2) == 2
