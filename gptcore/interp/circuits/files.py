"""Transcoders on disk in circuit-tracer's per-layer layout, so each side opens the other's.

A folder holds `layer_{i}.safetensors` for i = 0..L-1 and `config.yaml` (circuit-tracer 0.5.0's
`transcoder_set`: `model_kind`, `feature_input_hook`, `feature_output_hook`, `scan`,
`model_name`). Each file holds exactly `W_enc` (width, d_in), `b_enc`, `W_dec` (width, d_out),
`b_dec` and, with a skip, `W_skip` (d_out, d_in), float32 — circuit-tracer's orientation (it
applies `x @ W_enc.T` and `x @ W_skip.T`), the transpose of ours, and no other key (its loader is
strict: an extra tensor fails). Everything else rides in the safetensors header's metadata and
in config.yaml: `activation: topk` and `k`. circuit-tracer 0.5.0 ignores both and loads a TopK
transcoder as plain ReLU (every positive pre-activation active; newer upstream snapshots read
`activation`/`k`); our loader reads k back.

Hook names differ in one place that matters. Ours, `blocks.{i}.ln2.hook_normalized`, is ln2's
*output* (weight and bias applied): the MLP's input. TransformerLens's hook of the same name, which
circuit-tracer reads on GPT-2 (loaded with fold_ln=False), sits *before* ln2's weight and bias.
So our files name the input `mlp.hook_in` (circuit-tracer's own hook on the MLP's input), and a
set of its that reads `ln2.hook_normalized` is folded into MLP-input form on loading, exactly,
with the model's ln2 weight and bias: x̂ = (u - b) / w, so x̂ @ W + c = u @ (W / w) + c - (b / w) @ W
(`load_transcoders(folder, model=...)`). Ours opens circuit-tracer's ReLU transcoders with or
without skip (k None); JumpReLU (`activation_function.threshold`), cross-layer transcoders and
other hooks are refused by name. A folder without config.yaml (circuit-tracer's `to_safetensors`
writes none) is read as reading the MLP's input. Files are written beside their targets and
renamed into place, and a shorter set removes the extra layer files of a longer one it replaces.
"""
from __future__ import annotations

import contextlib
import json
import re
from pathlib import Path

import torch

from gptcore.interp.circuits.transcoder import OUTPUT_HOOK, CircuitError, Transcoder, TranscodersDoNotFit
from gptcore.io.atomic import atomic_path
from gptcore.io.checkpoints import read_safetensors

CONFIG = "config.yaml"
LAYER_FILE = re.compile(r"^layer_(\d+)\.safetensors$")
MLP_INPUT = "mlp.hook_in"  # circuit-tracer's hook on the MLP's input (after ln2's weight and bias)
TL_NORMALIZED = "ln2.hook_normalized"  # TransformerLens's: centred and scaled, before ln2's weight and bias
INPUT_HOOKS = (MLP_INPUT, TL_NORMALIZED)
OUTPUT_HOOKS = (OUTPUT_HOOK, "mlp.hook_out")


def save_transcoders(transcoders, folder, *, model_name: str | None = None, scan: str | None = None) -> Path:
    """Write one transcoder per layer (layers 0..L-1 in order) to `folder` (created if needed)."""
    transcoders = list(transcoders)
    if not transcoders or any(not isinstance(t, Transcoder) for t in transcoders):
        raise CircuitError("save_transcoders needs a list of Transcoder objects, one per layer")
    if [t.layer for t in transcoders] != list(range(len(transcoders))):
        raise CircuitError(f"transcoders must cover layers 0..{len(transcoders) - 1} in order, got layers "
                           f"{[t.layer for t in transcoders]}")
    from safetensors.torch import save_file

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    k = transcoders[0].k
    config = {"model_kind": "transcoder_set", "feature_input_hook": MLP_INPUT, "feature_output_hook": OUTPUT_HOOK,
              "scan": scan or folder.name, "model_name": model_name, "activation": "relu" if k is None else "topk",
              "k": k, "written_by": "gptcore.save_transcoders"}
    with contextlib.ExitStack() as stack:
        for t in transcoders:
            tmp = stack.enter_context(atomic_path(folder / f"layer_{t.layer}.safetensors"))
            save_file(_tensors(t), str(tmp), metadata=_header(t))
        tmp_config = stack.enter_context(atomic_path(folder / CONFIG))
        tmp_config.write_text(_yaml(config), encoding="utf-8")
    for path in folder.iterdir():  # a longer set's layers left from before would be read as this set's
        match = LAYER_FILE.match(path.name)
        if match and int(match.group(1)) >= len(transcoders):
            path.unlink()
    return folder


def load_transcoders(folder, model=None) -> list[Transcoder]:
    """The per-layer transcoders in `folder` (ours or circuit-tracer's), float32 on the CPU, reading the
    MLP's input. `model`: the model they were trained on, needed only to fold a set that reads
    TransformerLens's ln2.hook_normalized (before ln2's weight and bias)."""
    folder = Path(folder)
    if not folder.is_dir():
        raise CircuitError(f"{folder} is not a folder of transcoders (one holds layer_0.safetensors, ... and "
                           f"{CONFIG}, as save_transcoders and circuit-tracer write them)")
    layers = sorted(int(m.group(1)) for m in map(LAYER_FILE.match, (p.name for p in folder.iterdir())) if m)
    if not layers:
        raise CircuitError(f"{folder} holds no layer_{{i}}.safetensors files; it is not a transcoder folder")
    if layers != list(range(len(layers))):
        raise CircuitError(f"{folder} holds transcoders for layers {layers}; a set needs every layer from 0 "
                           f"to {layers[-1]} (circuit-tracer requires the same)")
    config = _read_config(folder)
    out = [_load_layer(folder / f"layer_{layer}.safetensors", layer, config) for layer in layers]
    widths = {t.width for t in out}
    if len(widths) > 1:
        raise CircuitError(f"{folder}: the layers have different widths {sorted(widths)}; a set has one width")
    if config.get("feature_input_hook", MLP_INPUT) == TL_NORMALIZED:
        _fold_norm_weights(out, model, folder)
    return out


def _fold_norm_weights(transcoders, model, folder: Path) -> None:
    """Rewrite transcoders that read x̂ (ln2 before its weight w and bias b) to read u = x̂ * w + b."""
    if model is None:
        raise CircuitError(f"{folder} holds transcoders that read TransformerLens's ln2.hook_normalized, before "
                           "ln2's weight and bias; pass the model they were trained on (load_transcoders(folder, "
                           "model=...)) so they can be rewritten to read the MLP's input")
    blocks = getattr(model, "blocks", None)
    if blocks is None or len(blocks) != len(transcoders):
        have = len(blocks) if blocks is not None else "no"
        raise TranscodersDoNotFit(f"{folder} holds {len(transcoders)} layers of transcoders but the model has {have} "
                                  "blocks; open the model they were trained on")
    with torch.no_grad():
        for t, block in zip(transcoders, blocks):
            w = block.ln2.weight.detach().float().cpu()  # (d,)
            b = block.ln2.bias.detach().float().cpu() if getattr(block.ln2, "bias", None) is not None else torch.zeros_like(w)
            if len(w) != t.d_in:
                raise TranscodersDoNotFit(f"{folder}: layer {t.layer} reads {t.d_in} numbers but the model's ln2 has "
                                          f"{len(w)}; open the model they were trained on")
            if float(w.abs().min()) < 1e-6:
                raise CircuitError(f"ln2 of block {t.layer} has a weight of ~0, so its input cannot be recovered from "
                                   "its output; these transcoders cannot be rewritten for this model")
            shift = b / w  # (d,): x̂ = u / w - shift
            t.b_enc -= shift @ t.W_enc
            t.W_enc /= w[:, None]
            if t.W_skip is not None:
                t.b_dec -= shift @ t.W_skip
                t.W_skip /= w[:, None]
            t.metadata = {**t.metadata, "folded_from": TL_NORMALIZED}


def _tensors(t: Transcoder) -> dict:
    def raw(p):
        return p.detach().to("cpu", torch.float32).contiguous()

    tensors = {"W_enc": raw(t.W_enc.t()), "b_enc": raw(t.b_enc), "W_dec": raw(t.W_dec), "b_dec": raw(t.b_dec)}
    if t.W_skip is not None:
        tensors["W_skip"] = raw(t.W_skip.t())  # (d_out, d_in)
    return tensors


def _header(t: Transcoder) -> dict:
    """safetensors metadata: strings only."""
    return {"layer": str(t.layer), "activation": "relu" if t.k is None else "topk", "k": "" if t.k is None else str(t.k),
            "feature_input_hook": MLP_INPUT, "feature_output_hook": OUTPUT_HOOK,
            "gptcore_metadata": json.dumps(t.metadata, default=str)}


def _yaml(values: dict) -> str:
    """Flat YAML: JSON scalars are YAML scalars (strings quoted, None as null)."""
    return "".join(f"{key}: {json.dumps(value)}\n" for key, value in values.items())


def _read_config(folder: Path) -> dict:
    path = folder / CONFIG
    if not path.is_file():  # circuit-tracer's own to_safetensors writes layer files only
        return {}
    import yaml

    try:
        config = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise CircuitError(f"{path} is not readable YAML ({exc}); fix it or write the set again") from None
    if not isinstance(config, dict):
        raise CircuitError(f"{path} should hold keys (model_kind, feature_input_hook, ...), not {type(config).__name__}")
    kind = config.get("model_kind", "transcoder_set")
    if kind != "transcoder_set":
        raise CircuitError(f"{path} describes a {kind!r}; supported: 'transcoder_set' (per-layer transcoders). "
                           "Cross-layer transcoders write into every later layer, which this graph does not model")
    for key, allowed in (("feature_input_hook", INPUT_HOOKS), ("feature_output_hook", OUTPUT_HOOKS)):
        hook = config.get(key)
        if hook is not None and hook not in allowed:
            raise CircuitError(f"{path}: {key} is {hook!r}; supported: {' or '.join(allowed)} (the MLP's input, "
                               "and its output). Transcoders trained elsewhere in the block do not replace the MLP "
                               "as the graph needs")
    return config


def _load_layer(path: Path, layer: int, config: dict) -> Transcoder:
    tensors = read_safetensors(path)
    if "activation_function.threshold" in tensors or "threshold" in tensors:
        raise CircuitError(f"{path} is a JumpReLU transcoder (it holds a threshold); supported: TopK (ours) and "
                           "ReLU transcoders")
    missing = [name for name in ("W_enc", "b_enc", "W_dec", "b_dec") if name not in tensors]
    if missing:
        raise CircuitError(f"{path} lacks {', '.join(missing)}; it holds {', '.join(sorted(tensors))}")
    extra = sorted(set(tensors) - {"W_enc", "b_enc", "W_dec", "b_dec", "W_skip"})
    if extra:
        raise CircuitError(f"{path} holds tensors a per-layer transcoder does not: {', '.join(extra)}")
    w = {name: value.to(torch.float32) for name, value in tensors.items()}
    width, d_out, d_in = w["b_enc"].shape[0], w["b_dec"].shape[0], w["W_enc"].shape[-1]
    want = {"W_enc": (width, d_in), "b_enc": (width,), "W_dec": (width, d_out), "b_dec": (d_out,), "W_skip": (d_out, d_in)}
    for name, value in w.items():
        if tuple(value.shape) != want[name]:
            raise CircuitError(f"{path}: {name} is {tuple(value.shape)} but b_enc and b_dec say width {width}, "
                               f"d_out {d_out}: it should be {want[name]} (circuit-tracer's orientation)")
        if not torch.isfinite(value).all():
            raise CircuitError(f"{path}: {name} contains NaN or inf; the transcoder is broken, train it again")
    header = _read_header(path)
    t = Transcoder(d_in, width, _k(header, config, width, path), layer, skip="W_skip" in w, d_out=d_out)
    with torch.no_grad():
        t.W_enc.copy_(w["W_enc"].t())
        t.b_enc.copy_(w["b_enc"])
        t.W_dec.copy_(w["W_dec"])
        t.b_dec.copy_(w["b_dec"])
        if t.W_skip is not None:
            t.W_skip.copy_(w["W_skip"].t())
    try:
        t.metadata = json.loads(header.get("gptcore_metadata") or "{}")
    except json.JSONDecodeError:
        t.metadata = {}
    return t


def _read_header(path: Path) -> dict:
    from safetensors import safe_open

    with safe_open(str(path), framework="pt") as f:
        return dict(f.metadata() or {})


def _k(header: dict, config: dict, width: int, path: Path) -> int | None:
    """k from the file's header (ours), else config.yaml's activation/k (newer circuit-tracer), else None."""
    activation = header.get("activation") or config.get("activation") or "relu"
    if activation == "relu":
        return None
    raw = header.get("k") or config.get("k")
    try:
        k = int(raw)
    except (TypeError, ValueError):
        raise CircuitError(f"{path} says activation {activation!r} but gives no valid k ({raw!r})") from None
    if activation != "topk" or not 0 < k < width:
        raise CircuitError(f"{path}: activation {activation!r} with k={k} is not supported (TopK with 0 < k < "
                           f"width={width}, or ReLU)")
    return k
