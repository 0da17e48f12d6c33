"""`load(source)`: any GPT-2-family checkpoint into our GPT — hub id, HF folder, lone safetensors
file or nanoGPT ckpt.pt — safely, fast, and with an honest account of what was loaded.

Fast: the module is built on the meta device (no init spent on weights that are overwritten) and
the file is memory-mapped. A safetensors file loaded in its own dtype on the CPU is used in place,
without any copy (HF's Conv1D matrices become transposed views, which F.linear reads at full speed),
as transformers' from_pretrained does. Otherwise each tensor is copied exactly once, straight into
the requested dtype on the requested device (a bf16 GPU load never holds an fp32 copy of the model).
Onto a GPU the file's bytes cross as they lie, one contiguous copy per tensor, and the Conv1D
transpose and the dtype cast run on the device: no transposed or cast copy is made on the CPU first
(that CPU pass was most of a GPU load's time, issue 37). A model the device has no room for is
refused before anything is copied, with both sizes named. Torch
pickles (ckpt.pt, pytorch_model.bin) are always copied: training scripts rewrite them in place,
which would change, or crash, a model still mapped onto the file.
Safe: see checkpoints.py (no code runs from a file). Honest: every problem is a LoadError naming
the file and the fix, raised before anything is returned, so there is never a half-loaded model.
Weights holding NaN/Inf are refused, with the tensors named: a model with them outputs NaN for
every token, so there is nothing to explore.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch

from gptcore.io.checkpoints import LoadCancelled, LoadError
from gptcore.model.config import GPTConfig, describe_parts
from gptcore.io.convert import ConversionError, check_against, convert_state_dict
from gptcore.io.folder_tokenizer import TokenizerChoice, choose_tokenizer
from gptcore.io.head_count import HeadCountNeeded
from gptcore.io.folder_tokenizer import load_tokenizer as _load_chosen_tokenizer
from gptcore.io.hub import HUB_IDS, is_hub_cached
from gptcore.io.layouts import RawCheckpoint, is_conv1d, read_source
from gptcore.model.device_memory import free_bytes
from gptcore.model.gpt import GPT
from gptcore.io.nonfinite import (BackgroundScreen, count_non_finite, may_hold_non_finite, non_finite_error,
                                  non_finite_flag)
from gptcore.model.params import count_parameters, dtype_bytes, format_bytes, format_count

__all__ = [
    "HUB_IDS", "LoadCancelled", "LoadError", "LoadInfo", "default_device", "is_hub_cached", "load",
    "load_tokenizer", "resolve_device", "resolve_dtype",
]

ProgressFn = Callable[[int, int, str], None]
DTYPES = {
    "fp32": torch.float32, "float32": torch.float32,
    "bf16": torch.bfloat16, "bfloat16": torch.bfloat16,
    "fp16": torch.float16, "float16": torch.float16, "half": torch.float16,
}
DTYPE_NAMES = {torch.float32: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16"}


# Said after the head count wherever it is shown, when the file did not record it.
HEADS_NOTE = {"given": " (given by the user: the file does not record it)",
              "guessed": " (guessed: the file does not record it; pass --n-head)"}


@dataclass(frozen=True)
class LoadInfo:
    """What was loaded, from where, and anything the user should know about it.

    `trained` is True only with evidence (a published hub model, training metadata saved with
    the weights; see provenance.py), False when known untrained, None when nothing says (weights
    of unknown provenance: "loaded"); `provenance` says which. `tokenizer` names the tokenizer
    that belongs to the model (`load_tokenizer(info)` builds it).
    """

    name: str
    source: str
    path: str
    config: GPTConfig
    dtype: str
    device: str
    n_params: int
    tied: bool
    trained: bool | None = None
    warnings: tuple[str, ...] = ()
    format: str = ""
    seconds: float = 0.0
    provenance: str = ""
    tokenizer: TokenizerChoice = TokenizerChoice("gpt2", reason="GPT-2's tokenizer (default)")
    heads: str = "file"  # where n_head came from: "file", "given" (the caller's n_head) or "guessed"

    @property
    def status(self) -> str:
        """"trained", "untrained" or "loaded" (provenance unknown): the word to show, never a guess."""
        return {True: "trained", False: "untrained"}.get(self.trained, "loaded")

    def describe(self) -> dict[str, str]:
        c = self.config
        return {
            "name": self.name,
            "source": self.source,
            "path": self.path,
            "format": self.format or "-",
            "shape": f"{c.n_layer} layers, {c.n_head} heads{HEADS_NOTE.get(self.heads, '')}, width {c.n_embd}, MLP {c.d_mlp}, "
                     f"context {c.block_size}, vocab {c.vocab_size}",
            "parts": describe_parts(c),
            "parameters": f"{self.n_params:,} ({format_count(self.n_params)})",
            "output head": "tied to the token embedding" if self.tied else "separate (untied)",
            "dtype": self.dtype,
            "device": self.device,
            "memory": format_bytes(self.n_params * dtype_bytes(self.dtype)),
            "load time": f"{self.seconds:.2f} s",
            "weights": f"{self.status} ({self.provenance})" if self.provenance else self.status,
            "tokenizer": self.tokenizer.describe(),
            "warnings": "; ".join(self.warnings) if self.warnings else "none",
        }


# -- device and dtype ----------------------------------------------------------------------------

def default_device() -> torch.device:
    """CUDA when present, else Apple MPS, else CPU."""
    if torch.cuda.is_available():
        return torch.device("cuda")
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        return torch.device("mps")
    return torch.device("cpu")


def resolve_device(spec=None) -> torch.device:
    if spec is None or spec == "auto":
        return default_device()
    try:
        device = torch.device(spec)
    except (RuntimeError, TypeError, ValueError):
        raise LoadError(f"unknown device {spec!r}; use cpu, cuda, cuda:N, mps or auto") from None
    if device.type == "cuda":
        if not torch.cuda.is_available():
            build = "a CPU-only build" if torch.version.cuda is None else f"built for CUDA {torch.version.cuda}"
            raise LoadError(f"CUDA was requested but is not available (torch {torch.__version__}, {build}); "
                            f"use --device cpu (or auto), or install a CUDA build of torch on a machine with an NVIDIA GPU")
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise LoadError(f"{device} does not exist: this machine has {torch.cuda.device_count()} CUDA device(s)")
    elif device.type == "mps":
        mps = getattr(torch.backends, "mps", None)
        if mps is None or not mps.is_available():
            raise LoadError("Apple MPS was requested but is not available here; use device 'cpu' or 'auto'")
    elif device.type != "cpu":
        raise LoadError(f"device {spec!r} is not supported; use cpu, cuda or mps")
    return device


def resolve_dtype(spec=None) -> torch.dtype:
    if spec is None:
        return torch.float32
    if isinstance(spec, torch.dtype):
        if spec in DTYPE_NAMES:
            return spec
    elif isinstance(spec, str) and spec.lower() in DTYPES:
        return DTYPES[spec.lower()]
    raise LoadError(f"unknown dtype {spec!r}; use fp32 (default), bf16 or fp16")


# -- load ----------------------------------------------------------------------------------------

def load(source, *, device=None, dtype=None, progress: ProgressFn | None = None, n_head: int | None = None,
         cancel: Callable[[], bool] | None = None, guess_heads: bool = False, meta=None) -> tuple[GPT, LoadInfo]:
    """Load a GPT-2-family checkpoint -> (model in eval mode on `device`, LoadInfo).

    `source`: a hub id (gpt2, openai-community/gpt2, gpt2-medium, gpt2-large, gpt2-xl, distilgpt2, or
    any org/name), an HF folder, a .safetensors file, a nanoGPT ckpt.pt, the book's GPTModel
    (model.pth, or its dict with the optimizer state) or a torch state dict file.
    `progress(done, total, what)` is called as bytes arrive and are loaded; `cancel()` is checked
    between steps and raises LoadCancelled. `n_head` is for files without a config (it is not in
    any tensor shape); without it such a file raises HeadCountNeeded (its `choices` are the counts
    that fit, its message names `--n-head`) before anything is built: the window asks with a
    dialog, the command line with that message. `guess_heads=True` loads it with a guessed count
    and a warning instead (a wrong count changes every output, so only on request).
    `meta`: nanoGPT's meta.pkl to read the model's characters from, when the one its checkpoint's
    config['dataset'] names is not found (io/nanogpt_meta.py; LoadInfo.tokenizer.wants says so).
    """
    start = time.perf_counter()
    target_device, target_dtype = resolve_device(device), resolve_dtype(dtype)
    _check_cancel(cancel)
    raw = read_source(source, n_head, progress, cancel)
    if raw.heads == "guessed" and not guess_heads:
        raise HeadCountNeeded(raw.path, raw.config.n_embd)
    _check_cancel(cancel)
    check_room(raw, target_device, target_dtype)
    model = _build(raw, target_device, target_dtype, progress, cancel)
    tokenizer = choose_tokenizer(raw.path, raw.config.vocab_size, nanogpt=raw.format == "nanoGPT ckpt",
                                 dataset=raw.dataset, meta=None if meta is None else Path(meta))
    if tokenizer.kind == "none":
        raw.warnings.append(f"no tokenizer for this model: {tokenizer.reason}")
    info = LoadInfo(
        name=raw.name, source=str(source), path=str(raw.path), config=raw.config,
        dtype=DTYPE_NAMES[target_dtype], device=str(model.device), n_params=model.num_parameters(),
        tied=raw.config.tie_weights, trained=raw.provenance.trained, provenance=raw.provenance.why,
        tokenizer=tokenizer, warnings=tuple(raw.warnings), format=raw.format, seconds=time.perf_counter() - start,
        heads=raw.heads,
    )
    return model, info


def load_tokenizer(info: LoadInfo):
    """(tokenizer, reason) for a loaded model: GPT-2's BPE, the folder's own tokenizer.json (through
    transformers' fast tokenizer, offline) or None with the reason, so token ids can be shown instead."""
    return _load_chosen_tokenizer(info.tokenizer)


def _check_cancel(cancel) -> None:
    if cancel is not None and cancel():
        raise LoadCancelled("loading cancelled; the previous model is unchanged")


def _build(raw: RawCheckpoint, device: torch.device, dtype: torch.dtype, progress, cancel) -> GPT:
    config = raw.config
    ours, unexpected = convert_state_dict(raw.state, conv1d=is_conv1d(raw.state))
    in_place = {k: t for k, t in ours.items() if _usable_in_place(raw, t, device, dtype)}
    with BackgroundScreen(in_place) as screen:  # reads the mapped weights while the model is built
        model = GPT.empty(config)  # meta: no memory, no init; filled below
        expected = model.state_dict()
        try:
            check_against(expected, ours, unexpected, config.tie_weights)
        except ConversionError as exc:
            raise LoadError(f"{raw.path}: the weights do not fit the model described by {raw.config_origin} "
                            f"({config.n_layer} layers, width {config.n_embd}, vocab {config.vocab_size}): {exc}. "
                            f"Is this file from a different model, or is the config from another one?") from None
        names = [k for k in expected if not (config.tie_weights and k == "unembed.weight")]
        weights = _take_weights(raw, ours, names, device, dtype, progress, cancel, screen)
    model.load_state_dict(weights, strict=False, assign=True)
    model.tie_weights()
    leftover = [n for n, t in [*model.named_parameters(), *model.named_buffers()] if t.is_meta]
    if leftover:  # a bug here, not in the file: refuse rather than hand out an unusable model
        raise LoadError(f"internal error loading {raw.path}: {', '.join(leftover)} were not filled")
    return model.eval()


def check_room(raw: RawCheckpoint, device: torch.device, dtype: torch.dtype) -> None:
    """Refuse, before a byte is copied, a model that `device` has no room for, naming both sizes. What a
    load needs there: the weights in `dtype` (a tied head once) plus the largest tensor in transit in the
    file's dtype. The CPU is not checked: a mapped file is the operating system's to page."""
    if device.type == "cpu":
        return
    free = free_bytes(device)
    if free is None:
        return
    count = count_parameters(raw.config)
    name = DTYPE_NAMES[dtype]
    in_transit = max((t.numel() * t.element_size() for t in raw.state.values()), default=0)
    need = count.memory_bytes(name) + in_transit
    if need > free:
        smaller = "" if name != "fp32" else ", in bf16 or fp16 (half the memory)"
        raise LoadError(f"{raw.path}: this model needs about {format_bytes(need)} on {device} ({count.total:,} "
                        f"parameters in {name}, plus one tensor in transit) but only {format_bytes(free)} is free "
                        f"there; load it on the CPU (device cpu){smaller}, or free the GPU's memory (another "
                        f"model or program holding it)")


def _usable_in_place(raw: RawCheckpoint, t: torch.Tensor, device: torch.device, dtype: torch.dtype) -> bool:
    return not raw.detach and t.is_floating_point() and t.dtype == dtype and t.device == device


def _take_weights(raw: RawCheckpoint, ours: dict, names: list[str], device, dtype, progress, cancel,
                  screen: BackgroundScreen) -> dict:
    """Each tensor as the model will hold it: the mapped tensor itself when nothing needs changing
    (and the file may stay mapped), else one copy, straight into `dtype` on `device`. NaN/Inf is
    refused, naming the tensors, before a model exists (`screen` has looked at the in-place ones)."""
    itemsize = dtype_bytes(dtype)
    total = sum(ours[k].numel() for k in names) * itemsize
    done, out, suspects, flags = 0, {}, [], {}
    for key in names:
        _check_cancel(cancel)
        src = ours[key]
        if not src.is_floating_point():
            raise LoadError(f"{raw.path}: tensor {key} holds {src.dtype}, not floating-point weights; "
                            f"the file is damaged or not a GPT-2 checkpoint")
        if key in screen:
            dst = src
            if screen.result(key):
                suspects.append(key)
        else:
            dst = copy_onto(src, dtype, device)
            if _accelerator(device):  # read back below, all in one transfer: one wait, not one per tensor
                flags[key] = non_finite_flag(dst)
            elif may_hold_non_finite(dst):
                suspects.append(key)
        out[key] = dst
        done += dst.numel() * itemsize
        if progress is not None:
            progress(done, total, "loading weights")
    if flags:
        found = torch.stack(list(flags.values())).cpu().tolist()  # (n,) the one host synchronisation
        suspects += [key for key, flagged in zip(flags, found) if flagged]
    bad, order = [], {key: i for i, key in enumerate(names)}
    for key in sorted(suspects, key=order.__getitem__):
        n_bad = count_non_finite(out[key])
        if n_bad:
            bad.append((key, n_bad, out[key].numel(), bool(torch.isfinite(ours[key]).all())))
    if bad:
        raise non_finite_error(raw.path, bad, DTYPE_NAMES[dtype])
    return out


def copy_onto(src: torch.Tensor, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """`src` (a tensor as the file holds it, maybe a transposed view) as a new contiguous tensor in
    `dtype` on `device`, the same numbers either way."""
    if _accelerator(device):
        return staged_copy(src, dtype, device)
    dst = torch.empty(src.shape, dtype=dtype, device=device)
    dst.copy_(src)  # one pass: dtype cast and Conv1D transpose together
    return dst


def _accelerator(device: torch.device) -> bool:
    """Whether weights cross to another memory (a GPU's) on their way into the model: then they are
    staged (staged_copy) and screened on the device. One place, so a test can take that route on the CPU."""
    return device.type != "cpu"


def staged_copy(src: torch.Tensor, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """Onto an accelerator: the tensor's bytes cross in storage order (one contiguous host->device copy
    of the file's numbers, in the file's dtype), then the Conv1D transpose and the cast run on the
    device. copy_ from a transposed CPU view would first make a transposed copy on the CPU. Written
    for any device, so the CPU can test it against copy_ (tests/gptcore/test_loading_device.py)."""
    flipped = src.dim() == 2 and not src.is_contiguous() and src.t().is_contiguous()  # a Conv1D view
    stored = src.t() if flipped else src
    if not stored.is_contiguous():  # some other view: copy_ handles it, as before
        dst = torch.empty(src.shape, dtype=dtype, device=device)
        dst.copy_(src)
        return dst
    moved = stored.to(device, copy=True)  # storage order, the file's dtype
    if not flipped and moved.dtype == dtype:
        return moved
    dst = torch.empty(src.shape, dtype=dtype, device=device)
    dst.copy_(moved.t() if flipped else moved)  # transpose and cast, on the device
    return dst
