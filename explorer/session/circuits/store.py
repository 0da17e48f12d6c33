"""Where the Circuits domain's transcoders live (issue 38): beside the SAEs of the same model — beside the
run (`<run>/transcoders/`), beside a local model (`<its folder>/transcoders/`), else in the user's data
folder — so a set trained once is found again the next time the same model (or run step) is open.

A set is one folder in circuit-tracer's layout (`layer_{i}.safetensors` + `config.yaml`, written by
`gptcore.save_transcoders`), named for the step and size: `gpt2-step001500-w1024-k16` for a run's step
(`w1024-k16` for any other model). A set fitted by the walk over a run's kept steps carries `-walk`
(`gpt2-step000250-w1024-k16-walk`), so a walk never rewrites a set the user trained on that step.
Beside the layer files lies `metrics.json`: the set's metrics, measured once on the model itself, with
the text they were measured on and the weights they belong to (their files' sizes and times), so they
show again after a restart and are dropped when the set is trained again. circuit-tracer's loader reads
only the layer files and config.yaml. A walk leaves `<scheme>-w…-k…-over-training.json` beside the
sets: the anchor (the set trained by hand) and each step's set. No Qt.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

from gptcore.errors import UserError
from gptcore.io.atomic import atomic_write_bytes
from explorer.session.features.store import sae_home, step_prefix

LAYER_FILE = re.compile(r"^layer_(\d+)\.safetensors$")
CONFIG = "config.yaml"
METRICS_FILE = "metrics.json"
METRICS_FORMAT = "gpt-explorer-transcoder-metrics-1"
WALK_FORMAT = "gpt-explorer-transcoder-walk-1"
WALK_SUFFIX = "-walk"
NAME = re.compile(r"^(?:(?P<scheme>.+)-step(?P<step>\d{6})-)?w(?P<width>\d+)-k(?P<k>\d+)(?P<walk>-walk)?$")


class CircuitsError(UserError):
    """A circuits request that cannot be met as asked; the message says what to do."""

    title = "Circuits not available"


class NoTranscoders(CircuitsError):
    """The model shown has no transcoders saved yet: the panel offers Train transcoders."""

    title = "No transcoders for this model"


class UnreadablePrompt(CircuitsError):
    """The model's tokenizer or vocabulary cannot read the prompt (a run's character model and text in
    another alphabet): the panel offers text the model can read."""

    title = "Prompt not readable by this model"


def transcoder_home(info) -> Path:
    """The folder this model's transcoder sets are saved in (see the module docstring): the sibling of
    its SAE folder, `…/sae` → `…/transcoders`; in the user's data folder `…/sae/<model>` →
    `…/transcoders/<model>`."""
    sae = sae_home(info)
    if sae.name == "sae":
        return sae.parent / "transcoders"
    return sae.parent.parent / "transcoders" / sae.name


def set_folder(info, width: int, k: int, walk: bool = False) -> Path:
    return transcoder_home(info) / f"{step_prefix(info)}w{int(width)}-k{int(k)}{WALK_SUFFIX if walk else ''}"


def is_set(folder: Path) -> bool:
    return (folder / CONFIG).is_file() and (folder / "layer_0.safetensors").is_file()


def find_saved(info) -> Path | None:
    """The set saved last for this model (this step of a run), trained by hand or by a walk; None if none."""
    home = transcoder_home(info)
    if not home.is_dir():
        return None
    prefix = step_prefix(info)
    found = []
    for folder in home.iterdir():
        match = NAME.match(folder.name)
        if (match and folder.name.startswith(prefix) and bool(match["scheme"]) == bool(prefix)
                and folder.is_dir() and is_set(folder)):
            found.append(folder)
    return max(found, key=lambda p: (p / CONFIG).stat().st_mtime_ns) if found else None


def describe_folder(folder: Path) -> dict:
    """{"width", "k", "step" (or None), "walk"} read from a set folder's name ({} for another name)."""
    match = NAME.match(Path(folder).name)
    if not match:
        return {}
    return {"width": int(match["width"]), "k": int(match["k"]),
            "step": int(match["step"]) if match["step"] else None, "walk": bool(match["walk"])}


def files_stamp(folder: Path) -> tuple:
    """What changes when a set is written again: its files' names, sizes and times."""
    return tuple(tuple(entry) for entry in _weights_stamp(folder)) + ((folder / CONFIG).stat().st_mtime_ns,)


# -- the metrics beside a set ----------------------------------------------------------------------
def _weights_stamp(folder: Path) -> list:
    files = sorted((p for p in folder.iterdir() if LAYER_FILE.match(p.name)), key=lambda p: p.name)
    return [[p.name, p.stat().st_size, p.stat().st_mtime_ns] for p in files]


def save_metrics(folder, metrics: dict, measured_on: str) -> None:
    """`metrics` (name -> number or list of numbers, one per layer) of the set in `folder`."""
    folder = Path(folder)
    record = {"format": METRICS_FORMAT, "metrics": metrics, "measured_on": measured_on,
              "weights": _weights_stamp(folder)}
    atomic_write_bytes(folder / METRICS_FILE, json.dumps(record, indent=2).encode("utf-8"))


def read_metrics(folder) -> tuple[dict, str] | None:
    """(metrics, what they were measured on) saved beside the set in `folder`; None when there are none,
    they belong to other weights (the set was trained again since) or cannot be read."""
    folder = Path(folder)
    try:
        record = json.loads((folder / METRICS_FILE).read_text(encoding="utf-8"))
        if record.get("format") != METRICS_FORMAT or record.get("weights") != _weights_stamp(folder):
            return None
        return dict(record["metrics"]), str(record["measured_on"])
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


# -- a walk over a run's kept steps ------------------------------------------------------------------
def walk_file(run, width: int, k: int) -> Path:
    return transcoder_home_of_run(run) / f"{run.scheme}-w{int(width)}-k{int(k)}-over-training.json"


def transcoder_home_of_run(run) -> Path:
    return Path(run.root) / "transcoders"


def walk_stamp(run, width: int, k: int) -> int:
    """The walk record's time (0 when there is none): a new walk makes earlier answers stale."""
    try:
        return walk_file(run, width, k).stat().st_mtime_ns
    except OSError:
        return 0


def save_walk(run, width: int, k: int, anchor: str, steps: dict) -> Path:
    """The walk's record: the anchor set's folder name and {step: set folder name} for every kept step."""
    path = walk_file(run, width, k)
    record = {"format": WALK_FORMAT, "anchor": anchor, "steps": {str(s): name for s, name in sorted(steps.items())}}
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(path, json.dumps(record, indent=2).encode("utf-8"))
    return path


def read_walk(run, width: int, k: int) -> dict | None:
    """{"anchor": name, "steps": {step: folder}} of the last walk of this run at this size, or None when
    there is none, it cannot be read, or one of its sets is gone."""
    path = walk_file(run, width, k)
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
        if record.get("format") != WALK_FORMAT:
            return None
        steps = {int(s): path.parent / name for s, name in record["steps"].items()}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None
    if not all(is_set(folder) for folder in steps.values()):
        return None
    return {"anchor": str(record["anchor"]), "steps": steps}
