"""gptcore.training: nanoGPT's train.py as a library — `TrainConfig` (its settings), `Trainer`
(one optimizer step at a time, DDP-ready, resumable), corpora and their batches (data.py), and
checkpoints nanoGPT itself can load (checkpoint.py). The command line and the run folder build
on these. Names load lazily: importing gptcore.training does not import torch's optimizers."""
from __future__ import annotations

import importlib

_LAZY = {
    "TrainConfig": "config", "TrainConfigError": "config", "CPU_RECIPE_MODEL": "config",
    "Trainer": "trainer", "lm_loss": "trainer",
    "TrainingError": "errors", "NonFiniteLoss": "errors", "CheckpointError": "errors",
    "Corpus": "data", "DataError": "data", "load_corpus": "data", "PYDOC_TOPICS": "data",
    "CHAR_VOCAB_FILE": "data", "read_saved_vocab": "data",
    "save_checkpoint": "checkpoint", "read_checkpoint": "checkpoint",
    "OUR_FORMAT": "checkpoint",
}

__all__ = list(_LAZY)


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module 'gptcore.training' has no attribute {name!r}")
