"""Features over a training run (issue 33): one SAE per kept step, its features aligned across steps.

How (after SAE-Track): fit an SAE at the run's last kept step, then walk back through the kept steps,
each fitted warm from the next one's weights (`gptcore.fit_sae(init=…)`), so feature i at step 200 is
the ancestor of feature i at step 1,000. Each step's SAE is saved beside the run like one trained by
hand (`<run>/sae/<scheme>-step…`), so scrubbing the Train panel's slider reopens the SAE of the step
shown; each step's density and largest activation on the run's held-out data make the series, and a
feature "forms" at the first step from which it stays alive at half its final strength. Each step's
model is read and its SAE fitted on the session's device. No Qt.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from explorer.session.features import stats
from explorer.session.features.store import FeaturesError, corpus_ids, hook_for, sae_folder


@dataclass(frozen=True)
class FeaturesOverTraining:
    """Per kept step (ascending) and feature: how often it fires and how strongly; when it formed."""

    layer: int
    site: str
    steps: np.ndarray  # (S,)
    density: np.ndarray  # (S, width)
    max_act: np.ndarray  # (S, width)
    labels: tuple  # (S,) of tuples: each feature's strongest token at that step
    formed: np.ndarray  # (width,) the step each feature formed at (-1: never)


def over_training(core, layer: int, site: str, *, width: int, k: int, tokens: int, first_tokens: int,
                  progress=None, cancel=None) -> FeaturesOverTraining:
    """Fit and save one SAE per kept step of the model's run (see the module docstring)."""
    import dataclasses

    from gptcore import fit_sae, save_sae

    run = core.info.run
    if run is None:
        raise FeaturesError("features over training need a model from a training run: open a run (File → Open "
                            "run…) and pick a step in the Train panel")
    follower = core.training.follower_for(run.root)
    with follower.lock:
        steps = sorted(follower.kept_steps(run.scheme), reverse=True)
    if len(steps) < 2:
        raise FeaturesError("this run keeps fewer than two steps: there is no 'over training' to show yet")
    hook = hook_for("sae", layer, site)
    train, held, _name = corpus_ids(core, "run", "")
    rows_cap = max(1, (64 << 20) // (4 * core.config.n_embd * train.shape[1]))
    sae, per_step = None, {}
    for i, step in enumerate(steps):
        model = follower.folder.load_step(run.scheme, step, device=core.device).eval()
        rows = stats.hook_rows(model, train[:rows_cap], hook, cancel)  # (N, d)
        budget = first_tokens if sae is None else tokens

        def report(done, total, message, i=i, step=step):
            if progress is not None:
                progress(i * 1000 + int(1000 * done / max(total, 1)), len(steps) * 1000,
                         f"step {step:,} ({i + 1} of {len(steps)}): {message}")

        sae = fit_sae(rows, width=width, k=k, tokens=budget, seed=0, init=sae, progress=report, cancel=cancel,
                      hook=hook, device=core.device)
        save_sae(sae, sae_folder(dataclasses.replace(core.info, run=dataclasses.replace(run, step=step)),
                                 layer, site, width, k), model_name=f"{core.info.name} at step {step:,}")
        held_rows = stats.hook_rows(model, held, hook, cancel)
        summary = stats.statistics(sae, held_rows, cancel)
        flat = held.reshape(-1).numpy()
        labels = tuple(core.token_strings([int(flat[r])])[0] if v > 0 else ""
                       for r, v in zip(summary["best_rows"][0], summary["best_vals"][0]))
        per_step[step] = (summary["density"], summary["max_act"], labels)
    order = sorted(per_step)
    density = np.stack([per_step[s][0] for s in order])
    max_act = np.stack([per_step[s][1] for s in order])
    return FeaturesOverTraining(layer, site, np.array(order), density, max_act,
                                tuple(per_step[s][2] for s in order), formed_steps(np.array(order), max_act))


def formed_steps(steps: np.ndarray, max_act: np.ndarray) -> np.ndarray:
    """(width,) the first step from which a feature's largest activation stays at or above half its
    value at the last step (-1 for a feature dead at the last step)."""
    final = max_act[-1]  # (width,)
    alive = max_act >= 0.5 * final  # (S, width)
    formed = np.full(max_act.shape[1], -1, dtype=np.int64)
    for f in np.nonzero(final > 0)[0]:
        broken = np.nonzero(~alive[:, f])[0]
        formed[f] = steps[broken[-1] + 1] if broken.size else steps[0]
    return formed
