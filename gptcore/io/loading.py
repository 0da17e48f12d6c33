"""`load(source)`: any GPT-2-family checkpoint into our GPT — hub id, HF folder, lone safetensors
file or nanoGPT ckpt.pt — safely, fast, and with an honest account of what was loaded.

Fast: the module is built on the meta device (no init spent on weights that are overwritten) and
the file is memory-mapped. A safetensors file loaded in its own dtype on the CPU is used in place,
without any copy (HF's Conv1D matrices become transposed views, which F.linear reads at full speed),
as transformers' from_pretrained does. Otherwise each tensor is copied exactly once, straight into
the requested dtype on the requested device (a bf16 GPU load never holds an fp32 copy). Torch
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
from gptcore.model.gpt import GPT
from gptcore.io.nonfinite import BackgroundScreen, count_non_finite, may_hold_non_finite, non_finite_error
from gptcore.model.params import dtype_bytes, format_bytes, format_count

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


def _usable_in_place(raw: RawCheckpoint, t: torch.Tensor, device: torch.device, dtype: torch.dtype) -> bool:
    return not raw.detach and t.is_floating_point() and t.dtype == dtype and t.device == device


def _take_weights(raw: RawCheckpoint, ours: dict, names: list[str], device, dtype, progress, cancel,
                  screen: BackgroundScreen) -> dict:
    """Each tensor as the model will hold it: the mapped tensor itself when nothing needs changing
    (and the file may stay mapped), else one copy, straight into `dtype` on `device`. NaN/Inf is
    refused, naming the tensors, before a model exists (`screen` has looked at the in-place ones)."""
    itemsize = dtype_bytes(dtype)
    total = sum(ours[k].numel() for k in names) * itemsize
    done, out, bad = 0, {}, []
    for key in names:
        _check_cancel(cancel)
        src = ours[key]
        if not src.is_floating_point():
            raise LoadError(f"{raw.path}: tensor {key} holds {src.dtype}, not floating-point weights; "
                            f"the file is damaged or not a GPT-2 checkpoint")
        if key in screen:
            dst, suspect = src, screen.result(key)
        else:
            dst = torch.empty(src.shape, dtype=dtype, device=device)
            dst.copy_(src)  # one pass: dtype cast, Conv1D transpose and host->device together
            suspect = may_hold_non_finite(dst)
        if suspect:
            n_bad = count_non_finite(dst)
            if n_bad:
                bad.append((key, n_bad, dst.numel(), bool(torch.isfinite(src).all())))
        out[key] = dst
        done += dst.numel() * itemsize
        if progress is not None:
            progress(done, total, "loading weights")
    if bad:
        raise non_finite_error(raw.path, bad, DTYPE_NAMES[dtype])
    return out
