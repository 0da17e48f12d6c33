"""Training on CUDA: steps launched without waiting and read later (the run's loop on a GPU) give
the figures `step` gives; a non-finite step found later was kept out of the weights on the device,
with every step after it; the GPU timed each step; compile (on by default there) follows eager.
Marked `cuda`; skipped where torch sees no GPU (run with `pytest -m cuda` on a machine with one)."""
from __future__ import annotations

import pytest
import torch

from gptcore import GPT, GPTConfig
from gptcore.training import NonFiniteLoss, Trainer

from test_training_core import NANO, batch_of, small_config
from test_training_launch import assert_same, state

pytestmark = [pytest.mark.cuda,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (torch sees none)")]

TC = small_config(device="cuda", compile=False)  # float32, 2 micro-batches, clipping


def test_a_cuda_trainer_compiles_by_default_and_defers_its_reads():
    trainer = Trainer(GPT(GPTConfig(**NANO), seed=0), small_config(device="cuda"))
    assert trainer.compiled and trainer.optimizer.defaults["fused"] and not trainer.reads_every_step


def test_figures_read_later_on_cuda_equal_the_ones_read_at_once():
    stepped = Trainer(GPT(GPTConfig(**NANO), seed=1), TC)
    launched = Trainer(GPT(GPTConfig(**NANO), seed=1), TC)
    losses = [stepped.step(*batch_of(it, TC)) for it in range(6)]
    for it in range(6):
        launched.launch(*batch_of(it, TC))
    records, error = launched.collect()
    assert error is None and [r.step for r in records] == list(range(6))
    assert [r.loss for r in records] == pytest.approx(losses, abs=1e-6)  # CUDA's backward sums in any order
    assert all(r.seconds > 0 for r in records)  # the GPU's own time for each step (events)
    assert [r.finished for r in records] == sorted(r.finished for r in records)


def test_a_non_finite_step_on_cuda_is_kept_out_of_the_weights_without_a_read(monkeypatch):
    import gptcore.training.trainer as trainer_module

    trainer = Trainer(GPT(GPTConfig(**NANO), seed=2), TC)
    for it in range(3):
        trainer.launch(*batch_of(it, TC))
    assert trainer.collect()[1] is None
    kept = state(trainer)
    real, calls = trainer_module.lm_loss, {"n": 0}

    def poisoned(logits, targets):
        calls["n"] += 1
        return real(logits, targets) * (float("nan") if calls["n"] <= 2 else 1.0)  # step 3's two micro-batches

    monkeypatch.setattr(trainer_module, "lm_loss", poisoned)
    for it in range(3, 6):
        trainer.launch(*batch_of(it, TC))
    records, error = trainer.collect()
    assert records == [] and isinstance(error, NonFiniteLoss) and error.step == 3 and trainer.iter_num == 3
    assert_same(state(trainer), kept)


def test_compiled_cuda_steps_follow_eager_ones():
    eager = Trainer(GPT(GPTConfig(**NANO), seed=5), TC)
    compiled = Trainer(GPT(GPTConfig(**NANO), seed=5), TC.replace(compile=True))
    for it in range(4):
        x, y = batch_of(it, TC)
        assert compiled.step(x, y) == pytest.approx(eager.step(x, y), abs=1e-4), f"step {it}"
    assert compiled.compiled and compiled.compile_failure is None
