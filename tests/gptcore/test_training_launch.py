"""A training step without waiting for the device (trainer.py's launch + collect): the figures
read later equal the ones `step` reads at once; a non-finite step found later has still changed
nothing, nor has any step launched after it; a run whose records are read in batches writes the
trace a step-by-step run writes. Also: training steps run SDPA with no hook live, and AdamW's fused
kernel is chosen on a CPU by timing (adamw_choice.py)."""
from __future__ import annotations

import json

import pytest
import torch

from gptcore import GPT, GPTConfig
from gptcore.training import NonFiniteLoss, Trainer

from test_training_core import NANO, batch_of, small_config  # the same tiny model, settings and batches

TC = small_config()  # 2 micro-batches of 3 rows a step, clipping on, float32


def state(trainer: Trainer) -> dict:
    """Weights and the optimizer's moments and step counts, cloned."""
    out = {f"w.{k}": v.detach().clone() for k, v in trainer.model.state_dict().items()}
    for i, s in enumerate(trainer.optimizer.state.values()):
        out.update({f"opt{i}.{k}": v.detach().clone() for k, v in s.items()})
    return out


def assert_same(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for name in a:
        assert torch.equal(a[name].nan_to_num(7.0), b[name].nan_to_num(7.0)), name


@pytest.mark.parametrize("fused", [True, False])
def test_figures_read_later_equal_the_ones_read_at_once(fused):
    stepped = Trainer(GPT(GPTConfig(**NANO), seed=1), small_config(), fused=fused)
    launched = Trainer(GPT(GPTConfig(**NANO), seed=1), small_config(), fused=fused)
    assert launched._guard_on_device == fused  # fused: a bad step is kept out on the device, no read
    losses = [stepped.step(*batch_of(it, TC)) for it in range(7)]
    records = []
    for it in range(7):
        launched.launch(*batch_of(it, TC))
        if it % 3 == 2 or it == 6:  # read every third step, and at the end
            got, error = launched.collect()
            assert error is None
            records += got
    assert [r.step for r in records] == list(range(7)) and launched.iter_num == 7
    assert [r.loss for r in records] == losses  # bitwise: the same arithmetic, read later
    assert records[-1].grad_norm == stepped.last_grad_norm and records[-1].grad_norms == stepped.last_grad_norms
    assert [r.lr for r in records] == [small_config().lr_at(it) for it in range(7)]
    assert all(r.seconds > 0 for r in records) and records[0].finished <= records[-1].finished
    assert launched.last_loss == losses[-1]
    assert_same(state(launched), state(stepped))
    assert launched.collect() == ([], None)  # nothing left to read


@pytest.mark.parametrize("fused", [True, False])
def test_a_non_finite_step_found_later_changed_nothing_nor_did_the_steps_after_it(monkeypatch, fused):
    """Step 3's loss is NaN (a bad batch: steps 4 and 5 are finite again). Read after step 5, the
    trainer reports step 3 and stands where `step` would have stopped: weights, Adam's moments and
    step counts as after step 2, iter_num 3, no gradient kept."""
    import gptcore.training.trainer as trainer_module

    real = trainer_module.lm_loss
    calls = {"n": 0}

    def poisoned(logits, targets):
        calls["n"] += 1
        loss = real(logits, targets)
        return loss * float("nan") if calls["n"] in (7, 8) else loss  # both micro-batches of step 3

    reference = Trainer(GPT(GPTConfig(**NANO), seed=2), small_config(), fused=fused)
    for it in range(3):
        reference.step(*batch_of(it, TC))
    kept = state(reference)

    monkeypatch.setattr(trainer_module, "lm_loss", poisoned)
    trainer = Trainer(GPT(GPTConfig(**NANO), seed=2), small_config(), fused=fused)
    for it in range(6):
        trainer.launch(*batch_of(it, TC))
    records, error = trainer.collect()
    assert [r.step for r in records] == [0, 1, 2]
    assert isinstance(error, NonFiniteLoss) and error.step == 3 and "step 3: the loss is nan" in str(error)
    assert trainer.iter_num == 3 and trainer.last_loss == records[-1].loss
    assert_same(state(trainer), kept)
    assert all(p.grad is None for p in trainer.model.parameters())
    monkeypatch.setattr(trainer_module, "lm_loss", real)  # the batch was bad, the run can go on from step 3
    assert trainer.step(*batch_of(3, TC)) == reference.step(*batch_of(3, TC))


def test_step_still_raises_at_the_bad_step_with_the_weights_kept():
    trainer = Trainer(GPT(GPTConfig(**NANO), seed=0), TC)
    trainer.step(*batch_of(0, TC))
    with torch.no_grad():
        trainer.model.blocks[0].mlp.c_fc.weight[0, 0] = float("nan")
    before = state(trainer)
    with pytest.raises(NonFiniteLoss, match="step 1"):
        trainer.step(*batch_of(1, TC))
    assert trainer.iter_num == 1
    assert_same(state(trainer), before)


def test_training_steps_run_sdpa_with_no_hook_live(monkeypatch):
    """The fused kernel (flash attention on a GPU) in every layer of every micro-batch, forward and
    backward; the explicit path, which materialises the (T, T) pattern, only where a hook asks."""
    import torch.nn.functional as F

    calls = []
    real = F.scaled_dot_product_attention

    def counted(*args, **kwargs):
        calls.append(kwargs.get("is_causal"))
        return real(*args, **kwargs)

    monkeypatch.setattr(F, "scaled_dot_product_attention", counted)
    trainer = Trainer(GPT(GPTConfig(**NANO), seed=0), TC)
    assert not any(hp.active for hp in trainer.model.hook_dict.values())
    assert not any(block.attn.wants_pattern for block in trainer.model.blocks)
    trainer.step(*batch_of(0, TC))
    assert calls == [True] * (NANO["n_layer"] * 2)  # 2 layers × 2 micro-batches, causal, no mask tensor


def test_a_run_read_in_batches_writes_the_trace_a_step_by_step_run_writes(tmp_path, monkeypatch):
    """On CUDA the loop reads the steps' figures at log steps only; forced here on the CPU, the
    train records (steps, losses, gradient norms, lr) equal a run read every step, they come
    before each eval, and a non-finite step is still found, named and its scheme stopped."""
    from gptcore.train import main
    from gptcore.training.trace import read_trace

    text = tmp_path / "t.txt"
    text.write_text("the cat sat on the mat and the dog ran far away home. " * 80, encoding="utf-8")
    args = ["--n_layer=1", "--n_head=2", "--n_embd=16", "--block_size=16", "--batch_size=2", "--eval_iters=1",
            "--eval_interval=4", "--probe_interval=0", "--log_interval=3", "--warmup_iters=2", "--lr_decay_iters=40",
            "--max_iters=10", "--device=cpu", "--dtype=float32", f"--data={text}"]

    def train_records(out):
        records = read_trace(out / "trace.jsonl")
        return records, [{k: r[k] for k in ("scheme", "step", "loss", "lr", "grad_norm", "grad_norms")}
                         for r in records if r["kind"] == "train"]

    assert main([*args, f"--out_dir={tmp_path / 'each'}"]) == 0
    monkeypatch.setattr(Trainer, "reads_every_step", property(lambda self: False))
    assert main([*args, f"--out_dir={tmp_path / 'batched'}"]) == 0
    each_records, each = train_records(tmp_path / "each")
    batched_records, batched = train_records(tmp_path / "batched")
    assert batched == each and [r["step"] for r in batched] == list(range(10))
    kinds = [(r["kind"], r.get("step")) for r in batched_records if r["kind"] in ("train", "eval")]
    assert kinds == [(r["kind"], r.get("step")) for r in each_records if r["kind"] in ("train", "eval")]
    assert all(r["dt"] > 0 and r["tokens_per_s"] > 0 for r in batched_records if r["kind"] == "train")
    json.dumps(batched_records, allow_nan=False)  # strict JSON still

    import gptcore.training.trainer as trainer_module

    real, calls = trainer_module.lm_loss, {"n": 0}

    def poisoned(logits, targets):
        if torch.is_grad_enabled():
            calls["n"] += 1
            if calls["n"] > 5:  # training step 5 on (one micro-batch a step)
                return real(logits, targets) * float("nan")
        return real(logits, targets)

    monkeypatch.setattr(trainer_module, "lm_loss", poisoned)
    assert main([*args, f"--out_dir={tmp_path / 'nan'}"]) == 1
    records = read_trace(tmp_path / "nan" / "trace.jsonl")
    assert [r["step"] for r in records if r["kind"] == "train"] == [0, 1, 2, 3, 4]
    assert [r["step"] for r in records if r["kind"] == "diverged"] == [5] and records[-1]["kind"] == "error"
    assert "step 5" in records[-1]["message"]


# -- AdamW's kernel on a CPU, by measurement ---------------------------------------------------------

def _never(groups):
    raise AssertionError("timed although the answer was cached")


@pytest.mark.parametrize("fused_ms, plain_ms, fused", [(0.7, 6.2, True), (9.0, 6.2, False)])
def test_cpu_adamw_is_the_kernel_timing_finds_faster_and_the_answer_is_cached(monkeypatch, tmp_path, fused_ms,
                                                                             plain_ms, fused):
    from gptcore.training import adamw_choice

    monkeypatch.setattr(adamw_choice, "cache_path", lambda: tmp_path / "adamw.json")
    monkeypatch.setattr(adamw_choice, "time_both", lambda groups: (fused_ms, plain_ms))
    trainer = Trainer(GPT(GPTConfig(**NANO), seed=0), TC)
    assert bool(trainer.optimizer.defaults.get("fused")) == fused
    assert trainer.fused_choice.source == "measured" and trainer.fused_choice.plain_ms == plain_ms
    assert trainer.fused_choice.describe().endswith(f"→ {'fused' if fused else 'plain'} (measured now)")
    monkeypatch.setattr(adamw_choice, "time_both", _never)
    again = Trainer(GPT(GPTConfig(**NANO), seed=0), TC)
    assert bool(again.optimizer.defaults.get("fused")) == fused and again.fused_choice.source == "cached"
    assert Trainer(GPT(GPTConfig(**NANO), seed=0), small_config(), fused=not fused).fused_choice is None  # asked


def test_the_adamw_timer_leaves_the_parameters_and_the_random_state_as_they_were():
    from gptcore.training.adamw_choice import time_both
    from gptcore.training.trainer import optimizer_groups

    model = GPT(GPTConfig(**NANO), seed=0)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    rng = torch.get_rng_state()
    fused_ms, plain_ms = time_both(optimizer_groups(model, 0.1), reps=1)
    assert fused_ms > 0 and plain_ms > 0
    assert torch.equal(torch.get_rng_state(), rng)
    assert all(torch.equal(v, before[k]) for k, v in model.state_dict().items())
    assert all(p.grad is None for p in model.parameters())
