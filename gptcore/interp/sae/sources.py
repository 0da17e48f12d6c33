"""Where an SAE's training rows come from: a tensor in memory, or an fp16 file on disk.

Why a disk cache: GPT-2 small's residual stream is 768 numbers per token; the 2M tokens an SAE
wants are 6 GB in float32. `ActivationCache` keeps them as float16 in one memory-mapped file
(3 GB), written chunk by chunk while the model runs and read back a batch at a time, so they are
never all in RAM (the OS pages in what a batch touches). Both kinds answer `shape` and
`rows(indices) -> float32 (n, d)`, which is all `fit_sae` asks of its data.

On a GPU (`as_source(acts, device)`): rows already there stay there; a tensor in host memory is
copied over once when it fits in `DEVICE_SHARE` of the card's free memory, else gathered a batch
at a time on the host and sent; the disk cache sends each batch. Host batches go through pinned
(page-locked) memory, so the copy joins the card's queue without waiting for the steps queued
before it.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch

from gptcore.interp.sae.dictionary import SAEError

CHECK_CHUNK = 65536  # rows checked for NaN/inf at a time (bounded extra memory)
DEVICE_SHARE = 0.5  # of a GPU's free memory, what activations may take there (the rest: the trainer, its batch)
CPU = torch.device("cpu")


class TensorRows:
    """Rows of an in-memory (N, d) tensor, any float dtype, as float32 on `device` per batch."""

    def __init__(self, acts: torch.Tensor, device: torch.device | None = None):
        device = acts.device if device is None else device
        if acts.device != device and device.type != "cpu" and acts.nbytes <= device_room(device):
            acts = acts.to(device)  # once, in its own dtype
        self.acts, self.device = acts, device
        self.shape = tuple(acts.shape)

    def rows(self, indices: torch.Tensor) -> torch.Tensor:
        picked = self.acts.index_select(0, indices.to(self.acts.device, non_blocking=True))  # (n, d)
        return to_device(picked, self.device)


class DeviceRows:
    """Any row source (an ActivationCache, ...) whose batches are sent to `device`."""

    def __init__(self, source, device: torch.device):
        self.source, self.device = source, device
        self.shape = tuple(source.shape)

    def rows(self, indices: torch.Tensor) -> torch.Tensor:
        return to_device(self.source.rows(indices), self.device)


def to_device(rows: torch.Tensor, device: torch.device) -> torch.Tensor:
    """rows as float32 on `device`: from host memory to a GPU through pinned memory, in their own
    dtype (float16 rows cross at half the bytes) and converted there."""
    if rows.device != device and device.type == "cuda":
        rows = rows.pin_memory().to(device, non_blocking=True)
    return rows.to(device, torch.float32)


def device_room(device: torch.device) -> int:
    """Bytes of activations that may live on the GPU `device` (DEVICE_SHARE of its free memory)."""
    if device.type != "cuda":
        return 0
    free, _total = torch.cuda.mem_get_info(device)
    return int(free * DEVICE_SHARE)


def training_device(device, default: torch.device) -> torch.device:
    """Where an SAE trains: `device` (a name or torch.device; None: `default`), a GPU's index made
    explicit so that "cuda" and "cuda:0" compare equal. Apple's MPS trains on the CPU, as before
    issue 37: the step's embedding bags, sort and kthvalue are not verified there."""
    from gptcore.io.loading import resolve_device

    device = default if device is None else resolve_device(device)
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    return CPU if device.type == "mps" else device


class ActivationCache:
    """(rows, d) float16 activations in `path` (raw, memory-mapped) with `path`.json for the shape."""

    device = CPU  # where `rows` returns them

    def __init__(self, path, shape: tuple[int, int], mode: str = "r"):
        self.path = Path(path)
        self.shape = (int(shape[0]), int(shape[1]))
        self._map = np.memmap(self.path, dtype=np.float16, mode=mode, shape=self.shape)

    @classmethod
    def create(cls, path, rows: int, d: int) -> "ActivationCache":
        """A new cache of `rows` rows, to be filled with `write`."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        Path(f"{path}.json").write_text(json.dumps({"rows": rows, "d": d, "dtype": "float16"}))
        return cls(path, (rows, d), mode="w+")

    @classmethod
    def open(cls, path) -> "ActivationCache":
        meta = json.loads(Path(f"{path}.json").read_text())
        return cls(path, (meta["rows"], meta["d"]))

    @property
    def nbytes(self) -> int:
        return self.shape[0] * self.shape[1] * 2

    def write(self, start: int, block: torch.Tensor) -> None:
        """Store rows start.. of `block` (n, d); refuses NaN/inf and values float16 cannot hold."""
        block = block.detach().to("cpu", torch.float32)
        check_finite(block, f"rows {start}..{start + len(block) - 1}")
        if block.abs().max() > 65504:
            raise SAEError("activations exceed float16's range (65,504), so they cannot be cached on "
                           "disk; train on fewer tokens so they stay in memory as float32")
        self._map[start:start + len(block)] = block.numpy().astype(np.float16)

    def rows(self, indices: torch.Tensor) -> torch.Tensor:
        """float32 (n, d) rows in the order asked, read in file order (one pass over the pages a
        batch touches)."""
        wanted = indices.numpy()
        order = np.argsort(wanted, kind="stable")
        out = np.empty((len(wanted), self.shape[1]), dtype=np.float32)
        out[order] = self._map[wanted[order]]
        return torch.from_numpy(out)  # (n, d)

    def flush(self) -> None:
        self._map.flush()

    def delete(self) -> None:
        """Close the map and remove both files."""
        del self._map
        self.path.unlink(missing_ok=True)
        Path(f"{self.path}.json").unlink(missing_ok=True)


def as_source(acts, device=None):
    """A row source from activations (N, d): a tensor or array, or something with `rows` and `shape`;
    its batches land on `device` (default: where the activations are; host memory for a source
    that does not say). The source answers `device`."""
    if hasattr(acts, "rows") and hasattr(acts, "shape"):
        return DeviceRows(acts, training_device(device, getattr(acts, "device", CPU)))
    if isinstance(acts, np.ndarray):
        acts = torch.from_numpy(acts)
    if not isinstance(acts, torch.Tensor):
        raise SAEError(f"activations must be a (tokens, d) tensor or an ActivationCache, got {type(acts).__name__}")
    if acts.dim() != 2 or acts.shape[0] < 1 or acts.shape[1] < 1:
        raise SAEError(f"activations must be rows (tokens, d), got shape {tuple(acts.shape)}; "
                       "flatten the batch and position axes first (acts.reshape(-1, d))")
    if not acts.is_floating_point():
        raise SAEError(f"activations must be floating point, got {acts.dtype}")
    for start in range(0, acts.shape[0], CHECK_CHUNK):
        check_finite(acts[start:start + CHECK_CHUNK], f"rows {start}..{min(start + CHECK_CHUNK, len(acts)) - 1}")
    return TensorRows(acts, training_device(device, acts.device))


def check_finite(block: torch.Tensor, where: str) -> None:
    bad = ~torch.isfinite(block)
    if bad.any():
        row = int(bad.reshape(len(block), -1).any(1).nonzero()[0, 0])
        raise SAEError(f"the activations contain NaN or inf ({int(bad.sum())} values in {where}, first in "
                       f"row {row} of them): the model's forward overflowed or its weights are broken; "
                       "check the model (or run it in float32) before training an SAE on it")
