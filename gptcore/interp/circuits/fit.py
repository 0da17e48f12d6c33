"""`fit_transcoder`: train a TopK transcoder on (input, target) rows with fit_sae's recipe.

The recipe (sae/fit.py, after Gao et al. 2024 and EleutherAI sparsify): random unit decoder rows,
unit rows kept through training; inputs and targets each scaled to mean norm sqrt(d), so
`default_lr` suits any model's scale; b_dec starts at the targets' mean; AuxK on latents silent for
a twentieth of the tokens; warm-up over 5 % of steps, linear decay over the last 20 %; rows drawn
with replacement from a seeded generator, so a seed gives the same transcoder on one machine and
thread count. The encoder starts as its own random unit rows (input and output are different
spaces), b_enc and W_skip at zero, as sparsify's transcoders do. Measured on the bench's char model
(500k tokens a layer): starting b_enc so every pre-activation is centred on the data changed
nothing (variance unexplained 0.024/0.015 against 0.023/0.013), and starting W_skip at the least-
squares fit of the targets was far worse (0.9+: the features, all active at once, then add noise to
an already-fitted output and mostly die). The scales are
folded back at the end: the transcoder returned reads the raw MLP input and writes the raw output,
and its activations are in the output's units (decoder rows stay unit vectors).
"""
from __future__ import annotations

import torch

from gptcore.interp.circuits.train_step import TranscoderTrainer
from gptcore.interp.circuits.transcoder import CircuitError, Transcoder, check_sizes
from gptcore.interp.sae.fit import (Cancel, Progress, _input_stats, _steps, dead_schedule, default_lr, equal_start,
                                   run_steps, start_sample)
from gptcore.interp.sae.sources import as_source

WARM_LR_SHARE, WARM_LR_MAX = 0.1, 5e-4  # a warm start's default learning rate: see warm_start_lr


def warm_start_lr(width: int, d_out: int) -> float:
    """The default learning rate of a warm start: a tenth of `default_lr`, and at most 5e-4.

    Why lower: Adam starts with empty moments, so at an already fitted point its steps are ~lr in every
    weight (a cold start reaches that point with its second moments full of the early, large gradients,
    which keep its late steps far smaller), and at the default lr the encoder then grows step after
    step. Measured (2 AMD EPYC cores): a synthetic sparse map (d 32, width 96; default lr 0.030)
    re-fitted warm on its own data went from variance unexplained 0.014 to 44 at the default lr, 0.71
    at a tenth, 0.050 at 0.0009 and 0.016 at 0.0003; a 2-layer char model's transcoders (d 128, width
    1,024; default 0.0045) warm-started from the next kept step went from 0.041 to 1.11 at the default
    lr and to 0.030 at a tenth. A smaller rate adapts less to a changed model; the walk over training
    (explorer/session/circuits/training.py) keeps a warm fit only where it explains its step better than
    the neighbour's set as it was."""
    return min(WARM_LR_SHARE * default_lr(width, d_out), WARM_LR_MAX)


def fit_transcoder(inputs, targets, *, width: int, k: int, tokens: int, seed: int = 0, skip: bool = True,
                   layer: int = 0, progress: Progress = None, cancel: Cancel = None, batch: int = 4096,
                   lr: float | None = None, init: Transcoder | None = None, device=None) -> Transcoder:
    """A transcoder for block `layer` trained to map `inputs` (N, d_in) to `targets` (N, d_out) (tensors
    or ActivationCaches, row i of one paired with row i of the other), `tokens` rows in all, `batch`
    a step. `init`: start from that transcoder's weights (a warm start: feature i stays feature i
    from one training step of the model to the next), at `warm_start_lr` unless `lr` is given.
    `device`: where to train (default: where `inputs` are; host memory for a disk cache; the targets
    are brought there); the transcoder is returned there.
    progress(done, total, message) counts tokens;
    cancel() turning true raises gptcore.errors.Cancelled."""
    xs = as_source(inputs, device)
    ys = as_source(targets, xs.device)
    if xs.shape[0] != ys.shape[0]:
        raise CircuitError(f"inputs hold {xs.shape[0]:,} rows but targets {ys.shape[0]:,}: each input row "
                           "needs the target (the MLP's output) of the same token")
    d_in, d_out = xs.shape[1], ys.shape[1]
    check_sizes(d_in, width, k, layer, d_out)
    if k is None:
        raise CircuitError("fit_transcoder trains TopK transcoders: pass k, the active features per token")
    steps = _steps(tokens, batch)
    gen = torch.Generator().manual_seed(int(seed))
    scale_x, _ = _input_stats(xs, gen)
    scale_y, mean_y = _input_stats(ys, gen)
    base_lr = lr or (default_lr if init is None else warm_start_lr)(width, d_out)
    trainer = _trainer(init, gen, width, k, d_in, d_out, skip, scale_x, scale_y, mean_y, base_lr,
                       dead_schedule(tokens, batch), xs.device)
    if init is None:  # a warm start keeps its b_enc, and does not revive (see the module docstring)
        equal_start(trainer, start_sample(xs, gen) * scale_x, k)
    run_steps(trainer, lambda rows: (xs.rows(rows) * scale_x, ys.rows(rows) * scale_y), n_rows=xs.shape[0],
              steps=steps, batch=batch, gen=gen, base_lr=base_lr, progress=progress, cancel=cancel,
              what="transcoder", error=CircuitError, label=f"layer {layer}: ", revive=init is None)
    transcoder = _fold(trainer, k, layer, scale_x, scale_y)
    transcoder.metadata = {"training_tokens": steps * batch, "batch": batch, "lr": base_lr, "seed": int(seed),
                           "input_scale": scale_x, "target_scale": scale_y, "trained_with": "gptcore.fit_transcoder"}
    return transcoder


def _trainer(init, gen, width, k, d_in, d_out, skip, sx, sy, mean_y, lr, dead, device) -> TranscoderTrainer:
    """A trainer on `device` started by the recipe (random unit rows drawn on the host, the same on
    every device), or from `init` unfolded into this data's scaled units. `dead`: (dead_tokens,
    dead_every)."""
    dead_tokens, dead_every = dead
    if init is None:
        enc = _unit_rows(torch.randn(width, d_in, generator=gen)).to(device)  # (width, d_in)
        dec = _unit_rows(torch.randn(width, d_out, generator=gen)).to(device)  # (width, d_out)
        W_skip = torch.zeros(d_in, d_out, device=device) if skip else None
        return TranscoderTrainer(enc, torch.zeros(width, device=device), dec, mean_y * sy, W_skip, k, lr, dead_tokens,
                                 dead_every=dead_every)
    _check_init(init, d_in, d_out, width, skip)
    # raw -> scaled (the inverse of _fold): W_enc*sy/sx, b_enc*sy, b_dec*sy, W_skip*sy/sx

    def raw(p):
        return p.detach().to(device, torch.float32)

    enc = raw(init.W_enc).t() * (sy / sx)  # (width, d_in)
    W_skip = raw(init.W_skip) * (sy / sx) if skip else None
    return TranscoderTrainer(enc, raw(init.b_enc) * sy, _unit_rows(raw(init.W_dec).clone()), raw(init.b_dec) * sy,
                             W_skip, k, lr, dead_tokens, dead_every=dead_every)


def _unit_rows(m: torch.Tensor) -> torch.Tensor:
    return m / m.norm(dim=1, keepdim=True).clamp_min(1e-12)


def _check_init(init, d_in, d_out, width, skip) -> None:
    if not isinstance(init, Transcoder) or (init.d_in, init.d_out, init.width, init.skip) != (d_in, d_out, width, skip):
        got = (f"d_in {init.d_in}, d_out {init.d_out}, width {init.width}, skip {init.skip}"
               if isinstance(init, Transcoder) else type(init).__name__)
        raise CircuitError(f"init must be a transcoder of the same shape (d_in {d_in}, d_out {d_out}, width {width}, "
                           f"skip {skip}); got {got}: warm-start from one trained for the same layer and width")


def _fold(trainer: TranscoderTrainer, k: int, layer: int, sx: float, sy: float) -> Transcoder:
    """Back to raw units. Trained: y*sy ~ TopK((x*sx) @ E + be) @ D + bd + (x*sx) @ S. Dividing by sy,
    with W_enc = E*sx/sy and b_enc = be/sy the pre-activations are the trained ones over sy (the
    top-k choice unchanged), D keeps unit rows, b_dec = bd/sy, W_skip = S*sx/sy."""
    width, d_out = trainer.W_dec.shape
    t = Transcoder(trainer.enc.shape[1], width, k, layer, skip=trainer.W_skip is not None, d_out=d_out)
    t = t.to(trainer.W_dec.device)
    with torch.no_grad():
        t.W_enc.copy_(trainer.enc.t() * (sx / sy))
        t.b_enc.copy_(trainer.b_enc / sy)
        t.W_dec.copy_(trainer.W_dec)
        t.b_dec.copy_(trainer.b_dec / sy)
        if t.W_skip is not None:
            t.W_skip.copy_(trainer.W_skip * (sx / sy))
    return t
