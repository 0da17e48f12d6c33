"""`fit_sae`: train a TopK sparse autoencoder on activation rows, with defaults that need no tuning.

Why these defaults (Gao et al. 2024; EleutherAI sparsify): the decoder starts as random unit rows
and the encoder as its transpose, so every latent starts out reading the direction it writes;
b_dec starts at the data's mean; rows are scaled during training to mean norm sqrt(d), so one
learning rate rule (`default_lr`) suits any model's activation scale; a latent that has
not fired for `dead_tokens` tokens counts as dead and is pulled back by AuxK. The learning rate
warms up over the first 5 % of steps and decays linearly to zero over the last 20 %. The scale
is folded back at the end, so the SAE returned reads and writes raw activations.

Two additions against dead latents (issue 39): b_enc starts so that every latent fires on the same
share of the data (`_equal_start`), and until the decay a dead latent's b_enc is raised to where it
fires again (`TopKTrainer._revive`). On the bench's char model (2 layers, 128 wide; width 1,024,
k 16, 2M tokens) the latents silent on 8,192 held-out tokens went from 28 % to 11 % (char model
after 600 steps; 13 % to 4 % after 1,200), explained variance 0.977 -> 0.980 (0.965 -> 0.968).

Rows are drawn with replacement from a seeded generator on the host (a few microseconds a batch),
so a seed gives the same SAE on the same machine, thread count and device, and the same rows on
every device. Training runs where the activations are (a CUDA tensor: on that card) or on
`device`, and the SAE returned lives there. The loop reads the loss back (a host sync on a GPU) only
READINGS times a run, for `progress` and the divergence check: a NaN stays in the
weights once there, so it is caught at the next reading. `progress(done, total, message)` counts
tokens; `cancel()` turning true stops the loop with `gptcore.errors.Cancelled`. The loop
(`run_steps`), the equal start (`equal_start`) and the dead threshold (`dead_schedule`) are
`fit_transcoder`'s too (circuits/fit.py).
"""
from __future__ import annotations

import math
from typing import Callable, Optional

import torch

from gptcore.errors import Cancelled
from gptcore.interp.sae.dictionary import SAE, SAEError, check_shape
from gptcore.interp.sae.sources import as_source
from gptcore.interp.sae.topk_step import TopKTrainer

Progress = Optional[Callable[[int, int, str], None]]
Cancel = Optional[Callable[[], bool]]
STATS_ROWS = 65536  # rows that set the input scale and b_dec's start
DEAD_TOKENS_MAX = 10_000_000  # sparsify's threshold; short runs use a twentieth of their tokens
READINGS = 200  # how many times a run reads its loss back (progress, divergence check)
START_ROWS = 4096  # rows that set b_enc's start (_equal_start): one batch's worth
START_FLOATS = 1 << 23  # pre-activations computed at a time for it (32 MB)
START_SHARE = 4  # each latent starts positive on START_SHARE * k / width of the rows
DEAD_READS = 8  # the dead set is read this many times per dead threshold's worth of tokens


def default_lr(width: int, d: int) -> float:
    """sparsify's rule, 2e-4 at 16,384 latents scaled as 1/sqrt(width), for its Llama 3 8B SAEs (d 4096);
    scaled as 1/sqrt(d) for other widths of the input. Why: rows are trained at norm sqrt(d), so
    a decoder entry is ~1/sqrt(d) and an Adam step of lr per entry turns a row by ~lr*sqrt(d);
    this keeps that turn rate. Measured here: at d 64 (synthetic, 1M tokens) sparsify's plain rule
    reached explained variance 0.79, this one 0.87; on a char model (d 128) both ~0.97."""
    return 2e-4 / math.sqrt(width / 2**14) * math.sqrt(4096 / d)


def fit_sae(acts, *, width: int, k: int, tokens: int, seed: int = 0, progress: Progress = None,
            cancel: Cancel = None, batch: int = 4096, lr: float | None = None, hook: str = "",
            init: SAE | None = None, device=None) -> SAE:
    """Train a TopK SAE on `acts`, activation rows (N, d) (a tensor, or an ActivationCache on
    disk), for `tokens` rows in all drawn with replacement, `batch` rows a step. `init`: start from
    that SAE's weights instead of the recipe's initialisation (a warm start, as SAE-Track walks a
    training run's checkpoints: feature i stays feature i from one step to the next). `device`:
    where to train (default: where `acts` are; host memory for a disk cache); the SAE is returned
    there."""
    source = as_source(acts, device)
    device = source.device
    d = source.shape[1]
    check_shape(d, width, k)
    steps = _steps(tokens, batch)
    gen = torch.Generator().manual_seed(int(seed))
    scale, mean = _input_stats(source, gen)
    decoder = torch.randn(width, d, generator=gen)  # (width, d), drawn on the host: the same on every device
    if init is not None:
        _check_init(init, d, width)
        decoder = init.W_dec.detach().float().clone()  # (width, d)
    decoder = decoder.to(device)
    decoder /= decoder.norm(dim=1, keepdim=True).clamp(min=1e-12)
    base_lr = lr or default_lr(width, d)
    b_dec = mean * scale if init is None else init.b_dec.detach().float().to(device) * scale
    dead_tokens, dead_every = dead_schedule(tokens, batch)
    trainer = TopKTrainer(decoder, b_dec, k, base_lr, dead_tokens=dead_tokens, dead_every=dead_every)
    if init is not None:  # the encoder too: raw units in, the trainer's scaled units inside (see _to_sae)
        trainer.enc.copy_(init.W_enc.detach().float().t())
        trainer.b_enc.copy_(init.b_enc.detach().float() * scale)
    else:
        _equal_start(trainer, source, scale, k, gen)
    run_steps(trainer, lambda rows: (source.rows(rows) * scale,), n_rows=source.shape[0], steps=steps, batch=batch,
              gen=gen, base_lr=base_lr, progress=progress, cancel=cancel, what="SAE", error=SAEError,
              label="training: ")
    sae = _to_sae(trainer, k, scale, hook)
    sae.metadata = {"training_tokens": steps * batch, "batch": batch, "lr": base_lr, "seed": int(seed),
                    "input_scale": scale}
    return sae


def _equal_start(trainer: TopKTrainer, source, scale: float, k: int, gen) -> None:
    """b_enc so that every latent starts out positive on the same share of the rows (`equal_start`),
    from START_ROWS rows of the source as the SAE's encoder reads them (scaled, minus b_dec)."""
    equal_start(trainer, start_sample(source, gen) * scale - trainer.b_dec, k)


def start_sample(source, gen) -> torch.Tensor:
    """START_ROWS rows (fewer in a smaller source) drawn with replacement: the sample b_enc starts from."""
    n = source.shape[0]
    return source.rows(torch.randint(n, (min(n, START_ROWS),), generator=gen))  # (m, d)


def equal_start(trainer, x: torch.Tensor, k: int) -> None:
    """b_enc so that every latent starts out positive on the same share of the rows x (m, d_in) (as
    the encoder reads them), START_SHARE * k/width: minus its pre-activation's quantile there. Why:
    with random directions and b_enc = 0, the latents nearest the data's main directions win every
    top-k and the others never fire, so never learn. Why 4 k/width, not k/width: at k/width (as
    thresholds, most of the top k would start below 0) the char model's silent latents fell as far
    but the synthetic recovery test's explained variance dropped 0.83 -> 0.82; at 4 both held
    (measured 1, 2, 4, 8, 16). Latents a chunk at a time (memory). Transcoders start so too
    (circuits/fit.py)."""
    m = x.shape[0]
    above = max(1, round(m * min(1.0, START_SHARE * k / trainer.width)))  # rows each latent starts positive on
    rank = max(1, m - above)
    per = max(1, START_FLOATS // m)
    for start in range(0, trainer.width, per):
        pre = x @ trainer.enc[start:start + per].t()  # (m, per)
        trainer.b_enc[start:start + per] = -pre.kthvalue(rank, dim=0).values


def dead_schedule(tokens: int, batch: int) -> tuple[int, int]:
    """(tokens after which a silent latent counts as dead, steps between readings of the dead set):
    sparsify's 10M, or a twentieth of a shorter run's tokens (at least a batch); read DEAD_READS
    times per threshold's worth of tokens."""
    dead_tokens = min(DEAD_TOKENS_MAX, max(tokens // 20, batch))
    return dead_tokens, max(1, dead_tokens // (DEAD_READS * batch))


def run_steps(trainer, batch_of, *, n_rows: int, steps: int, batch: int, gen, base_lr: float, progress: Progress,
              cancel: Cancel, what: str, error: type, label: str, revive: bool = True) -> None:
    """The training loop fit_sae and fit_transcoder share: each step `batch` row indices drawn on the host
    from `gen` (the same rows on every device), `trainer.step(*batch_of(indices))`, the learning rate
    warmed up and decayed (`_lr_factor`), dead latents revived until the decay (when `revive`). The loss
    is read READINGS times a run: `progress(done, total, label + "variance unexplained …")` in tokens, and
    a NaN or inf stops the run with `error` naming the fix. `cancel()` turning true raises Cancelled."""
    every = max(1, steps // READINGS)
    for step in range(steps):
        if cancel is not None and cancel():
            raise Cancelled(f"{what} training cancelled")
        trainer.set_lr(base_lr * _lr_factor(step, steps))
        trainer.revive = revive and step < steps - _decay_steps(steps)  # revived latents must live through the decay
        fvu = trainer.step(*batch_of(torch.randint(n_rows, (batch,), generator=gen)))  # 0-dim: reading it waits
        if (step + 1) % every == 0 or step + 1 == steps:
            fvu = float(fvu)
            if not math.isfinite(fvu):
                raise error(f"{what} training diverged (the loss became NaN or inf); pass a smaller lr "
                            f"than {base_lr:.2e} or check the activations")
            if progress is not None:
                progress((step + 1) * batch, steps * batch, f"{label}variance unexplained {fvu:.3f}")


def _check_init(init, d: int, width: int) -> None:
    if not isinstance(init, SAE) or (init.d_in, init.width) != (d, width):
        got = f"d_in {init.d_in}, width {init.width}" if isinstance(init, SAE) else type(init).__name__
        raise SAEError(f"init must be an SAE of the same shape (d_in {d}, width {width}); got {got}: warm-start "
                       f"from an SAE trained at the same hook with the same width")


def _steps(tokens, batch) -> int:
    for name, value in (("tokens", tokens), ("batch", batch)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise SAEError(f"{name} must be a positive integer, got {value!r}")
    if tokens < batch:
        raise SAEError(f"tokens={tokens:,} is fewer than one batch of {batch:,} rows: "
                       f"train on at least {batch:,} tokens, or pass batch={tokens:,} or less")
    return tokens // batch


def _lr_factor(step: int, steps: int) -> float:
    """Linear warm-up over the first 5 % of steps, constant, linear decay to 0 over the last 20 %."""
    warm = max(1, steps // 20)
    decay = _decay_steps(steps)
    if step < warm:
        return (step + 1) / warm
    return min(1.0, (steps - step) / decay)


def _decay_steps(steps: int) -> int:
    return max(1, steps // 5)


def _input_stats(source, gen) -> tuple[float, torch.Tensor]:
    """(scale to mean norm sqrt(d), mean row (d,)) from up to STATS_ROWS rows."""
    n = source.shape[0]
    pick = torch.arange(n) if n <= STATS_ROWS else torch.randint(n, (STATS_ROWS,), generator=gen)
    sample = source.rows(pick)  # (n', d)
    mean_norm = float(sample.norm(dim=1).mean())
    if not mean_norm > 0:
        raise SAEError("every activation row is zero: there is nothing to reconstruct at this hook")
    return math.sqrt(sample.shape[1]) / mean_norm, sample.mean(0)


def _to_sae(trainer: TopKTrainer, k: int, scale: float, hook: str) -> SAE:
    """Fold the input scale back: for raw x, (x - b_dec/s) @ W = ((s x - b_dec) @ W) / s, so with
    b_enc / s the pre-activations (and activations) are the trained ones over s, the top-k choice
    unchanged, and unit decoder rows rebuild x itself: activations are in the hook's own units."""
    width, d = trainer.W_dec.shape
    sae = SAE(d, width, k, hook=hook).to(trainer.W_dec.device)
    with torch.no_grad():
        sae.W_enc.copy_(trainer.enc.t())
        sae.b_enc.copy_(trainer.b_enc / scale)
        sae.W_dec.copy_(trainer.W_dec)
        sae.b_dec.copy_(trainer.b_dec / scale)
    return sae
