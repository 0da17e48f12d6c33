"""Trainer against train.py's loop (written out in nanogpt_oracle.py), checkpoints nanoGPT can
load, resume equality, and a NaN loss that stops with the weights kept."""
from __future__ import annotations

import copy
import errno
import math

import pytest
import torch

from gptcore import GPT, GPTConfig, load
from gptcore.training import NonFiniteLoss, TrainConfig, TrainConfigError, Trainer
from gptcore.training.checkpoint import OUR_FORMAT, nanogpt_args
from gptcore.training.errors import CheckpointError

from nanogpt_oracle import NanoGPTShaped, reference_lr, reference_optimizer, reference_step

VOCAB = 23
NANO = dict(vocab_size=VOCAB, block_size=16, n_layer=2, n_head=2, n_embd=32, bias=True, activation="gelu")


def small_config(**overrides) -> TrainConfig:
    values = dict(batch_size=3, gradient_accumulation_steps=2, max_iters=30, learning_rate=3e-3, min_lr=3e-4,
                  warmup_iters=5, lr_decay_iters=25, beta2=0.99, grad_clip=1.0, eval_iters=2, device="cpu",
                  dtype="float32")
    values.update(overrides)
    return TrainConfig(**values)


def batch_of(it: int, tc: TrainConfig, T: int = 16) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1000 + it)
    data = torch.randint(VOCAB, (tc.tokens_per_iter, T + 1), generator=g)  # (rows, T+1)
    return data[:, :-1].contiguous(), data[:, 1:].contiguous()


def weights(model) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


# -- the schedule and the settings ---------------------------------------------------------------

def test_lr_at_is_train_py_get_lr():
    tc = small_config()
    for it in range(40):
        assert tc.lr_at(it) == reference_lr(it, tc.learning_rate, tc.warmup_iters, tc.lr_decay_iters, tc.min_lr)
    assert tc.lr_at(0) == pytest.approx(3e-3 / 6)  # warmup starts above 0
    assert tc.lr_at(5) == pytest.approx(3e-3)  # peak at the end of warmup
    assert tc.lr_at(26) == 3e-4  # floor past lr_decay_iters
    assert small_config(decay_lr=False).lr_at(0) == 3e-3


def test_cpu_recipe_is_nanogpts():
    tc = TrainConfig.cpu_recipe()
    assert (tc.batch_size, tc.learning_rate, tc.beta2, tc.warmup_iters, tc.max_iters, tc.lr_decay_iters,
            tc.min_lr, tc.eval_iters, tc.gradient_accumulation_steps) == (12, 1e-3, 0.99, 100, 2000, 2000, 1e-4, 20, 1)
    from gptcore.training import CPU_RECIPE_MODEL

    cfg = GPTConfig(vocab_size=103, **CPU_RECIPE_MODEL)
    assert (cfg.n_layer, cfg.n_head, cfg.n_embd, cfg.block_size, cfg.dropout) == (4, 4, 128, 64, 0.0)
    assert nanogpt_args(cfg) is not None  # the recipe's model is one nanoGPT can load


@pytest.mark.parametrize("field, value, words", [
    ("batch_size", 0, "at least 1"), ("learning_rate", float("nan"), "finite"), ("beta2", 1.0, "[0, 1)"),
    ("weight_decay", -1.0, "at least 0"), ("eval_interval", 0, "at least 1"), ("dtype", "fp8", "float32"),
])
def test_bad_settings_name_the_field(field, value, words):
    with pytest.raises(TrainConfigError) as info:
        small_config(**{field: value})
    assert info.value.field == field and words in str(info.value)


def test_accumulation_must_divide_among_processes():
    tc = small_config(gradient_accumulation_steps=40)
    assert tc.local_accumulation(8) == 5
    with pytest.raises(TrainConfigError, match="gradient_accumulation_steps.*3 processes.*multiple of 3"):
        tc.local_accumulation(3)


def test_auto_dtype_on_a_cpu_is_what_timing_finds_faster(monkeypatch, tmp_path):
    from gptcore.training import autocast_choice

    monkeypatch.setattr(autocast_choice, "cache_path", lambda: tmp_path / "speed.json")
    model = GPT(GPTConfig(**NANO), seed=0)
    monkeypatch.setattr(autocast_choice, "time_both", lambda m, b: (80.0, 50.0))  # bf16 slower
    assert Trainer(model, small_config(dtype="auto")).dtype == "float32"
    (tmp_path / "speed.json").unlink()
    monkeypatch.setattr(autocast_choice, "time_both", lambda m, b: (20.0, 50.0))  # bf16 faster
    trainer = Trainer(model, small_config(dtype="auto"))
    assert trainer.dtype == "bfloat16" and trainer.dtype_choice.bf16_ms == 20.0
    assert TrainConfig().dtype == "auto"


def test_bf16_autocast_trains_close_to_float32():
    tc = small_config()
    runs = {}
    for dtype in ("float32", "bfloat16"):
        trainer = Trainer(GPT(GPTConfig(**NANO), seed=6), tc.replace(dtype=dtype))
        runs[dtype] = [trainer.step(*batch_of(it, tc)) for it in range(6)]
        assert trainer.model.embed.weight.dtype == torch.float32  # weights and Adam state stay float32
    assert runs["bfloat16"] == pytest.approx(runs["float32"], abs=3e-2)
    assert runs["bfloat16"] != runs["float32"]  # autocast did run in bfloat16


def test_step_refuses_a_batch_that_is_not_global():
    trainer = Trainer(GPT(GPTConfig(**NANO), seed=0), small_config())
    x, y = batch_of(0, small_config())
    with pytest.raises(ValueError, match=r"global batch.*6"):
        trainer.step(x[:3], y[:3])


# -- the loop ------------------------------------------------------------------------------------

def test_steps_equal_train_py_reference_loop():
    """30 steps with warmup, cosine and a floor, 2 micro-batches, clipping: the same loss at every
    step and the same weights at the end as train.py's loop on the same initial weights and batches."""
    tc = small_config()
    model = GPT(GPTConfig(**NANO), seed=3)
    initial = weights(model)
    reference = copy.deepcopy(model)
    reference.tie_weights()
    ref_opt = reference_optimizer(reference, tc.weight_decay, tc.learning_rate, (tc.beta1, tc.beta2))
    trainer = Trainer(model, tc, fused=False)  # train.py's CPU AdamW (the default fused one differs by an ulp)
    clipped = 0
    for it in range(30):
        x, y = batch_of(it, tc)
        ours = trainer.step(x, y)
        clipped += trainer.last_grad_norm > tc.grad_clip
        theirs = reference_step(reference, ref_opt, it, [(x[:3], y[:3]), (x[3:], y[3:])], tc)
        assert ours == pytest.approx(theirs, abs=1e-6), f"step {it}"  # float32 vs float64 sum of 2 losses
        assert trainer.last_lr == reference_lr(it, tc.learning_rate, tc.warmup_iters, tc.lr_decay_iters, tc.min_lr)
    assert trainer.iter_num == 30
    assert clipped > 0  # clipping was exercised, not just configured
    for (name, a), b in zip(model.state_dict().items(), reference.state_dict().values()):
        assert torch.equal(a, b), name  # bitwise: the same operations in the same order
    assert not torch.equal(model.embed.weight, initial["embed.weight"])  # the steps did move the weights


def test_fused_adamw_default_follows_the_reference_loop(monkeypatch, tmp_path):
    from gptcore.training import adamw_choice

    monkeypatch.setattr(adamw_choice, "cache_path", lambda: tmp_path / "adamw.json")
    monkeypatch.setattr(adamw_choice, "time_both", lambda groups: (0.7, 6.2))  # fused timed faster, as here
    tc = small_config()
    model = GPT(GPTConfig(**NANO), seed=3)
    reference = copy.deepcopy(model)
    reference.tie_weights()
    ref_opt = reference_optimizer(reference, tc.weight_decay, tc.learning_rate, (tc.beta1, tc.beta2))
    trainer = Trainer(model, tc)
    assert trainer.optimizer.defaults["fused"]
    for it in range(30):
        x, y = batch_of(it, tc)
        ours = trainer.step(x, y)
        assert ours == pytest.approx(reference_step(reference, ref_opt, it, [(x[:3], y[:3]), (x[3:], y[3:])], tc),
                                     abs=1e-5), f"step {it}"
    C = NANO["n_embd"]
    for (name, a), b in zip(model.state_dict().items(), reference.state_dict().values()):
        if name.endswith("c_attn.bias"):  # the key bias's gradient is 0 up to float noise, which Adam
            a, b = torch.cat([a[:C], a[2 * C:]]), torch.cat([b[:C], b[2 * C:]])  # scales to lr-sized steps
        assert torch.allclose(a, b, atol=1e-5, rtol=0), name


def test_weight_decay_only_on_matrices_and_tied_once():
    trainer = Trainer(GPT(GPTConfig(**NANO), seed=0), small_config())
    decay, no_decay = trainer.optimizer.param_groups
    assert decay["weight_decay"] == 0.1 and no_decay["weight_decay"] == 0.0
    assert all(p.dim() >= 2 for p in decay["params"]) and all(p.dim() < 2 for p in no_decay["params"])
    ids = [id(p) for g in trainer.optimizer.param_groups for p in g["params"]]
    assert len(ids) == len(set(ids)) == len(list(trainer.model.parameters()))
    assert id(trainer.model.embed.weight) in ids and trainer.model.unembed.weight is trainer.model.embed.weight


def test_grad_norms_per_part():
    trainer = Trainer(GPT(GPTConfig(**NANO), seed=0), small_config())
    trainer.step(*batch_of(0, small_config()))
    norms = trainer.last_grad_norms
    assert list(norms) == ["embed", "pos_embed", "blocks.0", "blocks.1", "ln_final"]
    assert all(v > 0 for v in norms.values())
    assert math.sqrt(sum(v * v for v in norms.values())) == pytest.approx(trainer.last_grad_norm, rel=1e-5)


def test_non_finite_loss_stops_with_weights_kept():
    trainer = Trainer(GPT(GPTConfig(**NANO), seed=0), small_config())
    trainer.step(*batch_of(0, small_config()))
    with torch.no_grad():
        trainer.model.blocks[0].mlp.c_fc.weight[0, 0] = float("nan")
    before = weights(trainer.model)
    with pytest.raises(NonFiniteLoss) as info:
        trainer.step(*batch_of(1, small_config()))
    assert info.value.step == 1 and "step 1" in str(info.value) and "kept from step 0" in str(info.value)
    assert trainer.iter_num == 1
    for name, tensor in weights(trainer.model).items():
        assert torch.equal(tensor.nan_to_num(7.0), before[name].nan_to_num(7.0)), name
    assert all(p.grad is None for p in trainer.model.parameters())


def test_estimate_loss_is_eval_mode_mean_and_tracks_best():
    tc = small_config(eval_iters=3)
    model = GPT(GPTConfig(**{**NANO, "dropout": 0.5}), seed=0)
    trainer = Trainer(model, tc)
    asked = []

    def batches(split, k):
        asked.append((split, k))
        x, y = batch_of(k + (0 if split == "train" else 50), tc)
        return x[:tc.batch_size], y[:tc.batch_size]

    losses = trainer.estimate_loss(batches)
    assert asked == [("train", 0), ("train", 1), ("train", 2), ("val", 0), ("val", 1), ("val", 2)]
    assert trainer.model.training and trainer.best_val_loss == losses["val"]  # back to training mode
    model.eval()
    with torch.no_grad():
        expected = sum(float(torch.nn.functional.cross_entropy(model(x).flatten(0, 1), y.flatten()))
                       for x, y in (batches("val", k) for k in range(3))) / 3
    assert losses["val"] == pytest.approx(expected, rel=1e-6)  # dropout was off


# -- checkpoints -----------------------------------------------------------------------------------

def test_ckpt_is_nanogpts_and_loads_strictly_in_its_model(tmp_path):
    tc = small_config()
    trainer = Trainer(GPT(GPTConfig(**NANO), seed=1), tc)
    for it in range(3):
        trainer.step(*batch_of(it, tc))
    trainer.save(tmp_path / "ckpt.pt")
    ckpt = torch.load(tmp_path / "ckpt.pt", weights_only=True)
    assert {"model", "optimizer", "model_args", "iter_num", "best_val_loss", "config"} <= set(ckpt)
    assert ckpt["iter_num"] == 3 and ckpt["config"]["learning_rate"] == tc.learning_rate
    args = ckpt["model_args"]
    assert args == dict(n_layer=2, n_head=2, n_embd=32, block_size=16, bias=True, vocab_size=VOCAB, dropout=0.0)
    oracle = NanoGPTShaped(**args)
    oracle.load_state_dict(ckpt["model"], strict=True)  # nanoGPT's names, nothing missing or extra
    x, _ = batch_of(9, tc)
    trainer.model.eval()
    with torch.no_grad():
        assert torch.allclose(oracle(x), trainer.model(x), atol=1e-5)
    # and the optimizer state indexes parameters in nanoGPT's order: shapes line up one for one
    their_optimizer = reference_optimizer(oracle, 0.1, 1e-3, (0.9, 0.99))
    shapes = [p.shape for g in their_optimizer.param_groups for p in g["params"]]
    saved = ckpt["optimizer"]["state"]
    assert [saved[i]["exp_avg"].shape for i in range(len(shapes))] == shapes
    their_optimizer.load_state_dict(ckpt["optimizer"])  # train.py's resume would take it


def test_untied_or_tanh_models_save_in_our_format_that_load_opens(tmp_path):
    for cfg in (GPTConfig(**{**NANO, "tie_weights": False}), GPTConfig(**{**NANO, "activation": "gelu_tanh"}),
                GPTConfig(**{**NANO, "norm": "rmsnorm", "pos_embedding": "rope"})):
        assert nanogpt_args(cfg) is None
        trainer = Trainer(GPT(cfg, seed=2), small_config())
        trainer.step(*batch_of(0, small_config()))
        trainer.save(tmp_path / "ckpt.pt")
        ckpt = torch.load(tmp_path / "ckpt.pt", weights_only=True)
        assert ckpt["format"] == OUR_FORMAT and "model_args" not in ckpt  # nanoGPT would refuse, not misread
        model, info = load(tmp_path, device="cpu")
        assert info.config == cfg and info.status == "trained"
        x, _ = batch_of(5, small_config())
        trainer.model.eval()
        with torch.no_grad():
            assert torch.equal(model(x), trainer.model(x))


def test_resume_equals_uninterrupted(tmp_path):
    """k steps + save + resume + (n - k) steps == n steps, bitwise."""
    tc = small_config()
    n, k = 12, 5
    straight = Trainer(GPT(GPTConfig(**NANO), seed=4), tc)
    straight_losses = [straight.step(*batch_of(it, tc)) for it in range(n)]

    first = Trainer(GPT(GPTConfig(**NANO), seed=4), tc)
    losses = [first.step(*batch_of(it, tc)) for it in range(k)]
    first.best_val_loss = 2.5
    first.save(tmp_path / "ckpt.pt")
    del first
    resumed = Trainer.from_checkpoint(tmp_path / "ckpt.pt", tc)
    assert resumed.iter_num == k and resumed.best_val_loss == 2.5
    losses += [resumed.step(*batch_of(it, tc)) for it in range(k, n)]
    assert losses == straight_losses
    for name, tensor in resumed.model.state_dict().items():
        assert torch.equal(tensor, straight.model.state_dict()[name]), name


def test_a_failed_save_keeps_the_previous_checkpoint(tmp_path, monkeypatch):
    tc = small_config()
    trainer = Trainer(GPT(GPTConfig(**NANO), seed=1), tc)
    trainer.save(tmp_path / "ckpt.pt")
    before = (tmp_path / "ckpt.pt").read_bytes()
    trainer.step(*batch_of(0, tc))

    def full_disk(obj, f, *a, **kw):
        f.write(b"half a checkpoint")
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr("gptcore.training.checkpoint.torch.save", full_disk)
    with pytest.raises(CheckpointError, match="No space left on device.*previous ckpt.pt is unchanged"):
        trainer.save(tmp_path / "ckpt.pt")
    assert (tmp_path / "ckpt.pt").read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["ckpt.pt"]  # no temporary left behind


def test_resume_refuses_what_is_not_a_training_checkpoint(tmp_path):
    with pytest.raises(CheckpointError, match="no such checkpoint"):
        Trainer.from_checkpoint(tmp_path / "ckpt.pt", small_config())
    torch.save({"model": GPT(GPTConfig(**NANO), seed=0).state_dict()}, tmp_path / "weights.pt")
    with pytest.raises(CheckpointError, match="not a training checkpoint"):
        Trainer.from_checkpoint(tmp_path / "weights.pt", small_config())


def test_save_with_corpus_writes_its_vocabulary_and_resume_refuses_other_data(tmp_path):
    from gptcore.training import DataError
    from gptcore.training.data import corpus_from_text, read_saved_vocab

    corpus = corpus_from_text("the quick brown fox jumps over the lazy dog\n" * 20, "fox.txt", "char", "test")
    assert corpus.vocab_size == 28
    trainer = Trainer(GPT(GPTConfig(**{**NANO, "vocab_size": 32}), seed=0), small_config())
    trainer.save(tmp_path / "ckpt.pt", corpus=corpus, init="gpt2")
    ckpt = torch.load(tmp_path / "ckpt.pt", weights_only=True)
    assert (ckpt["config"]["dataset"], ckpt["config"]["tokenizer"], ckpt["config"]["init"]) == ("fox.txt", "char", "gpt2")
    assert read_saved_vocab(tmp_path)["chars"] == corpus.chars
    assert Trainer.from_checkpoint(tmp_path, small_config(), corpus=corpus).iter_num == 0  # same data: fine
    other = corpus_from_text("hello, world\n" * 40, "jugs.txt", "char", "test")  # same ids, other characters
    with pytest.raises(DataError, match=r"ckpt.pt was trained on another character vocabulary .*fox.txt.* than jugs.txt"):
        Trainer.from_checkpoint(tmp_path / "ckpt.pt", small_config(), corpus=other)
    wide = corpus_from_text("".join(chr(0x41 + i) for i in range(40)) * 5, "wide.txt", "char", "test")
    (tmp_path / "char_vocab.json").unlink()
    with pytest.raises(DataError, match="vocab_size 32 but wide.txt needs 40"):
        Trainer.from_checkpoint(tmp_path / "ckpt.pt", small_config(), corpus=wide)


def test_resumes_a_checkpoint_nanogpts_train_py_wrote(tmp_path):
    """train.py's ckpt.pt (torch.compile's `_orig_mod.` prefixes, its optimizer's state) resumes
    here and the next steps follow train.py's loop continuing on its own model."""
    tc = small_config()
    args = dict(n_layer=2, n_head=2, n_embd=32, block_size=16, bias=False, vocab_size=VOCAB, dropout=0.0)
    torch.manual_seed(7)
    oracle = NanoGPTShaped(**args)
    with torch.no_grad():
        for p in oracle.parameters():
            if p.dim() == 2:
                p.normal_(0, 0.02)
    optimizer = reference_optimizer(oracle, tc.weight_decay, tc.learning_rate, (tc.beta1, tc.beta2))
    for it in range(3):
        x, y = batch_of(it, tc)
        reference_step(oracle, optimizer, it, [(x[:3], y[:3]), (x[3:], y[3:])], tc)
    torch.save({"model": {f"_orig_mod.{k}": v for k, v in oracle.state_dict().items()},
                "optimizer": optimizer.state_dict(), "model_args": args, "iter_num": 3, "best_val_loss": 3.1,
                "config": {"dataset": "shakespeare_char"}}, tmp_path / "ckpt.pt")
    trainer = Trainer.from_checkpoint(tmp_path / "ckpt.pt", tc, fused=False)
    assert trainer.iter_num == 3 and trainer.best_val_loss == pytest.approx(3.1)
    assert trainer.model.config.activation == "gelu" and not trainer.model.config.bias
    for it in range(3, 8):
        x, y = batch_of(it, tc)
        theirs = reference_step(oracle, optimizer, it, [(x[:3], y[:3]), (x[3:], y[3:])], tc)
        assert trainer.step(x, y) == pytest.approx(theirs, abs=1e-5), f"step {it}"
