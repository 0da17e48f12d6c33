"""Features over a training run (issue 33): one SAE per kept step, its features aligned across steps.

How (after SAE-Track): the SAE the user trained on the step shown is the anchor, and it stays as
trained (issue 39: the walk writes only the other steps). From it the walk goes outward through the
run's kept steps — back to the first, then on to the last — each step fitted warm from its neighbour
nearer the anchor (`gptcore.fit_sae(init=…)`), so feature i at step 200 is the ancestor of feature i
at the anchor; each carries the anchor's lineage. Each step's SAE is saved beside the run like one
trained by hand (`<run>/sae/<scheme>-step…`), so scrubbing the Train panel's slider reopens the SAE of
the step shown.

The series — each step's density and largest activation — is measured on the model itself (each
step's weights read from the run) and on the same held-out sample as the feature table, so the chart
at the step shown reads what the table reads; it is saved beside the run, and a new session charts it
without walking again. SAEs of the steps found on disk without a series (a walk cut short) are
measured, not fitted. A feature "forms" at the first step from which it stays alive at half its
final strength. The walk yields the compute thread between forwards (its cancel check reports
progress, which lets waiting tasks run), so the panel stays live while it runs. Each step's model is
read, and its SAE fitted, on the session's device. No Qt.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from explorer.session.features import stats
from explorer.session.features.store import (FeaturesError, WEIGHTS_FILE, corpus_ids, first_sequences, held_sample,
                                             hook_for, model_label, over_training_file, read_arrays, sae_folder,
                                             save_arrays, saved_lineage)

HARVEST_ROWS_BYTES = 64 << 20  # activations each step's SAE is fitted on (float32)


@dataclass(frozen=True)
class FeaturesOverTraining:
    """Per kept step (ascending) and feature: how often it fires and how strongly; when it formed."""

    layer: int
    site: str
    steps: np.ndarray  # (S,)
    density: np.ndarray  # (S, width) fraction of the sample's tokens where the feature is active
    max_act: np.ndarray  # (S, width)
    labels: tuple  # (S,) of tuples: each feature's strongest token at that step
    formed: np.ndarray  # (width,) the step each feature formed at (-1: never)
    k: int = 0
    lineage: str = ""  # the anchor SAE's (FeatureSource.lineage)
    tokens: int = 0  # held-out tokens each step was measured on (the feature table's sample)
    corpus: str = ""

    @property
    def width(self) -> int:
        return int(self.density.shape[1])


class _Walk:
    """Where a walk is (step i of n, a fraction of it), told through `progress`; each report also lets
    tasks waiting for the compute thread run (workers.py), so `cancelled` doubles as the yield point."""

    def __init__(self, n: int, progress, cancel):
        self.n, self.progress, self.cancel = n, progress, cancel
        self.done, self.message = 0, ""

    def at(self, i: int, step: int, fraction: float, message: str) -> None:
        self.done = i * 1000 + int(1000 * min(max(fraction, 0.0), 1.0))
        self.message = f"step {step:,} ({i + 1} of {self.n}): {message}"
        self.cancelled()

    def cancelled(self) -> bool:
        if self.progress is not None:
            self.progress(self.done, self.n * 1000, self.message)
        return self.cancel is not None and bool(self.cancel())

    def fitting(self, i: int, step: int):
        return lambda done, total, message: self.at(i, step, 0.2 + 0.6 * done / max(total, 1), message)


def strongest_tokens(core, flat_ids: np.ndarray, summary: dict) -> tuple:
    """Each feature's label: the token where it fires most ("" for one that never fires)."""
    return tuple(core.token_strings([int(flat_ids[r])])[0] if v > 0 else ""
                 for r, v in zip(summary["best_rows"][0], summary["best_vals"][0]))


def _step_info(core, run, follower, step: int):
    """The session's facts as they would be with `step` of the run shown (its SAE folder, its name)."""
    from explorer.session.training.domain import follower_step_name

    name = follower_step_name(follower, run.scheme, step)
    return dataclasses.replace(core.info, name=name, run=dataclasses.replace(run, step=int(step)))


def _kept(core, run) -> tuple:
    follower = core.training.follower_for(run.root)
    with follower.lock:
        steps = sorted(follower.kept_steps(run.scheme))
    return follower, steps


def _measure(core, model, sae, sample, hook: str, walk: _Walk) -> tuple:
    """(density, max_act, labels) of `sae` on `model` over the held-out `sample` (S, T)."""
    rows = stats.hook_rows(model, sample, hook, walk.cancelled)  # (N, d)
    summary = stats.statistics(sae, rows, walk.cancelled)
    return summary["density"], summary["max_act"], strongest_tokens(core, sample.reshape(-1).numpy(), summary)


def over_training(core, run, layer: int, site: str, anchor, *, tokens: int, progress=None,
                  cancel=None) -> FeaturesOverTraining:
    """Fit and save an SAE for every kept step of `run` but the anchor's (see the module docstring);
    `anchor` is the SAE trained on `run.step`, `tokens` what each other step is fitted on."""
    from gptcore import fit_sae, save_sae
    from gptcore.errors import Cancelled

    follower, steps = _kept(core, run)
    if len(steps) < 2:
        raise FeaturesError("this run keeps fewer than two steps: there is no 'over training' to show yet")
    hook, lineage = hook_for("sae", layer, site), anchor.metadata.get("lineage", "")
    train, held, name = corpus_ids(core, "run", "")
    sample = held_sample(held, anchor.d_in, anchor.width)
    train = first_sequences(train, HARVEST_ROWS_BYTES // (4 * anchor.d_in))
    below = [s for s in reversed(steps) if s < run.step]
    above = [s for s in steps if s > run.step]
    walk, per_step = _Walk(len(steps), progress, cancel), {}
    if run.step in steps:  # the anchor itself: measured, never refitted or saved again
        walk.at(0, run.step, 0.0, "measuring the SAE you trained")
        per_step[run.step] = _measure(core, follower.folder.load_step(run.scheme, run.step, device=core.device), anchor,
                                      sample, hook, walk)
    for side in (below, above):
        before = anchor
        for step in side:
            i = len(per_step)
            walk.at(i, step, 0.0, "reading activations")
            model = follower.folder.load_step(run.scheme, step, device=core.device).eval()
            rows = stats.hook_rows(model, train, hook, walk.cancelled)  # (N, d)
            if walk.cancelled():
                raise Cancelled("cancelled")
            sae = fit_sae(rows, width=anchor.width, k=anchor.k, tokens=tokens, seed=0, init=before,
                          progress=walk.fitting(i, step), cancel=cancel, hook=hook, device=core.device)
            del rows
            sae.metadata["lineage"] = lineage
            info = _step_info(core, run, follower, step)
            save_sae(sae, sae_folder(info, layer, site, anchor.width, anchor.k), model_name=model_label(info))
            walk.at(i, step, 0.85, "measuring")
            per_step[step] = _measure(core, model, sae, sample, hook, walk)
            before = sae
    over = _series(layer, site, per_step, anchor.k, lineage, int(sample.numel()), name)
    save_series(run, over)
    return over


def measure_saved(core, run, layer: int, site: str, width: int, k: int, lineage: str = "", progress=None,
                  cancel=None) -> FeaturesOverTraining | None:
    """The series of the SAEs (this layer, site, width and k, and `lineage`: one walk's) already saved for
    the run's kept steps, measured without fitting anything; None when fewer than two steps have one."""
    from gptcore import load_sae

    follower, steps = _kept(core, run)
    folders = {s: sae_folder(_step_info(core, run, follower, s), layer, site, width, k) for s in steps}
    found = sorted(s for s, f in folders.items() if saved_lineage(f) == lineage)  # one walk's SAEs only
    if len(found) < 2:
        return None
    _train, held, name = corpus_ids(core, "run", "")
    sample, hook = held_sample(held, core.config.n_embd, width), hook_for("sae", layer, site)
    walk, per_step = _Walk(len(found), progress, cancel), {}
    for i, step in enumerate(found):  # one step's SAE on the device at a time
        walk.at(i, step, 0.0, "measuring its saved SAE")
        sae = load_sae(folders[step]).to(core.device)
        per_step[step] = _measure(core, follower.folder.load_step(run.scheme, step, device=core.device), sae, sample,
                                  hook, walk)
    over = _series(layer, site, per_step, k, lineage, int(sample.numel()), name)
    save_series(run, over)
    return over


def _series(layer, site, per_step: dict, k: int, lineage: str, tokens: int, corpus: str) -> FeaturesOverTraining:
    order = sorted(per_step)
    max_act = np.stack([per_step[s][1] for s in order])
    return FeaturesOverTraining(layer, site, np.array(order), np.stack([per_step[s][0] for s in order]), max_act,
                                tuple(per_step[s][2] for s in order), formed_steps(np.array(order), max_act),
                                int(k), lineage, tokens, corpus)


def save_series(run, over: FeaturesOverTraining) -> Path:
    path = over_training_file(run, over.layer, over.site, over.width, over.k)
    save_arrays(path, dict(steps=over.steps, density=over.density, max_act=over.max_act, formed=over.formed,
                           labels=np.array([list(labels) for labels in over.labels], dtype=str),
                           lineage=np.array(over.lineage), tokens=np.array(over.tokens), corpus=np.array(over.corpus)))
    return path


def read_series(core, run, layer: int, site: str, width: int, k: int, lineage: str) -> FeaturesOverTraining | None:
    """The series a walk saved for this run, layer, site, width and k, if it still describes the SAEs on
    disk: every step's SAE is there and none was trained again since, and it is the same lineage."""
    path = over_training_file(run, layer, site, width, k)
    arrays = read_arrays(path) if path.is_file() else None
    if arrays is None or (lineage and str(arrays["lineage"]) and str(arrays["lineage"]) != lineage):
        return None
    follower, _steps = _kept(core, run)
    written = path.stat().st_mtime_ns
    for step in arrays["steps"]:
        weights = sae_folder(_step_info(core, run, follower, int(step)), layer, site, width, k) / WEIGHTS_FILE
        if not weights.is_file() or weights.stat().st_mtime_ns > written:
            return None
    return FeaturesOverTraining(int(layer), site, arrays["steps"], arrays["density"], arrays["max_act"],
                                tuple(tuple(str(t) for t in row) for row in arrays["labels"]), arrays["formed"],
                                int(k), str(arrays["lineage"]), int(arrays["tokens"]), str(arrays["corpus"]))


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
