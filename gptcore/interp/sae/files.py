"""SAEs on disk in SAELens's layout, and the check that an SAE fits a model.

A folder holds `cfg.json` and `sae_weights.safetensors` (W_enc, b_enc, W_dec, b_dec), architecture
"topk", as SAELens 6's `SAE.save_model` writes them; its `SAE.load_from_disk` opens ours and
encodes identically, and ours opens a TopK SAE SAELens saved, including pre-6.0 files (a
"standard" SAE with activation_fn "topk") and the two TopK options that fold exactly into plain
weights (`apply_b_dec_to_input` false, `rescale_acts_by_decoder_norm` true). Other architectures
and input normalisations are refused by name. Both files are written beside their targets and
renamed into place together, so a failed save leaves the folder as it was.
"""
from __future__ import annotations

import json
from pathlib import Path

import torch

from gptcore.interp.sae.dictionary import SAE, SAEError, check_shape
from gptcore.interp.sae.harvest import check_hook_name, hook_width
from gptcore.io.atomic import atomic_path
from gptcore.io.checkpoints import read_json, read_safetensors

CFG, WEIGHTS = "cfg.json", "sae_weights.safetensors"
FORMAT_VERSION = "6.0.0"  # the SAELens config format these files follow
TENSORS = ("W_enc", "b_enc", "W_dec", "b_dec")


def save_sae(sae: SAE, folder, *, model_name: str | None = None) -> Path:
    """Write `sae` to `folder` (created if needed); returns the folder."""
    if not isinstance(sae, SAE):
        raise SAEError(f"only a trained SAE is saved (got {type(sae).__name__}); neurons need no file")
    from safetensors.torch import save_file

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    tensors = {name: getattr(sae, name).detach().to("cpu", torch.float32).contiguous() for name in TENSORS}
    metadata = {"sae_lens_version": FORMAT_VERSION, "sae_lens_training_version": None,
                "hook_name": sae.hook or None, "model_name": model_name, "trained_with": "gptcore.fit_sae",
                **sae.metadata}
    cfg = {"d_in": sae.d_in, "d_sae": sae.width, "dtype": "float32", "device": "cpu",
           "apply_b_dec_to_input": True, "normalize_activations": "none", "reshape_activations": "none",
           "metadata": metadata, "k": sae.k, "rescale_acts_by_decoder_norm": False, "architecture": "topk"}
    with atomic_path(folder / WEIGHTS) as tmp_weights, atomic_path(folder / CFG) as tmp_cfg:
        save_file(tensors, str(tmp_weights))
        tmp_cfg.write_text(json.dumps(cfg, indent=2), encoding="utf-8")
    return folder


def load_sae(folder) -> SAE:
    """The TopK SAE in `folder` (SAELens layout), as float32 on the CPU."""
    folder = Path(folder)
    missing = [name for name in (CFG, WEIGHTS) if not (folder / name).is_file()]
    if missing:
        raise SAEError(f"{folder} is not an SAE folder: it lacks {' and '.join(missing)} "
                       f"(an SAE folder holds {CFG} and {WEIGHTS}, as SAELens and save_sae write them)")
    cfg = _topk_cfg(read_json(folder / CFG), folder)
    weights = read_safetensors(folder / WEIGHTS)
    absent = [name for name in TENSORS if name not in weights]
    if absent:
        raise SAEError(f"{folder / WEIGHTS} lacks {', '.join(absent)}; it holds {', '.join(sorted(weights))}")
    w = {name: weights[name].to(torch.float32) for name in TENSORS}
    d_in, width, k = cfg["d_in"], cfg["d_sae"], cfg["k"]
    check_shape(d_in, width, k)
    _check_tensors(w, d_in, width, folder)
    _fold_options(w, cfg)
    meta = dict(cfg.get("metadata") or {})
    hook = meta.get("hook_name") or cfg.get("hook_name") or cfg.get("hook_point") or ""
    sae = SAE(d_in, width, k, hook=hook)
    with torch.no_grad():
        for name in TENSORS:
            getattr(sae, name).copy_(w[name])
    sae.metadata = {key: value for key, value in meta.items() if key not in ("hook_name",)}
    return sae


def _topk_cfg(cfg: dict, folder: Path) -> dict:
    """The config as a TopK one (a pre-6.0 "standard" SAE with a topk activation is one), else SAEError."""
    act = cfg.get("activation_fn_str", cfg.get("activation_fn"))
    kwargs = cfg.get("activation_fn_kwargs") or {}
    if cfg.get("architecture", "standard") == "standard" and act == "topk" and "k" in kwargs:
        cfg = {**cfg, "architecture": "topk", "k": kwargs["k"]}
    arch = cfg.get("architecture", "standard")
    if arch != "topk":
        raise SAEError(f"{folder} holds a {arch!r} SAE; supported: 'topk' (SAELens's TopKSAE, as save_sae "
                       "writes it). Train a TopK SAE here, or convert this one outside the app")
    for key in ("normalize_activations", "reshape_activations"):
        if cfg.get(key) not in (None, "none"):
            raise SAEError(f"{folder} needs {key}={cfg[key]!r}, which is not supported (only 'none'): "
                           "fold that normalisation into the weights before saving")
    return cfg


def _check_tensors(w: dict, d_in: int, width: int, folder: Path) -> None:
    want = {"W_enc": (d_in, width), "b_enc": (width,), "W_dec": (width, d_in), "b_dec": (d_in,)}
    for name, shape in want.items():
        if tuple(w[name].shape) != shape:
            raise SAEError(f"{folder / WEIGHTS}: {name} is {tuple(w[name].shape)} but cfg.json's d_in={d_in}, "
                           f"d_sae={width} need {shape}; the two files do not belong together")
        if not torch.isfinite(w[name]).all():
            raise SAEError(f"{folder / WEIGHTS}: {name} contains NaN or inf; the SAE is broken, train it again")


def _fold_options(w: dict, cfg: dict) -> None:
    """Fold the TopK options that change only the parametrisation into plain weights (exactly)."""
    if cfg.get("apply_b_dec_to_input", True) is False:  # encode read x, not x - b_dec
        w["b_enc"] = w["b_enc"] + w["b_dec"] @ w["W_enc"]
    if cfg.get("rescale_acts_by_decoder_norm", False):  # ranked pre * |W_dec row|, decoded acts / |row|
        norms = w["W_dec"].norm(dim=1).clamp_min(1e-12)  # (width,)
        w["W_enc"], w["b_enc"] = w["W_enc"] * norms, w["b_enc"] * norms
        w["W_dec"] = w["W_dec"] / norms[:, None]


def check_sae_fits(model, sae) -> None:
    """SAEError unless `sae` reads a hook point this model has, with the width it has there."""
    if not getattr(sae, "hook", ""):
        raise SAEError("this SAE does not name the hook point it reads; set sae.hook to one, e.g. "
                       "'blocks.0.hook_resid_post'")
    check_hook_name(model, sae.hook)
    width = hook_width(model, sae.hook)
    if width != sae.d_in:
        raise SAEError(f"this SAE reads {sae.d_in} numbers per token at {sae.hook}, but the open model has "
                       f"{width} there: it was made for another model; open that model, or train an SAE "
                       "on this one")
