"""gptcore.io.atomic: the one write-and-rename helper every saved file goes through."""
from __future__ import annotations

import pytest
import torch

from gptcore.io.atomic import atomic_path, atomic_write_bytes
from gptcore.training.checkpoint import save_checkpoint
from gptcore.training.errors import CheckpointError


def test_a_failed_write_keeps_the_old_file_and_leaves_no_temporary(tmp_path):
    target = tmp_path / "run.json"
    atomic_write_bytes(target, b"old")
    with pytest.raises(RuntimeError):
        with atomic_path(target, durable=True) as tmp:
            tmp.write_bytes(b"half")
            raise RuntimeError("killed mid-save")
    assert target.read_bytes() == b"old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.json"]


def test_the_temporary_is_hidden_beside_the_target_and_renamed_over_it(tmp_path):
    target = tmp_path / "model.safetensors"
    with atomic_path(target, durable=True) as tmp:
        assert tmp.parent == tmp_path and tmp.name.startswith(".model.safetensors.tmp")
        tmp.write_bytes(b"new")
        assert not target.exists()  # a reader sees nothing (or the old file) until the rename
    assert target.read_bytes() == b"new" and not tmp.exists()


def test_a_checkpoint_that_cannot_be_written_says_so_and_keeps_the_previous(tmp_path, monkeypatch):
    from gptcore.training import checkpoint

    path = tmp_path / "ckpt.pt"
    path.write_bytes(b"previous")

    def full_disk(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(checkpoint, "checkpoint_dict", lambda trainer, **extra: {"x": torch.zeros(1)})
    monkeypatch.setattr(torch, "save", full_disk)
    with pytest.raises(CheckpointError, match="the previous ckpt.pt is unchanged"):
        save_checkpoint(path, trainer=None)
    assert path.read_bytes() == b"previous"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt.pt"]
