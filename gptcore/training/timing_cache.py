"""The small per-machine cache of timings that decide a training fast path: bfloat16 autocast or
float32 (autocast_choice.py), torch's fused AdamW or its plain one (adamw_choice.py).

Why one helper: both decisions are measured once per machine (CPU model, torch version, threads)
and model shape, kept in a JSON file in the user's cache folder (io/user_dirs.py), and read back at
the next run; a damaged or foreign file must count as empty and a file that cannot be written must
cost a re-measurement, nothing else. The layout: {"version": n, "machines": {machine: {shape: {…}}}}.
"""
from __future__ import annotations

import datetime
import json
from pathlib import Path
from typing import Callable


def cache_file(name: str) -> Path:
    """`name` in gptcore's user cache folder (platformdirs' answer, or its XDG fallback: io/user_dirs.py)."""
    from gptcore.io.user_dirs import user_dir

    return user_dir("cache", "gptcore") / name


def read_entries(path: Path, version: int, fields: tuple[str, ...]) -> dict:
    """{machine: {shape: entry}} of a cache file, keeping only entries whose `fields` are all
    positive numbers; an unreadable, foreign or other-version file counts as empty."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict) or data.get("version") != version or not isinstance(data.get("machines"), dict):
        return {}
    good = {}
    for machine, shapes in data["machines"].items():
        if isinstance(shapes, dict):
            good[machine] = {k: v for k, v in shapes.items() if isinstance(v, dict) and _figures_ok(v, fields)}
    return good


def _figures_ok(entry: dict, fields: tuple[str, ...]) -> bool:
    return all(isinstance(entry.get(k), (int, float)) and not isinstance(entry.get(k), bool) and entry[k] > 0
               for k in fields)


def write_entries(path: Path, version: int, entries: dict) -> None:
    """Best effort: a cache that cannot be written costs a re-measurement next time, nothing else."""
    from gptcore.io.atomic import atomic_write_bytes

    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_bytes(path, json.dumps({"version": version, "machines": entries}, indent=1).encode())
    except OSError:
        pass


def cached_or_measured(path: Path, version: int, fields: tuple[str, ...], machine: str, shape: str,
                       measure: Callable[[], tuple[float, ...]]) -> tuple[tuple[float, ...], str]:
    """(the `fields`' figures, "cached" or "measured"): this machine's entry for `shape` from the file,
    else `measure()` (one figure per field, in order) written to it with the time it was taken."""
    entries = read_entries(path, version, fields)
    known = entries.get(machine, {}).get(shape)
    if known is not None:
        return tuple(known[f] for f in fields), "cached"
    figures = tuple(measure())
    entry = {f: round(v, 3) for f, v in zip(fields, figures)}
    entries.setdefault(machine, {})[shape] = {**entry, "measured": datetime.datetime.now().isoformat(timespec="seconds")}
    write_entries(path, version, entries)
    return figures, "measured"
