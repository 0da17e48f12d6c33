"""Transcoders trained for the model shown, measured, and walked over a run's kept steps (issue 38). No Qt.

Training: every MLP's input and output are read on the corpus in one forward per chunk
(`gptcore.interp.circuits.harvest.harvest_mlps`), under the session's lock and without yielding the
compute thread (a task run in between could show another step or set an edit, and the rows would mix
two models); the fitting, which takes the minutes, runs outside the lock and reports progress, which
lets other panels' tasks run between its steps (explorer/runtime/compute_thread.py).

The walk (after SAE-Track, as the Features panel walks SAEs): the set the user trained on the step
shown is the anchor and stays as trained; from it the walk goes outward through the run's other kept
steps — back to the first, then on to the last — each step's set fitted warm from its neighbour nearer
the anchor (`gptcore.fit_transcoder(init=…)`), so layer L's feature i at step 200 is the ancestor of
feature i at the anchor. Each step's weights are read from the run into a model of the walk's own (the
session's model is never touched, so the walk may yield between forwards), and each set is saved beside
the run under a `-walk` name, never over a set trained by hand.

The warm start's learning rate is gptcore's (`warm_start_lr`: a tenth of the default, at most 5e-4;
its docstring says why). Measured here on the 2-layer char model (width 1,024, k 16, 400k tokens,
layer 0, from the step-1,500 set): at step 1,250 the fraction of variance unexplained went from 0.041
(the neighbour's set as it was) to 1.11 at the default lr, 0.030 at a tenth (0.028 at a thirtieth;
0.044 fitted from scratch), decoder rows 0.99 aligned with the neighbour's;
at step 500, 0.39 → 0.066 at a tenth, 0.12 at a thirtieth. And a guard: each layer's fitted
transcoder is kept only if it explains this step's held-out MLP output at least as well as its
neighbour's did; otherwise the neighbour's is kept (its metadata says so). Where neither explains
half of the step's MLP output (UNALIGNED_FVU; measured: the run's step 0, a random model whose MLP
outputs are ~100× smaller than at step 250, left 117 and 17 of it unexplained after the warm start),
that layer is fitted from scratch at the default rate and marked `aligned: False`: its feature i is
not the anchor's feature i, and formation.py does not compare across it.
"""
from __future__ import annotations

import dataclasses
import math

import torch

from explorer.session.circuits import store
from explorer.session.features.store import first_sequences

HARVEST_BYTES = 256 << 20  # every layer's MLP inputs and outputs the transcoders are fitted on (float32)
METRIC_LOGITS = 1 << 25  # tokens × vocabulary the metrics' three forwards may cost (GPT-2: ~650 tokens)
METRIC_TOKENS = 1 << 16  # and at most this many tokens (a char model)
CHECK_TOKENS = 1 << 14  # held-out tokens each walked step's fit is checked on
UNALIGNED_FVU = 0.5  # a walked layer explaining less than half its step's MLP output is fitted afresh


def harvest_cap(ids: torch.Tensor, n_layer: int, d: int) -> torch.Tensor:
    """The first sequences of `ids` (S, T) whose MLP inputs and outputs fit HARVEST_BYTES."""
    return first_sequences(ids, HARVEST_BYTES // (2 * n_layer * d * 4))


def metric_sample(held: torch.Tensor, vocab: int) -> torch.Tensor:
    return first_sequences(held, min(METRIC_TOKENS, METRIC_LOGITS // max(vocab, 1)))


def fit_set(pairs, *, width: int, k: int, tokens: int, seed: int = 0, init=None, progress=None, cancel=None,
            lineage: str = "", lr: float | None = None, device=None) -> list:
    """One transcoder per layer on harvested (inputs, outputs) pairs, trained and returned on `device`
    (the session's; default where the rows are); progress counts tokens over all layers."""
    from gptcore import fit_transcoder

    L, out = len(pairs), []
    for layer, (inputs, targets) in enumerate(pairs):
        def layer_progress(done, total, message, layer=layer):
            if progress is not None:
                progress(layer * total + done, L * total, message)

        t = fit_transcoder(inputs, targets, width=width, k=k, tokens=tokens, seed=seed, layer=layer, lr=lr,
                           progress=layer_progress, cancel=cancel, init=None if init is None else init[layer],
                           device=device)
        t.metadata["lineage"] = lineage
        out.append(t)
    return out


def measure(model, transcoders, sample, cancel=None) -> dict:
    """The set's metrics on `sample` (S, T) as JSON-ready numbers (gptcore.transcoder_metrics)."""
    from gptcore import transcoder_metrics

    m = transcoder_metrics(model, transcoders, sample, cancel=cancel)
    return {"fvu": list(m.fvu), "l0": list(m.l0), "dead_fraction": list(m.dead_fraction), "ce_clean": m.ce_clean,
            "ce_replaced": m.ce_replaced, "ce_zero": m.ce_zero, "ce_loss_recovered": m.ce_loss_recovered,
            "tokens": m.tokens}


def clean(metrics: dict) -> dict:
    """NaN (a layer whose output never varies) as None, so the record is valid JSON."""
    def one(v):
        return None if isinstance(v, float) and not math.isfinite(v) else v

    return {key: [one(x) for x in value] if isinstance(value, list) else one(value) for key, value in metrics.items()}


def walk(core, run, anchor_folder, anchor, *, tokens: int, progress=None, cancel=None) -> dict:
    """Fit and save a set for every kept step of `run` but the anchor's (see the module docstring);
    returns {step: folder} of every step, the anchor's included, and saves the walk's record."""
    from gptcore import save_transcoders
    from gptcore.errors import Cancelled
    from gptcore.interp.circuits.harvest import harvest_mlps
    from explorer.session.features.store import corpus_ids

    follower = core.training.follower_for(run.root)
    with follower.lock:
        steps = sorted(follower.kept_steps(run.scheme))
    if len(steps) < 2:
        raise store.CircuitsError("this run keeps fewer than two steps: there is no 'over training' to walk yet")
    width, k, lineage = anchor[0].width, anchor[0].k, anchor_folder.name
    train, held, _name = corpus_ids(core, "run", "")
    train = harvest_cap(train, len(anchor), anchor[0].d_in)
    check = first_sequences(held, CHECK_TOKENS)
    below = [s for s in reversed(steps) if s < run.step]
    above = [s for s in steps if s > run.step]
    total, done, folders = len(below) + len(above), 0, {run.step: anchor_folder}

    def report(step, fraction, message):
        if progress is not None:
            progress(int(1000 * (done + fraction)), 1000 * max(total, 1),
                     f"over training: step {step:,} ({done + 1} of {total}): {message}")
        if cancel is not None and cancel():
            raise Cancelled("cancelled")

    for side in (below, above):
        before = anchor
        for step in side:
            report(step, 0.0, "reading every MLP's input and output")
            model = follower.folder.load_step(run.scheme, step, device=core.device).eval()
            reading = (lambda d, t, m, step=step: report(step, 0.1 * d / max(t, 1), m))  # a yield between forwards
            with harvest_mlps(model, check, cancel=cancel) as rows:
                held_rows = [(x.clone(), y.clone()) for x, y in rows]
            with harvest_mlps(model, train, progress=reading, cancel=cancel) as pairs:
                fitted = fit_set(pairs, width=width, k=k, tokens=tokens, init=before, cancel=cancel, lineage=lineage,
                                 progress=lambda d, t, m, step=step: report(step, 0.1 + 0.8 * d / max(t, 1), m),
                                 device=model.device)
                report(step, 0.9, "checking the fit on held-out text")
                before = [_better(new, old, x, y, step) for new, old, (x, y) in zip(fitted, before, held_rows)]
                for layer, t in enumerate(before):
                    if t.metadata["walk_fvu"] > UNALIGNED_FVU:  # no warm start explains this step: a fresh fit
                        before[layer] = _fresh(pairs[layer], held_rows[layer], t, tokens, lineage, cancel,
                                               model.device)
            info = dataclasses.replace(core.info, run=dataclasses.replace(run, step=int(step)))
            folder = store.set_folder(info, width, k, walk=True)
            save_transcoders(before, folder, model_name=f"{core.info.name} at step {step:,}", scan=folder.name)
            folders[step] = folder
            done += 1
    store.save_walk(run, width, k, lineage, {s: f.name for s, f in folders.items()})
    return folders


def fvu(t, x: torch.Tensor, y: torch.Tensor) -> float:
    """The fraction of the variance of y (N, d) that t's prediction from x (N, d) leaves unexplained
    (computed where t is)."""
    with torch.no_grad():
        x, y = x.to(t.W_dec.device), y.to(t.W_dec.device)
        return float((t(x) - y).pow(2).sum() / (y - y.mean(0)).pow(2).sum().clamp_min(1e-12))


def _better(fitted, neighbour, x, y, step: int):
    """The fitted transcoder, unless the neighbour's explains this step's held-out rows better (see the
    module docstring); the one kept records both numbers."""
    new, old = fvu(fitted, x, y), fvu(neighbour, x, y)
    if new <= old:
        fitted.metadata.update({"walk_fvu": new, "neighbour_fvu": old})
        return fitted
    import copy

    kept = copy.deepcopy(neighbour)
    kept.metadata = {**kept.metadata, "walk_fvu": old, "fitted_fvu": new,
                     "walk": f"kept from the neighbouring step: fitting on step {step:,} explained less"}
    return kept


def _fresh(pair, held_pair, walked, tokens: int, lineage: str, cancel, device=None):
    """The layer fitted from scratch on `device` (the warm start explained too little); kept if it explains more."""
    from gptcore import fit_transcoder

    inputs, targets = pair
    t = fit_transcoder(inputs, targets, width=walked.width, k=walked.k, tokens=tokens, layer=walked.layer,
                       cancel=cancel, device=device)
    score = fvu(t, *held_pair)
    if score >= walked.metadata["walk_fvu"]:
        return walked
    t.metadata.update({"lineage": lineage, "aligned": False, "walk_fvu": score,
                       "walk": "fitted from scratch: no warm start explained half of this step's MLP output"})
    return t
