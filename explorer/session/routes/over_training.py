"""The strongest routes over a training run, read from its trace (no Qt).

A model the Train panel put in the session says which run and step it is (`ModelInfo.run`, a
typed fact). The run's probe records keep the route for the probe prompt at each probe (top
edges only, gptcore/training/recorder.py); the run's follower has read them once (the Train
panel's, shared through `session.training.follower_for`), and this picks the routes that were
strongest at any probe and follows each one's weight over the steps, so the Routes view shows
e.g. the previous-token → induction route appear at the phase change.
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from explorer.session.routes.results import RoutesOverTraining


def routes_over_training(info, follower_for: Callable, top: int = 5) -> RoutesOverTraining | None:
    """The `top` strongest routes' weights at every probe of the model's run (`info.run`), read
    from the run's follower (`follower_for(root)`); None when the model is not a run's step, the
    folder cannot be read, or its trace keeps no routes."""
    run = getattr(info, "run", None)
    if run is None:
        return None
    try:
        follower = follower_for(run.root)
    except (OSError, ValueError):  # RunFollowError is a ValueError: the folder is gone or damaged
        return None
    with follower.lock:
        series = follower.series.get(run.scheme)
        probes = [] if series is None else [{"step": step, "routes": routes} for step, routes
                                             in zip(series.probe_step, series.routes) if routes is not None]
    if not probes:
        return None
    return series_of(probes, top, str(run.root))


def series_of(probes: list[dict], top: int, run: str) -> RoutesOverTraining:
    """Probe records with "routes": {"prompt", "edges": [[src, dst, weight], ...]} -> the `top`
    routes by their largest weight at any probe, NaN where a probe did not keep one."""
    steps = np.array([int(r.get("step", 0)) for r in probes], dtype=np.int64)
    weights: dict[str, np.ndarray] = {}
    for k, record in enumerate(probes):
        for src, dst, w in record["routes"].get("edges", ()):
            label = f"{src} → {dst}"
            row = weights.setdefault(label, np.full(len(probes), np.nan))
            row[k] = float(w)
    strongest = sorted(weights, key=lambda name: -np.nanmax(weights[name]))[:top]
    prompt = str(probes[-1]["routes"].get("prompt", ""))
    return RoutesOverTraining(steps=steps, series={name: weights[name] for name in strongest}, prompt=prompt, run=run)
