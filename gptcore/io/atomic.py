"""Write a file so that a reader sees the old one or the new one, never half of either.

Every file gptcore writes while someone may be reading it (a run's run.json and steps, a
checkpoint, char_vocab.json, an exported model.safetensors) is written here: into a hidden
temporary file beside the target (same folder, so the rename stays on one file system), then
renamed over it with os.replace, which is atomic on POSIX and Windows. On any failure the
temporary file is removed and the target is left as it was.
"""
from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def atomic_path(path, *, durable: bool = False) -> Iterator[Path]:
    """Yield a temporary path beside `path`; when the block ends without an error, rename it onto
    `path`, otherwise remove it. `durable` also fsyncs the file before and its folder after the
    rename (a checkpoint must survive a power cut; a trace line may not need to)."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    try:
        yield tmp
        if durable:
            with open(tmp, "rb+") as f:
                os.fsync(f.fileno())
        os.replace(tmp, path)
        if durable:
            _sync_folder(path.parent)
    finally:
        tmp.unlink(missing_ok=True)


def atomic_write_bytes(path, data: bytes, *, durable: bool = False) -> None:
    """Write `data` to `path` through atomic_path."""
    with atomic_path(path, durable=durable) as tmp:
        tmp.write_bytes(data)


def _sync_folder(folder: Path) -> None:
    """Make the rename itself durable (a power cut right after it could otherwise lose it)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:  # e.g. a platform that cannot open folders: the rename is still atomic
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
