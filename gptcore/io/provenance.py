"""Whether loaded weights are known to be trained — said only when something shows it.

A folder of weights says nothing about how they were made: `GPT2LMHeadModel(config).save_pretrained()`
writes exactly what a trained model writes. So a label of "trained" needs evidence, and there
are three kinds:
- the published models: a known hub id, fetched or found in the hub cache, or a config.json whose
  `_name_or_path` (written by transformers 4.x) names one, i.e. weights fine-tuned from them;
- training metadata a training script saved with the weights: nanoGPT's `iter_num` /
  `best_val_loss`, an optimizer state that has taken steps (the book's `optimizer_state_dict`,
  nanoGPT's `optimizer`, Lightning's `optimizer_states`), an epoch or step counter above zero;
- nothing else. Without evidence the weights are "loaded": provenance unknown, not "untrained".

A `Provenance` is (trained, why): trained is True (known trained), False (known not to be:
a training run saved before its first step) or None (unknown).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import torch

from gptcore.io.hub import HUB_REPOS

# Short ids and the repositories holding them: the published, trained GPT-2 checkpoints.
KNOWN_TRAINED = frozenset(HUB_REPOS) | frozenset(HUB_REPOS.values())
# A hub cache snapshot: .../models--{org}--{name}/snapshots/{revision}/
_CACHE_DIR = re.compile(r"^models--(.+)$")
_STEP_KEYS = ("iter_num", "global_step", "step", "epoch")
_OPTIMIZER_KEYS = ("optimizer_state_dict", "optimizer", "optimizer_states")


@dataclass(frozen=True)
class Provenance:
    trained: bool | None
    why: str

    @property
    def label(self) -> str:
        """The word a status bar shows: "trained", "untrained" or "loaded" (unknown)."""
        return {True: "trained", False: "untrained", None: "loaded"}[self.trained]


UNKNOWN = Provenance(None, "nothing in the checkpoint says how its weights were made")


def of_hub_id(model_id: str) -> Provenance:
    if model_id in KNOWN_TRAINED:
        return Provenance(True, f"{model_id} is a published pretrained model")
    return Provenance(None, f"{model_id} came from the hub, which does not record whether its weights were trained")


def of_hf_folder(folder: Path, hf_config: Mapping[str, Any]) -> Provenance:
    """A hub cache snapshot of a known model, or a config naming one as its origin; else unknown."""
    repo = _cached_repo(folder)
    if repo is not None:  # the cache copy of a hub repository is that repository
        return of_hub_id(repo)
    origin = hf_config.get("_name_or_path")
    if isinstance(origin, str) and origin in KNOWN_TRAINED:
        return Provenance(True, f"config.json says it was made from {origin} (a published pretrained model)")
    return UNKNOWN


def _cached_repo(folder: Path) -> str | None:
    parts = folder.parts
    if len(parts) >= 3 and parts[-2] == "snapshots":
        match = _CACHE_DIR.match(parts[-3])
        if match:
            return match.group(1).replace("--", "/")
    return None


def of_training_dict(ckpt: Mapping[str, Any]) -> Provenance:
    """What a training script saved next to the weights (nanoGPT, the book, Lightning, most loops).

    Evidence of training: a step counter above zero, nanoGPT's best_val_loss, or an optimizer state
    that has taken steps (torch keeps per-parameter state only after the first `step()`). A step
    counter of zero with no such optimizer state means saved before training. An epoch of 0 proves
    nothing either way (loops count from 0 and save at the end of an epoch)."""
    counters = {k: float(ckpt[k]) for k in _STEP_KEYS if _is_number(ckpt.get(k))}
    optimizer = next((k for k in _OPTIMIZER_KEYS if _has_stepped(ckpt.get(k))), None)
    unstarted = [k for k in _STEP_KEYS if k != "epoch" and counters.get(k, 1) <= 0]
    if unstarted and optimizer is None:
        return Provenance(False, f"saved at {unstarted[0]}=0, before any training step")
    found = [f"{k}={_plain(ckpt[k])}" for k, v in counters.items() if v > 0]
    if _is_number(ckpt.get("best_val_loss")):
        found.append(f"best_val_loss={float(ckpt['best_val_loss']):.4g}")
    if optimizer is not None:
        found.append(f"an optimizer state that has taken steps ({optimizer})")
    if found:
        return Provenance(True, "saved by a training run: " + ", ".join(found))
    return UNKNOWN


def _has_stepped(optimizer) -> bool:
    """An optimizer state_dict (or Lightning's list of them) holding per-parameter state."""
    if isinstance(optimizer, list):
        return any(_has_stepped(o) for o in optimizer)
    return isinstance(optimizer, dict) and isinstance(optimizer.get("state"), dict) and bool(optimizer["state"])


def _is_number(value) -> bool:
    if isinstance(value, torch.Tensor):  # nanoGPT saves best_val_loss as a 0-d tensor
        return value.numel() == 1 and not value.dtype.is_complex
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _plain(value) -> str:
    return str(value.item() if hasattr(value, "item") else value)
