"""The strongest routes over a training run, read from its trace (no Qt).

A model the Train panel put in the session carries its run folder in `ModelInfo.source`
("training run DIR (scheme)"). The run's probe records keep the route for the probe prompt at
each probe (top edges only, gptcore/training/recorder.py); this picks the routes that were
strongest at any probe and follows each one's weight over the steps, so the Routes view shows
e.g. the previous-token → induction route appear at the phase change.
"""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from explorer.session.routes_results import RoutesOverTraining
from explorer.session.training import RUN_SOURCE_PREFIX

_SOURCE = re.compile(re.escape(RUN_SOURCE_PREFIX) + r"(?P<root>.+) \((?P<scheme>[^()]+)\)$")


def run_of(info) -> tuple[Path, str] | None:
    """(run folder, scheme) of a model from a training run, else None."""
    m = _SOURCE.match(str(getattr(info, "source", "") or ""))
    return (Path(m["root"]), m["scheme"]) if m else None


def routes_over_training(info, top: int = 5) -> RoutesOverTraining | None:
    """The `top` strongest routes' weights at every probe of the model's run; None when the model
    is not from a run folder or its trace keeps no routes."""
    from gptcore.training.trace import TraceError, read_trace

    run = run_of(info)
    if run is None:
        return None
    root, scheme = run
    try:
        records = read_trace(root / "trace.jsonl")
    except (TraceError, OSError):
        return None
    probes = [r for r in records if r.get("kind") == "probe" and r.get("scheme", scheme) == scheme
              and isinstance(r.get("routes"), dict)]
    if not probes:
        return None
    return series_of(probes, top, str(root))


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
