"""Where the Features domain's inputs and outputs live (issue 33): the corpus it reads (as token ids
of this model's tokenizer, split into train and a held-out tenth) and the folders SAEs are saved in —
beside the run (a run's step: `<run>/sae/`), beside a local model (`<its folder>/sae/`), else in the
user's data folder — so a trained SAE is found again the next time the same model is open.

Beside an SAE's two SAELens files (which SAELens reads; it ignores others) lies `metrics.json`: the
SAE's metrics, measured once on the model itself, with the text they were measured on and the
weights file they belong to (issue 39: metrics belong to the saved SAE, not to a moment of the panel).
A walk over a run's kept steps leaves its series in `<run>/sae/<scheme>-L…-over-training.npz`. No Qt.
"""
from __future__ import annotations

import json
import re
import threading
from pathlib import Path

import numpy as np
import torch

from gptcore.errors import UserError
from gptcore.io.atomic import atomic_path, atomic_write_bytes

SEQ_LEN = 128  # tokens per sequence the corpus is cut into (or the model's block_size, if shorter)
HELD_OUT = 0.1  # the last tenth of the corpus: statistics and metrics, never trained on
EVAL_BYTES = 64 << 20  # held-out activations kept for the browser (float32)
METRICS_FILE = "metrics.json"
METRICS_FORMAT = "gpt-explorer-sae-metrics-1"
WEIGHTS_FILE = "sae_weights.safetensors"  # SAELens's name (gptcore.interp.sae.files)


class FeaturesError(UserError):
    """A features request that cannot be met as asked; the message says what to do."""


def hook_for(kind: str, layer: int, site: str) -> str:
    """The hook point a dictionary reads: a layer's MLP neurons, or an SAE's site."""
    if kind == "neurons":
        return f"blocks.{layer}.mlp.hook_post"
    if site not in ("resid", "mlp"):
        raise FeaturesError(f"site must be 'resid' (the residual stream after the block) or 'mlp' (the MLP "
                            f"output), got {site!r}")
    return f"blocks.{layer}.hook_resid_post" if site == "resid" else f"blocks.{layer}.hook_mlp_out"


class CorpusError(UserError):
    """The corpus cannot be read or encoded by this model; the message says which to choose instead."""


class CorpusCache:
    """The last corpus encoded by `corpus_ids`, kept for the model and tokenizer it was encoded for:
    encoding a corpus takes seconds, and a panel asks for it on every selection."""

    def __init__(self):
        self._lock = threading.Lock()
        self._kept: tuple | None = None  # (key, (train, held, name))

    def get(self, core, choice: str, path: str = "") -> tuple[torch.Tensor, torch.Tensor, str]:
        key = (choice, path, id(core.model), id(core.tokenizer))
        with self._lock:
            if self._kept is not None and self._kept[0] == key:
                return self._kept[1]
        found = corpus_ids(core, choice, path)
        with self._lock:
            self._kept = (key, found)
        return found


def corpus_ids(core, choice: str, path: str = "") -> tuple[torch.Tensor, torch.Tensor, str]:
    """(train (S, T), held-out (S', T), name) token ids of `choice`: "builtin", "run" or "file" (`path`)."""
    from gptcore.training.data import DataError, load_corpus, pydoc_topics_text, read_text_file

    model = core.require_model()
    if choice == "run":
        run = core.info.run
        if run is None:
            raise CorpusError("this model is not a training run's step, so it has no run data: choose the built-in "
                              "text or a file")
        meta = core.training.follower_for(run.root).meta or {}
        source = (meta.get("corpus") or {}).get("source")
        try:
            corpus = load_corpus(source, tokenizer=(meta.get("tokenizer") or {}).get("kind") or "char")
        except (DataError, OSError) as exc:
            raise CorpusError(f"the run's data cannot be read ({exc}); choose the built-in text or a file") from None
        ids, name = [int(i) for i in corpus.train] + [int(i) for i in corpus.val], f"the run's data ({corpus.name})"
    else:
        if choice == "file":
            if not path:
                raise CorpusError("choose a text file first (Browse…), or use the built-in text")
            try:
                text, name = read_text_file(Path(path).expanduser()), Path(path).name
            except (DataError, OSError) as exc:
                raise CorpusError(f"{path} cannot be read as text ({exc}); choose a UTF-8 text file") from None
        elif choice == "builtin":
            text, name = pydoc_topics_text(), "pydoc topics (built-in)"
        else:
            raise CorpusError(f"corpus must be 'builtin', 'run' or 'file', got {choice!r}")
        try:
            ids = core.encode(text)
        except ValueError as exc:
            raise CorpusError(f"{name} cannot be encoded by this model's tokenizer ({str(exc)[:200]}); choose the "
                              f"run's own data or a file in the model's alphabet") from None
    vocab = model.config.vocab_size
    if ids and max(ids) >= vocab:
        raise CorpusError(f"{name} has token ids past this model's vocabulary ({vocab:,}); choose a corpus this "
                          f"model can read")
    T = min(SEQ_LEN, model.config.block_size)
    n = len(ids) // T
    if n < 2:
        raise CorpusError(f"{name} is too short: {len(ids):,} tokens, fewer than two sequences of {T}; choose a "
                          f"longer text")
    seqs = torch.tensor(ids[: n * T], dtype=torch.long).view(n, T)  # (n, T)
    held = max(1, int(round(n * HELD_OUT)))
    return seqs[: n - held], seqs[n - held:], name


def first_sequences(ids: torch.Tensor, max_tokens: int) -> torch.Tensor:
    """The first sequences of `ids` (S, T) holding at most `max_tokens` tokens (at least one sequence)."""
    keep = max(1, int(max_tokens) // max(1, ids.shape[1]))
    return ids[:keep]


def held_sample(held: torch.Tensor, d_in: int, width: int) -> torch.Tensor:
    """The held-out sequences a dictionary's statistics are measured on (the table's, and each step's in
    the walk over training, so the two agree): as many as EVAL_BYTES of activations hold."""
    return first_sequences(held, EVAL_BYTES // (4 * max(int(d_in), int(width))))


def sae_home(info) -> Path:
    """The folder this model's SAEs are saved in (see the module docstring)."""
    if info.run is not None:
        return Path(info.run.root) / "sae"
    source = Path(str(info.source)).expanduser() if info.source else None
    if source is not None and source.exists():
        return (source if source.is_dir() else source.parent) / "sae"
    from gptcore.io.user_dirs import user_dir

    return user_dir("data", "gpt-explorer") / "sae" / slug(info.name)


def step_prefix(info) -> str:
    """"gpt2-step001500-" for a run's step, "" for any other model."""
    run = info.run
    return f"{run.scheme}-step{run.step:06d}-" if run is not None else ""


def _prefix(info, layer: int, site: str) -> str:
    return f"{step_prefix(info)}L{int(layer)}-{site}-"


def sae_folder(info, layer: int, site: str, width: int, k: int) -> Path:
    return sae_home(info) / f"{_prefix(info, layer, site)}w{width}-k{k}"


def find_saved(info, layer: int, site: str) -> Path | None:
    """The most recently saved SAE for this model (this step of a run), layer and site, if any."""
    home = sae_home(info)
    if not home.is_dir():
        return None
    prefix = _prefix(info, layer, site)
    found = [p for p in home.iterdir() if p.name.startswith(prefix) and (p / "cfg.json").is_file()]
    return max(found, key=lambda p: (p / "cfg.json").stat().st_mtime) if found else None


def latest_saved(info) -> tuple[int, str] | None:
    """(layer, site) of the SAE saved last for this model (this step of a run), if any: what the
    Features panel reopens when the model is opened again."""
    home = sae_home(info)
    if not home.is_dir():
        return None
    prefix = step_prefix(info)
    found = [p for p in home.iterdir() if p.name.startswith(prefix) and (p / "cfg.json").is_file()]
    for folder in sorted(found, key=lambda p: (p / "cfg.json").stat().st_mtime, reverse=True):
        m = re.fullmatch(re.escape(prefix) + r"L(\d+)-(resid|mlp)-w\d+-k\d+", folder.name)
        if m:
            return int(m[1]), m[2]
    return None


def saved_lineage(folder: Path) -> str | None:
    """The lineage (the walk it belongs to) written in a saved SAE's cfg.json metadata ("" if none), read
    without its weights; None when there is no SAE there or its cfg.json cannot be read."""
    if not (folder / WEIGHTS_FILE).is_file():
        return None
    try:
        metadata = json.loads((folder / "cfg.json").read_text(encoding="utf-8")).get("metadata") or {}
    except (OSError, ValueError, AttributeError):
        return None
    return str(metadata.get("lineage", "")) if isinstance(metadata, dict) else None


def model_label(info) -> str:
    """What an SAE's cfg.json calls the model it was trained on: its name, and the run it is a step of."""
    return f"training run {info.run.run_name}: {info.name}" if info.run is not None else info.name


# -- the metrics beside an SAE ---------------------------------------------------------------------
def _weights_stamp(folder: Path) -> dict:
    stat = (folder / WEIGHTS_FILE).stat()
    return {"size": stat.st_size, "mtime_ns": stat.st_mtime_ns}


def save_metrics(folder, metrics: dict, measured_on: str) -> None:
    """`metrics` (name -> number) of the SAE in `folder`, measured on `measured_on` (words)."""
    folder = Path(folder)
    record = {"format": METRICS_FORMAT, "metrics": {k: float(v) for k, v in metrics.items()},
              "measured_on": measured_on, "weights": _weights_stamp(folder)}
    atomic_write_bytes(folder / METRICS_FILE, json.dumps(record, indent=2).encode("utf-8"))


def read_metrics(folder) -> tuple[dict, str] | None:
    """(metrics, what they were measured on) saved beside the SAE in `folder`; None when there are none,
    or they belong to other weights (the SAE was trained again since) or cannot be read."""
    folder = Path(folder)
    try:
        record = json.loads((folder / METRICS_FILE).read_text(encoding="utf-8"))
        if record.get("format") != METRICS_FORMAT or record.get("weights") != _weights_stamp(folder):
            return None
        return {str(k): float(v) for k, v in record["metrics"].items()}, str(record["measured_on"])
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


# -- a walk's series beside the run ------------------------------------------------------------------
def over_training_file(run, layer: int, site: str, width: int, k: int) -> Path:
    return Path(run.root) / "sae" / f"{run.scheme}-L{int(layer)}-{site}-w{int(width)}-k{int(k)}-over-training.npz"


def save_arrays(path: Path, arrays: dict) -> None:
    """numpy arrays (strings included: no pickles) into one .npz, written then renamed into place."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(path) as tmp:
        with open(tmp, "wb") as f:
            np.savez(f, **arrays)


def read_arrays(path: Path) -> dict | None:
    try:
        with np.load(path, allow_pickle=False) as data:
            return {name: data[name] for name in data.files}
    except (OSError, ValueError):
        return None


def slug(name: str) -> str:
    """A model's name as a file name ("trained · step 1,500 …" → "trained-step-1-500-…")."""
    return re.sub(r"[^A-Za-z0-9._-]+", "-", str(name)).strip("-")[:80] or "model"
