"""Continuing nanoGPT's own out_dir: `python -m gptcore.train --init_from=resume --out_dir=out-x`
where out-x holds the ckpt.pt nanoGPT's train.py wrote (and no run.json of ours).

What nanoGPT's train.py does on `init_from='resume'`: the model from ckpt['model_args'] and
ckpt['model'], the optimizer from ckpt['optimizer'], and it goes on from ckpt['iter_num'] with the
settings of its command line, reading `data/<dataset>/train.bin` relative to where it runs. Here
the same facts become the description a run.json would give (`nanogpt_run_meta`): one scheme
("gpt2": nanoGPT's own init, which the checkpoint's weights replace anyway), the training settings
the checkpoint's config recorded (train.py saves them all; nanoGPT's defaults, which are
TrainConfig's, where it has none), and the data folder its config['dataset'] names, looked for as
nanoGPT would (next to the out_dir, or in the current folder) unless `--data` gives it. Device,
dtype and compile are this machine's choice (a checkpoint from a GPU box says 'cuda'), unless given.
The run folder then gains its run.json and trace as any run (loop.py), and ckpt.pt stays
nanoGPT's format, so nanoGPT can resume it in turn.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path

from gptcore.training.config import TrainConfig
from gptcore.training.run import RunFolder, RunFolderError

NOT_FROM_THE_CHECKPOINT = ("device", "dtype", "compile")  # the machine's, not the run's


def is_nanogpt_out_dir(folder: RunFolder) -> bool:
    """nanoGPT's out_dir: a ckpt.pt and no run.json (a gptcore run always has one)."""
    return not folder.exists() and (folder.root / "ckpt.pt").is_file()


def nanogpt_run_meta(folder: RunFolder, data: str | None) -> dict:
    """The run.json-shaped description of nanoGPT's out_dir (see the module docstring)."""
    ckpt = _read(folder.root / "ckpt.pt")
    config = ckpt.get("config") if isinstance(ckpt.get("config"), dict) else {}
    fields = {f.name for f in dataclasses.fields(TrainConfig)}
    train = {**TrainConfig().to_dict(), **{k: v for k, v in config.items()
                                           if k in fields and k not in NOT_FROM_THE_CHECKPOINT}}
    for key in NOT_FROM_THE_CHECKPOINT:
        train.pop(key, None)
    source = data if data is not None else str(_find_data(folder.root, config.get("dataset")))
    return {"schemes": ["gpt2"], "train_config": train, "corpus": {"source": source},
            "tokenizer": {"kind": "char"}, "probe_interval": 0, "preset": None}


def _read(path: Path) -> dict:
    from gptcore.io.checkpoints import LoadError, read_torch

    try:
        ckpt = read_torch(path)
    except LoadError as exc:
        raise RunFolderError(str(exc)) from None
    if not isinstance(ckpt, dict) or "model_args" not in ckpt or "optimizer" not in ckpt:
        raise RunFolderError(f"{path.parent} is not a run folder (no run.json) and its {path.name} is not a "
                             f"nanoGPT training checkpoint (no model_args and optimizer state); give the "
                             f"--out_dir of a run started by `python -m gptcore.train` or nanoGPT's train.py")
    return ckpt


def _find_data(root: Path, dataset) -> Path:
    """nanoGPT's data/<dataset> folder (train.bin there), where its train.py would look."""
    from gptcore.io.nanogpt_meta import data_folders

    if not isinstance(dataset, str) or not dataset.strip():
        raise RunFolderError(f"{root / 'ckpt.pt'} is nanoGPT's, but its config names no dataset; give the data "
                             f"it was trained on with --data=PATH/TO/data/<dataset>")
    looked = data_folders(root, dataset)
    found = next((p for p in looked if (p / "train.bin").is_file()), None)
    if found is None:
        raise RunFolderError(f"{root / 'ckpt.pt'} was trained on nanoGPT's dataset {dataset!r}, but no "
                             f"data/{dataset}/train.bin was found (looked in {', '.join(str(p) for p in looked)}); "
                             f"give it with --data=PATH/TO/data/{dataset}")
    return found
