"""A tiny session's transcoders for the tests of session.circuits and of the Circuits panel, said once:
trained (width 64, k 4) once per test module on a short repetitive text, then copied where each test's
session looks for them (each test has its own data folder)."""
from __future__ import annotations

import os
import shutil
from pathlib import Path

import torch

from explorer.session.circuits import store

TEXT = "the quick brown fox jumps over the lazy dog while the cat sleeps on the warm mat " * 60
PROMPT = "the quick brown fox jumps over the lazy"
WIDTH, K = 64, 4


def train_tiny_set(home: Path):
    """(TranscoderSet, corpus file): Session.tiny()'s transcoders trained on TEXT, saved under `home`/data
    (XDG_DATA_HOME for the training only: a module's fixture runs before each test's own folders), on one
    torch thread (the number of threads is given back after)."""
    from explorer.session.core import Session

    corpus = home / "corpus.txt"
    corpus.write_text(TEXT, encoding="utf-8")
    before, threads = os.environ.get("XDG_DATA_HOME"), torch.get_num_threads()
    os.environ["XDG_DATA_HOME"] = str(home / "data")
    torch.set_num_threads(1)
    try:
        tset = Session.tiny().circuits.train(width=WIDTH, k=K, tokens=16_384, corpus="file", path=str(corpus))
    finally:
        os.environ.pop("XDG_DATA_HOME") if before is None else os.environ.__setitem__("XDG_DATA_HOME", before)
        torch.set_num_threads(threads)
    return tset, corpus


def copy_set_for(info, folder: Path) -> None:
    """Put the set in `folder` where a session showing the model `info` describes looks for it."""
    target = store.set_folder(info, WIDTH, K)
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copytree(folder, target)
