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

import numpy as np
import torch
from torch.overrides import TorchFunctionMode

from .checkpoints import (
    LoadCancelled, LoadError, read_json, read_safetensors, read_sharded_index, read_torch, tensors_only,
)
from .config import ConfigError, GPTConfig
from .convert import ConversionError, check_against, config_from_hf, convert_state_dict, infer_config
from .hub import HUB_IDS, fetch, is_hub_cached, is_hub_id
from .model import GPT
from .params import dtype_bytes, format_bytes, format_count

__all__ = [
    "HUB_IDS", "LoadCancelled", "LoadError", "LoadInfo", "default_device", "is_hub_cached", "load",
    "resolve_device", "resolve_dtype",
]

ProgressFn = Callable[[int, int, str], None]
DTYPES = {
    "fp32": torch.float32, "float32": torch.float32,
    "bf16": torch.bfloat16, "bfloat16": torch.bfloat16,
    "fp16": torch.float16, "float16": torch.float16, "half": torch.float16,
}
DTYPE_NAMES = {torch.float32: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16"}
GPT2_VOCAB = 50257
# File names too generic to name a model: the folder holding them names it instead.
_GENERIC_NAMES = {"ckpt.pt", "model.safetensors", "pytorch_model.bin", "model.pt", "checkpoint.pt"}


@dataclass(frozen=True)
class LoadInfo:
    """What was loaded, from where, and anything the user should know about it."""

    name: str
    source: str
    path: str
    config: GPTConfig
    dtype: str
    device: str
    n_params: int
    tied: bool
    trained: bool = True
    warnings: tuple[str, ...] = ()
    format: str = ""
    seconds: float = 0.0

    def describe(self) -> dict[str, str]:
        c = self.config
        return {
            "name": self.name,
            "source": self.source,
            "path": self.path,
            "format": self.format or "-",
            "shape": f"{c.n_layer} layers, {c.n_head} heads, width {c.n_embd}, MLP {c.d_mlp}, "
                     f"context {c.block_size}, vocab {c.vocab_size}",
            "parameters": f"{self.n_params:,} ({format_count(self.n_params)})",
            "output head": "tied to the token embedding" if self.tied else "separate (untied)",
            "dtype": self.dtype,
            "device": self.device,
            "memory": format_bytes(self.n_params * dtype_bytes(self.dtype)),
            "load time": f"{self.seconds:.2f} s",
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
                            f"use device 'cpu' (or 'auto'), or install a CUDA build of torch on a machine with an NVIDIA GPU")
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

@dataclass
class _Raw:
    """A checkpoint read from disk but not yet checked: names as saved, tensors memory-mapped."""

    state: dict[str, torch.Tensor]
    config: GPTConfig
    path: Path
    format: str
    name: str
    warnings: list[str]
    config_origin: str  # says where the config came from, for mismatch messages
    detach: bool = False  # copy even when the mapped tensor could be used in place


def load(source, *, device=None, dtype=None, progress: ProgressFn | None = None, n_head: int | None = None,
         cancel: Callable[[], bool] | None = None) -> tuple[GPT, LoadInfo]:
    """Load a GPT-2-family checkpoint -> (model in eval mode on `device`, LoadInfo).

    `source`: a hub id (gpt2, openai-community/gpt2, gpt2-medium, gpt2-large, gpt2-xl, distilgpt2, or
    any org/name), an HF folder, a .safetensors file, a nanoGPT ckpt.pt or a torch state dict file.
    `progress(done, total, what)` is called as bytes arrive and are loaded; `cancel()` is checked
    between steps and raises LoadCancelled. `n_head` is for files without a config (it is not in
    any tensor shape).
    """
    start = time.perf_counter()
    target_device, target_dtype = resolve_device(device), resolve_dtype(dtype)
    _check_cancel(cancel)
    raw = _read_source(source, n_head, progress, cancel)
    _check_cancel(cancel)
    model = _build(raw, target_device, target_dtype, progress, cancel)
    info = LoadInfo(
        name=raw.name, source=str(source), path=str(raw.path), config=raw.config,
        dtype=DTYPE_NAMES[target_dtype], device=str(model.device), n_params=model.num_parameters(),
        tied=raw.config.tie_weights, trained=True, warnings=tuple(raw.warnings), format=raw.format,
        seconds=time.perf_counter() - start,
    )
    return model, info


def _check_cancel(cancel) -> None:
    if cancel is not None and cancel():
        raise LoadCancelled("loading cancelled; the previous model is unchanged")


def _read_source(source, n_head, progress, cancel) -> _Raw:
    text = str(source)
    path = Path(text).expanduser()
    if path.exists():
        return _read_path(path.resolve(), n_head)
    if isinstance(source, str) and is_hub_id(text):
        folder = fetch(text, progress, cancel)
        raw = _read_hf_folder(folder, n_head, safetensors_only=True)
        raw.name, raw.format = text, f"hub, {raw.format}"
        return raw
    raise LoadError(
        f"{text}: no such file or folder, and not a hub model id. Give a folder with config.json + "
        f"model.safetensors, a .safetensors file, a nanoGPT ckpt.pt, or a hub id ({', '.join(HUB_IDS)})"
    )


def _read_path(path: Path, n_head) -> _Raw:
    if path.is_dir():
        if (path / "config.json").is_file():
            return _read_hf_folder(path, n_head)
        if (path / "ckpt.pt").is_file():
            return _read_torch_file(path / "ckpt.pt", n_head)
        lone = sorted(path.glob("*.safetensors"))
        if len(lone) == 1:
            return _read_lone_safetensors(lone[0], n_head)
        listing = ", ".join(sorted(p.name for p in path.iterdir())[:10]) or "nothing"
        raise LoadError(f"{path} holds no checkpoint I can read (found: {listing}); expected config.json + "
                        f"model.safetensors (HF), a sharded model.safetensors.index.json, ckpt.pt (nanoGPT) "
                        f"or a single .safetensors file")
    if path.name.endswith(".index.json") or path.name == "config.json":
        return _read_hf_folder(path.parent, n_head)
    if path.suffix == ".safetensors" or _sniff_is_safetensors(path):
        return _read_lone_safetensors(path, n_head)
    return _read_torch_file(path, n_head)


def _sniff_is_safetensors(path: Path) -> bool:
    """Unknown suffix: a torch file starts with a zip or pickle signature; else try safetensors."""
    with open(path, "rb") as f:
        head = f.read(4)
    return len(head) == 4 and not head.startswith((b"PK", b"\x80"))


def _display_name(path: Path) -> str:
    return f"{path.parent.name}/{path.name}" if path.name in _GENERIC_NAMES and path.parent.name else path.stem


def _read_hf_folder(folder: Path, n_head, safetensors_only: bool = False) -> _Raw:
    config_path = folder / "config.json"
    config, warnings = _config_from_hf_json(config_path, read_json(config_path))
    detach = False
    if n_head is not None and n_head != config.n_head:
        raise LoadError(f"n_head={n_head} was given but {config_path} says n_head={config.n_head}; "
                        f"leave n_head out (it is only for files without a config)")
    if (folder / "model.safetensors").is_file():
        weights, fmt = folder / "model.safetensors", "safetensors"
        state = read_safetensors(weights)
    elif (folder / "model.safetensors.index.json").is_file():
        weights, fmt = folder / "model.safetensors.index.json", "sharded safetensors"
        state = read_sharded_index(weights, read_safetensors)
    elif not safetensors_only and (folder / "pytorch_model.bin").is_file():
        weights, fmt = folder / "pytorch_model.bin", "pytorch_model.bin"
        state, detach = tensors_only(weights, read_torch(weights)), True
    elif not safetensors_only and (folder / "pytorch_model.bin.index.json").is_file():
        weights, fmt = folder / "pytorch_model.bin.index.json", "sharded pytorch_model.bin"
        state, detach = read_sharded_index(weights, lambda p: tensors_only(p, read_torch(p))), True
    else:
        allowed = "model.safetensors or model.safetensors.index.json"
        if not safetensors_only:
            allowed += " or pytorch_model.bin"
        raise LoadError(f"{folder} has config.json but no weights: expected {allowed} next to it "
                        f"(an interrupted download? download it again)")
    return _Raw(state, config, weights, fmt, folder.name, warnings, config_path.name, detach)


_HF_REQUIRED = ("vocab_size", "n_positions", "n_layer", "n_head", "n_embd")


def _config_from_hf_json(path: Path, hf: dict) -> tuple[GPTConfig, list[str]]:
    model_type = hf.get("model_type", "gpt2")
    if model_type != "gpt2":
        raise LoadError(f"{path}: model_type {model_type!r} is not GPT-2; this explorer loads GPT-2-class "
                        f"models (gpt2, distilgpt2, nanoGPT checkpoints)")
    missing = [k for k in _HF_REQUIRED if not isinstance(hf.get(k), int)]
    if missing:
        raise LoadError(f"{path} lacks {', '.join(missing)} (or they are not whole numbers); "
                        f"fix the file or re-download the model")
    try:
        config = config_from_hf(hf)
    except (ConfigError, TypeError, ValueError) as exc:
        raise LoadError(f"{path} describes a model that cannot be built: {exc}") from None
    warnings = []
    if hf.get("activation_function", "gelu_new") not in ("gelu_new", "gelu_pytorch_tanh"):
        warnings.append(f"config.json asks for activation {hf['activation_function']!r}; this model uses GELU "
                        f"(tanh approximation) as GPT-2 does, so outputs differ from the original")
    if hf.get("scale_attn_by_inverse_layer_idx") or hf.get("scale_attn_weights") is False:
        warnings.append("config.json changes attention scaling (scale_attn_*); this model uses 1/sqrt(head_dim), "
                        "so outputs differ from the original")
    return config, warnings


def _read_lone_safetensors(path: Path, n_head) -> _Raw:
    state = read_safetensors(path)
    config, warnings = _infer(path, state, n_head)
    return _Raw(state, config, path, "safetensors (config from shapes)", _display_name(path), warnings, "tensor shapes")


def _read_torch_file(path: Path, n_head) -> _Raw:
    obj = read_torch(path)
    if isinstance(obj, dict) and "model" in obj and "model_args" in obj:
        return _read_nanogpt(path, obj, n_head)
    if isinstance(obj, dict) and isinstance(obj.get("state_dict"), dict):
        obj = obj["state_dict"]  # PyTorch Lightning and similar wrap the weights one level down
    state = tensors_only(path, obj)
    config, warnings = _infer(path, state, n_head)
    return _Raw(state, config, path, "torch state dict (config from shapes)", _display_name(path), warnings,
                "tensor shapes", detach=True)


def _read_nanogpt(path: Path, ckpt: dict, n_head) -> _Raw:
    args = ckpt["model_args"]
    state = tensors_only(path, ckpt["model"], "model state dict")
    if not isinstance(args, dict) or any(not isinstance(args.get(k), int) for k in ("vocab_size", "block_size", "n_layer", "n_head", "n_embd")):
        raise LoadError(f"{path}: model_args lacks vocab_size/block_size/n_layer/n_head/n_embd; "
                        f"not a nanoGPT checkpoint, or a damaged one")
    if n_head is not None and n_head != args["n_head"]:
        raise LoadError(f"n_head={n_head} was given but {path}'s model_args say n_head={args['n_head']}; leave n_head out")
    try:
        inferred = infer_config(state, n_head=args["n_head"])
        config = GPTConfig(
            vocab_size=args["vocab_size"], block_size=args["block_size"], n_layer=args["n_layer"],
            n_head=args["n_head"], n_embd=args["n_embd"], dropout=float(args.get("dropout", 0.0)),
            bias=bool(args.get("bias", True)), tie_weights=inferred.tie_weights,
        )
    except (ConfigError, ConversionError) as exc:
        raise LoadError(f"{path}: {exc}") from None
    warnings = []
    if (path.parent / "meta.pkl").exists() and config.vocab_size >= GPT2_VOCAB:
        warnings.append("meta.pkl next to the checkpoint was not read (pickle files can run code); "
                        "the GPT-2 tokenizer is used")
    return _Raw(state, config, path, "nanoGPT ckpt", _display_name(path), warnings, "model_args", detach=True)


def _infer(path: Path, state: dict, n_head) -> tuple[GPTConfig, list[str]]:
    """Config from tensor shapes; heads from `n_head`, else a sidecar config.json, else a guess (warned)."""
    warnings, eps = [], 1e-5
    sidecar = path.with_name("config.json")
    if sidecar.is_file() and sidecar != path:
        side = read_json(sidecar)
        side_heads = side.get("n_head", side.get("num_attention_heads"))
        eps = side.get("layer_norm_epsilon", eps)
        if n_head is None and isinstance(side_heads, int):
            n_head = side_heads
    guessed = n_head is None
    try:
        config = infer_config(state, n_head=n_head, layer_norm_eps=eps)
    except (ConfigError, ConversionError) as exc:
        raise LoadError(f"{path}: cannot work out the model's shape from its tensors: {exc}. Give n_head if "
                        f"the message is about heads; otherwise this is not a GPT-2 checkpoint") from None
    if guessed:
        warnings.append(f"head count not stored in the file: assumed n_head={config.n_head} (GPT-2's for width "
                        f"{config.n_embd}, else 64-wide heads); pass n_head (--n-head) or put a config.json "
                        f"next to it if that is wrong")
    return config, warnings


def _is_conv1d(state: dict) -> bool:
    """HF's Conv1D stores c_attn as (C, 3C); nn.Linear (nanoGPT, ours) as (3C, C)."""
    for key, tensor in state.items():
        if key.endswith("attn.c_attn.weight") and tensor.dim() == 2:
            return tensor.shape[1] == 3 * tensor.shape[0]
    return False


def _build(raw: _Raw, device: torch.device, dtype: torch.dtype, progress, cancel) -> GPT:
    config = raw.config
    ours, unexpected = convert_state_dict(raw.state, conv1d=_is_conv1d(raw.state))
    model = _empty_model(config)
    expected = model.state_dict()
    try:
        check_against(expected, ours, unexpected, config.tie_weights)
    except ConversionError as exc:
        raise LoadError(f"{raw.path}: the weights do not fit the model described by {raw.config_origin} "
                        f"({config.n_layer} layers, width {config.n_embd}, vocab {config.vocab_size}): {exc}. "
                        f"Is this file from a different model, or is the config from another one?") from None
    if config.vocab_size < GPT2_VOCAB:
        raw.warnings.append(f"vocab_size={config.vocab_size} is smaller than GPT-2's {GPT2_VOCAB}: the GPT-2 "
                            f"tokenizer will produce ids this model has no embedding for (a character-level "
                            f"model? its own vocabulary is not loaded)")
    names = [k for k in expected if not (config.tie_weights and k == "unembed.weight")]
    weights = _take_weights(raw, ours, names, device, dtype, progress, cancel)
    model.load_state_dict(weights, strict=False, assign=True)
    model.tie_weights()
    leftover = [n for n, t in [*model.named_parameters(), *model.named_buffers()] if t.is_meta]
    if leftover:  # a bug here, not in the file: refuse rather than hand out an unusable model
        raise LoadError(f"internal error loading {raw.path}: {', '.join(leftover)} were not filled")
    return model.eval()


class _SkipMetaInit(TorchFunctionMode):
    """Makes random init of meta tensors a no-op. There is nothing to fill, yet the first `normal_`
    on a meta tensor (nn.Embedding's reset) imports torch's Python meta kernels and torch._dynamo:
    3-5 s here, more than the whole load of GPT-2 small."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        target = args[0] if args else kwargs.get("tensor")
        if getattr(func, "__name__", "") in ("normal_", "uniform_") and isinstance(target, torch.Tensor) and target.is_meta:
            return target
        return func(*args, **kwargs)


def _empty_model(config: GPTConfig) -> GPT:
    """Our GPT with every parameter on the meta device: no memory, no init, filled by the caller."""
    with torch.device("meta"), _SkipMetaInit():
        return GPT(config, init=None)


def _take_weights(raw: _Raw, ours: dict, names: list[str], device, dtype, progress, cancel) -> dict:
    """Each tensor as the model will hold it: the mapped tensor itself when nothing needs changing
    (and the file may stay mapped), else one copy, straight into `dtype` on `device`. Non-finite
    values are counted on the way; NaN/Inf is refused, naming the tensors, before a model exists."""
    itemsize = dtype_bytes(dtype)
    total = sum(ours[k].numel() for k in names) * itemsize
    done, out, bad = 0, {}, []
    for key in names:
        _check_cancel(cancel)
        src = ours[key]
        if not src.is_floating_point():
            raise LoadError(f"{raw.path}: tensor {key} holds {src.dtype}, not floating-point weights; "
                            f"the file is damaged or not a GPT-2 checkpoint")
        if not raw.detach and src.dtype == dtype and src.device == device:
            dst = src
        else:
            dst = torch.empty(src.shape, dtype=dtype, device=device)
            dst.copy_(src)  # one pass: dtype cast, Conv1D transpose and host->device together
        if _may_hold_non_finite(dst):
            n_bad = int((~torch.isfinite(dst)).sum())
            if n_bad:
                bad.append((key, n_bad, dst.numel(), bool(torch.isfinite(src).all())))
        out[key] = dst
        done += dst.numel() * itemsize
        if progress is not None:
            progress(done, total, "loading weights")
    if bad:
        raise _non_finite_error(raw.path, bad, dtype)
    return out


def _may_hold_non_finite(t: torch.Tensor) -> bool:
    """A cheap screen (never a false "no"): NaN and Inf always reach a sum, though a finite sum may
    also overflow, so a "yes" is confirmed element-wise by the caller. On the CPU numpy reduces,
    single-threaded: torch would wake its thread pool for each of ~150 tensors, which on a busy
    machine costs ten times more than the arithmetic."""
    if t.dim() == 2 and not t.is_contiguous() and t.t().is_contiguous():
        t = t.t()  # a Conv1D view: the same elements, in storage order
    if t.device.type == "cpu" and t.is_contiguous():
        if t.dtype == torch.bfloat16:  # no bf16 in numpy: all-ones exponent bits mean NaN/Inf
            bits = t.view(torch.int16).numpy()
            return bool(np.any((bits & 0x7F80) == 0x7F80))
        with np.errstate(all="ignore"):
            return not np.isfinite(np.add.reduce(t.numpy(), axis=None))
    return not bool(torch.isfinite(t.sum()))


def _non_finite_error(path: Path, bad: list, dtype: torch.dtype) -> LoadError:
    listed = ", ".join(f"{key} ({n:,} of {numel:,})" for key, n, numel, _ in bad[:8]) + (" …" if len(bad) > 8 else "")
    if all(overflow for *_, overflow in bad):
        return LoadError(f"{path}: weights overflow {DTYPE_NAMES[dtype]} (values too large become Inf): {listed}; "
                         f"load in bf16 or fp32 instead")
    return LoadError(f"{path}: refused, weights hold NaN/Inf values: {listed}. A model with them outputs NaN for "
                     f"every token; the checkpoint is broken (a diverged training run?) — load an earlier one")
