"""What a path or hub id holds: an HF folder (config.json + safetensors, sharded or not, or
pytorch_model.bin), a lone .safetensors file, a nanoGPT ckpt.pt, the book's GPTModel (model.pth
or its training dict; book.py), a bare torch state dict. A file is told by its content, not its
suffix (checkpoints.sniff), and each read also says whether the weights are known to be trained
(provenance.py).

Each is read (memory-mapped, see checkpoints.py) into a `RawCheckpoint`: the tensors under their
saved names plus a GPTConfig from wherever the layout keeps it (config.json, nanoGPT's model_args,
or the tensor shapes). Nothing is checked against a model here; loading.py does that.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from gptcore.io.book import FORMAT as BOOK_FORMAT, book_to_ours, is_book_state
from gptcore.io.checkpoints import LoadError, read_json, read_safetensors, read_sharded_index, read_torch, sniff, tensors_only
from gptcore.model.config import GPT2_VOCAB, ConfigError, GPTConfig

GPTCORE_CKPT = "gptcore-ckpt-1"  # gptcore.training's own checkpoint format (training/checkpoint.py)
GPTCORE_STEP = "gptcore-step-1"  # a training run's kept weights, config in the metadata (training/run.py)
from gptcore.io.convert import ConversionError, config_from_hf, infer_config
from gptcore.io.convert import convert_llama_state_dict
from gptcore.io.hub import HUB_IDS, fetch, is_hub_id
from gptcore.io.llama_family import LLAMA_FAMILY, config_from_llama_json, is_llama_family
from gptcore.io.provenance import UNKNOWN, Provenance, of_hf_folder, of_hub_id, of_training_dict

# File names too generic to name a model: the folder holding them names it instead.
_GENERIC_NAMES = {"ckpt.pt", "model.safetensors", "pytorch_model.bin", "model.pt", "checkpoint.pt", "model.pth"}
_HF_WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin",
                    "pytorch_model.bin.index.json")
# Wrappers training scripts put the weights in, one level down (the book, Lightning and most loops).
_WEIGHT_KEYS = ("model_state_dict", "state_dict")


@dataclass
class RawCheckpoint:
    """A checkpoint read from disk but not yet checked: names as saved, tensors memory-mapped."""

    state: dict[str, torch.Tensor]
    config: GPTConfig
    path: Path
    format: str
    name: str
    warnings: list[str]
    config_origin: str  # says where the config came from, for mismatch messages
    detach: bool = False  # copy even when the mapped tensor could be used in place
    provenance: Provenance = UNKNOWN  # whether the weights are known to be trained, and why
    heads: str = "file"  # where n_head came from: "file" (a config), "given" (n_head=), "guessed" (head_count.py)
    dataset: str | None = None  # a training ckpt's config['dataset']: where its meta.pkl is (nanogpt_meta.py)


def read_source(source, n_head=None, progress=None, cancel=None) -> RawCheckpoint:
    text = str(source)
    path = Path(text).expanduser()
    if path.exists():
        return _read_path(path.resolve(), n_head)
    if isinstance(source, str) and is_hub_id(text):
        folder = fetch(text, progress, cancel)
        raw = _read_hf_folder(folder, n_head, safetensors_only=True)
        raw.name, raw.format, raw.provenance = text, f"hub, {raw.format}", of_hub_id(text)
        return raw
    raise LoadError(
        f"{text}: no such file or folder, and not a hub model id. Give a folder with config.json + "
        f"model.safetensors, a .safetensors file, a nanoGPT ckpt.pt, or a hub id ({', '.join(HUB_IDS)})"
    )


def _read_path(path: Path, n_head) -> RawCheckpoint:
    if path.is_dir():
        lone_torch = _lone_torch_file(path)
        if (path / "config.json").is_file() and lone_torch is None:
            return _read_hf_folder(path, n_head)
        if (path / "ckpt.pt").is_file():
            return _read_torch_file(path / "ckpt.pt", n_head)
        if lone_torch is not None:  # e.g. the book's model.pth, maybe with its config.json as a sidecar
            return _read_torch_file(lone_torch, n_head)
        lone = sorted(path.glob("*.safetensors"))
        if len(lone) == 1:
            return _read_lone_safetensors(lone[0], n_head)
        listing = ", ".join(sorted(p.name for p in path.iterdir())[:10]) or "nothing"
        raise LoadError(f"{path} holds no checkpoint I can read (found: {listing}); expected config.json + "
                        f"model.safetensors (HF), a sharded model.safetensors.index.json, ckpt.pt (nanoGPT), "
                        f"a single .pt/.pth state dict (e.g. the book's model.pth) or a single .safetensors file")
    if path.name.endswith(".index.json") or path.name == "config.json":
        return _read_hf_folder(path.parent, n_head)
    if path.suffix == ".safetensors" or sniff(path) == "safetensors":  # any other suffix: by content
        return _read_lone_safetensors(path, n_head)
    return _read_torch_file(path, n_head)


def _lone_torch_file(folder: Path) -> Path | None:
    """The one .pt/.pth file of a folder without Hugging Face weights (whose config.json, if any,
    is then a sidecar, as the book's readers save theirs), else None."""
    if any((folder / name).is_file() for name in _HF_WEIGHT_FILES):
        return None
    found = [p for p in folder.iterdir() if p.suffix in (".pt", ".pth") and p.is_file()]
    return found[0] if len(found) == 1 else None


def _display_name(path: Path) -> str:
    return f"{path.parent.name}/{path.name}" if path.name in _GENERIC_NAMES and path.parent.name else path.stem


def _read_hf_folder(folder: Path, n_head, safetensors_only: bool = False) -> RawCheckpoint:
    config_path = folder / "config.json"
    hf = read_json(config_path)
    config, warnings = _config_from_hf_json(config_path, hf)
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
    if is_llama_family(hf):
        state = convert_llama_state_dict(state)
    return RawCheckpoint(state, config, weights, fmt, folder.name, warnings, config_path.name, detach,
                         of_hf_folder(folder, hf))


_HF_REQUIRED = ("vocab_size", "n_positions", "n_layer", "n_head", "n_embd")


def _config_from_hf_json(path: Path, hf: dict) -> tuple[GPTConfig, list[str]]:
    model_type = hf.get("model_type", "gpt2")
    if is_llama_family(hf):
        return config_from_llama_json(path, hf)
    if model_type != "gpt2":
        raise LoadError(f"{path}: model_type {model_type!r} is not supported; this explorer loads GPT-2-class "
                        f"models (gpt2, distilgpt2, nanoGPT checkpoints) and the Llama family "
                        f"({', '.join(f'{t}: {a}' for t, a in LLAMA_FAMILY.items())})")
    missing = [k for k in _HF_REQUIRED if not isinstance(hf.get(k), int)]
    if missing:
        raise LoadError(f"{path} lacks {', '.join(missing)} (or they are not whole numbers); "
                        f"fix the file or re-download the model")
    try:
        config = config_from_hf(hf)
    except (ConfigError, TypeError, ValueError) as exc:
        raise LoadError(f"{path} describes a model that cannot be built: {exc}") from None
    warnings = []
    if hf.get("activation_function") == "gelu":  # transformers' "gelu" is the exact erf form
        config = config.replace(activation="gelu")
    elif hf.get("activation_function", "gelu_new") not in ("gelu_new", "gelu_pytorch_tanh"):
        warnings.append(f"config.json asks for activation {hf['activation_function']!r}; this model uses GELU "
                        f"(tanh approximation) as GPT-2 does, so outputs differ from the original")
    if hf.get("scale_attn_by_inverse_layer_idx") or hf.get("scale_attn_weights") is False:
        warnings.append("config.json changes attention scaling (scale_attn_*); this model uses 1/sqrt(head_dim), "
                        "so outputs differ from the original")
    return config, warnings


def _read_lone_safetensors(path: Path, n_head) -> RawCheckpoint:
    state = read_safetensors(path)
    step = _gptcore_step(path, n_head)
    if step is not None:
        config, at = step
        return RawCheckpoint(state, config, path, f"gptcore training run, step {at:,}", _display_name(path), [],
                             "the file's metadata", provenance=of_training_dict({"step": at}))
    if is_book_state(state):
        return _read_book(path, state, n_head, "safetensors", UNKNOWN, [])
    config, warnings, heads = _infer(path, state, n_head)
    return RawCheckpoint(state, config, path, "safetensors (config from shapes)", _display_name(path), warnings,
                         "tensor shapes", heads=heads)


def _read_torch_file(path: Path, n_head) -> RawCheckpoint:
    obj = read_torch(path)
    if isinstance(obj, dict) and "model" in obj and "model_args" in obj:
        return _read_nanogpt(path, obj, n_head)
    if isinstance(obj, dict) and obj.get("format") == GPTCORE_CKPT and "gpt_config" in obj:
        return _read_gptcore_ckpt(path, obj, n_head)
    provenance, notes = UNKNOWN, []
    wrapper = next((k for k in _WEIGHT_KEYS if isinstance(obj, dict) and isinstance(obj.get(k), dict)), None)
    if wrapper is not None:  # {"model_state_dict": ..., "optimizer_state_dict": ...}: the weights only
        provenance = of_training_dict(obj)
        ignored = sorted(str(k) for k in obj if k != wrapper)
        if ignored:
            notes.append(f"only {wrapper} was read; {', '.join(ignored)} (training state) ignored")
        obj = obj[wrapper]
    state = tensors_only(path, obj)
    if is_book_state(state):
        return _read_book(path, state, n_head, "torch state dict", provenance, notes)
    config, warnings, heads = _infer(path, state, n_head)
    return RawCheckpoint(state, config, path, "torch state dict (config from shapes)", _display_name(path),
                         notes + warnings, "tensor shapes", detach=True, provenance=provenance, heads=heads)


def _read_book(path: Path, state: dict, n_head, container: str, provenance: Provenance,
               notes: list[str]) -> RawCheckpoint:
    """The book's GPTModel, renamed to ours (book.py); its head count found as for any lone file."""
    ours = book_to_ours(state)
    config, warnings, heads = _infer(path, ours, n_head)
    return RawCheckpoint(ours, config, path, f"{BOOK_FORMAT} ({container}, config from shapes)", _display_name(path),
                         notes + warnings, "tensor shapes", detach=container != "safetensors", provenance=provenance,
                         heads=heads)


def _read_nanogpt(path: Path, ckpt: dict, n_head) -> RawCheckpoint:
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
            activation="gelu",  # nanoGPT's model.py: nn.GELU(), the exact erf form
        )
    except (ConfigError, ConversionError) as exc:
        raise LoadError(f"{path}: {exc}") from None
    warnings = []
    if (path.parent / "meta.pkl").exists() and config.vocab_size >= GPT2_VOCAB:
        warnings.append(f"meta.pkl next to the checkpoint is not used: the vocabulary ({config.vocab_size:,}) is "
                        f"GPT-2's size, so the GPT-2 tokenizer is used")
    return RawCheckpoint(state, config, path, "nanoGPT ckpt", _display_name(path), warnings, "model_args", detach=True,
                         provenance=of_training_dict(ckpt), dataset=_dataset(ckpt))


def _read_gptcore_ckpt(path: Path, ckpt: dict, n_head) -> RawCheckpoint:
    """A training checkpoint of gptcore.training for a model nanoGPT cannot express (its format is
    described in gptcore/training/checkpoint.py): our key names, the whole GPTConfig saved."""
    state = tensors_only(path, ckpt["model"], "model state dict")
    try:
        config = GPTConfig.from_dict(dict(ckpt["gpt_config"]))
    except (ConfigError, TypeError, ValueError) as exc:
        raise LoadError(f"{path}: its gpt_config cannot build a model ({exc}); the file is damaged") from None
    if n_head is not None and n_head != config.n_head:
        raise LoadError(f"n_head={n_head} was given but {path} says n_head={config.n_head}; leave n_head out")
    return RawCheckpoint(state, config, path, "gptcore training ckpt", _display_name(path), [], "gpt_config",
                         detach=True, provenance=of_training_dict(ckpt), dataset=_dataset(ckpt))


def _dataset(ckpt: dict) -> str | None:
    """config['dataset'] of a training checkpoint (nanoGPT's train.py records it), if a string."""
    config = ckpt.get("config")
    dataset = config.get("dataset") if isinstance(config, dict) else None
    return dataset if isinstance(dataset, str) and dataset.strip() else None


def _gptcore_step(path: Path, n_head) -> tuple[GPTConfig, int] | None:
    """(config, step) of the weights a gptcore training run kept (steps/<scheme>/step_N.safetensors,
    whose metadata holds the whole GPTConfig: the activation and the head count are in no shape),
    or None for any other safetensors file."""
    import json

    from safetensors import safe_open

    with safe_open(str(path), framework="pt") as f:
        meta = f.metadata() or {}
    if meta.get("format") != GPTCORE_STEP:
        return None
    try:
        config, step = GPTConfig.from_dict(json.loads(meta["config"])), int(meta["step"])
    except (ConfigError, KeyError, TypeError, ValueError) as exc:
        raise LoadError(f"{path}: its metadata cannot build a model ({exc}); the file is damaged") from None
    if n_head is not None and n_head != config.n_head:
        raise LoadError(f"n_head={n_head} was given but {path} says n_head={config.n_head}; leave n_head out")
    return config, step


def _infer(path: Path, state: dict, n_head) -> tuple[GPTConfig, list[str], str]:
    """Config from tensor shapes; heads from `n_head`, else a sidecar config.json, else a guess (warned).
    The third value says which: "given", "file" or "guessed" (RawCheckpoint.heads)."""
    warnings, eps = [], 1e-5
    heads = "given" if n_head is not None else "file"
    sidecar = path.with_name("config.json")
    if sidecar.is_file() and sidecar != path:
        side = read_json(sidecar)
        heads_keys = ("n_head", "num_attention_heads", "n_heads")  # GPT-2, other HF configs, the book's
        side_heads = next((side[k] for k in heads_keys if k in side), None)
        eps = side.get("layer_norm_epsilon", eps)
        if n_head is None and isinstance(side_heads, int):
            n_head = side_heads
    guessed = n_head is None
    if guessed:
        heads = "guessed"
    try:
        config = infer_config(state, n_head=n_head, layer_norm_eps=eps)
    except (ConfigError, ConversionError) as exc:
        raise LoadError(f"{path}: cannot work out the model's shape from its tensors: {exc}. Give n_head if "
                        f"the message is about heads; otherwise this is not a GPT-2 checkpoint") from None
    if guessed:
        warnings.append(f"head count not stored in the file: assumed n_head={config.n_head} (GPT-2's for width "
                        f"{config.n_embd}, else 64-wide heads); pass n_head (--n-head) or put a config.json "
                        f"next to it if that is wrong")
    return config, warnings, heads


def is_conv1d(state: dict) -> bool:
    """HF's Conv1D stores c_attn as (C, 3C); nn.Linear (nanoGPT, ours) as (3C, C)."""
    for key, tensor in state.items():
        if key.endswith("attn.c_attn.weight") and tensor.dim() == 2:
            return tensor.shape[1] == 3 * tensor.shape[0]
    return False
