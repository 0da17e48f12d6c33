"""A per-layer transcoder: a sparse, wide replacement for one MLP, and the checks that a set fits a model.

Why a transcoder and not an SAE for circuits (Dunefsky et al. 2024; Ameisen et al. 2025): an SAE
reconstructs one activation from itself, so its features say what is *there*; a transcoder reads
the MLP's input and predicts the MLP's output, so its features are the MLP's computation made
sparse. Put in place of the MLP with its error added back, the model's output is unchanged, and
with attention patterns and normalisation scales frozen everything between features is linear:
that is what makes an attribution graph exact (graph.py).

Semantics (circuit-tracer's per-layer transcoders, with TopK in place of its ReLU/JumpReLU):
`pre_acts(x) = x @ W_enc + b_enc` (no input centring, unlike an SAE); `encode` keeps the k largest
of ReLU(pre_acts) and zeros the rest (`k=None`: plain ReLU, as circuit-tracer's loader reads a file
that carries no k); `decode(f, x) = f @ W_dec + b_dec + x @ W_skip` — the skip term, a dense linear
map of the input (Paulo et al. 2025), carries the MLP's linear part so features need not. It reads
`blocks.{layer}.ln2.hook_normalized` (the MLP's input) and writes `blocks.{layer}.hook_mlp_out`.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from gptcore.errors import UserError

INPUT_HOOK, OUTPUT_HOOK = "ln2.hook_normalized", "hook_mlp_out"  # block-relative, as circuit-tracer names them
NORMS = ("layernorm", "rmsnorm")


class CircuitError(UserError):
    """Transcoders or an attribution graph cannot be made from this input; the message says why and the fix."""

    title = "Circuits not available"


class UnsupportedModel(CircuitError):
    """The model's architecture (or its missing hook points) is one the replacement model cannot linearise."""

    title = "Model not supported by circuits"


class TranscodersDoNotFit(CircuitError):
    """The transcoders were made for another model (layer count, width or hooks differ)."""

    title = "Transcoders do not fit this model"


class PromptTooLong(CircuitError):
    """The prompt is past the model's context or the graph's node limit."""

    title = "Prompt too long for an attribution graph"


class Transcoder(nn.Module):
    """Replaces the MLP of block `layer`. d_out defaults to d_in (an MLP writes back into the stream)."""

    def __init__(self, d_in: int, width: int, k: int | None, layer: int, skip: bool = True,
                 d_out: int | None = None, dtype: torch.dtype = torch.float32):
        super().__init__()
        d_out = d_in if d_out is None else d_out
        check_sizes(d_in, width, k, layer, d_out)
        self.W_enc = nn.Parameter(torch.zeros(d_in, width, dtype=dtype))  # (d_in, width)
        self.b_enc = nn.Parameter(torch.zeros(width, dtype=dtype))  # (width,)
        self.W_dec = nn.Parameter(torch.zeros(width, d_out, dtype=dtype))  # (width, d_out)
        self.b_dec = nn.Parameter(torch.zeros(d_out, dtype=dtype))  # (d_out,)
        self.W_skip = nn.Parameter(torch.zeros(d_in, d_out, dtype=dtype)) if skip else None  # (d_in, d_out)
        self.k = None if k is None else int(k)
        self.layer = int(layer)
        self.metadata: dict = {}  # how it was made (tokens, seed, scales, ...); saved in the file's header

    @property
    def d_in(self) -> int:
        return self.W_enc.shape[0]

    @property
    def d_out(self) -> int:
        return self.W_dec.shape[1]

    @property
    def width(self) -> int:
        return self.W_enc.shape[1]

    @property
    def skip(self) -> bool:
        return self.W_skip is not None

    @property
    def input_hook(self) -> str:
        return f"blocks.{self.layer}.{INPUT_HOOK}"

    @property
    def output_hook(self) -> str:
        return f"blocks.{self.layer}.{OUTPUT_HOOK}"

    def pre_acts(self, x: torch.Tensor) -> torch.Tensor:
        """(..., d_in) -> (..., width)."""
        return x.to(self.W_enc.dtype) @ self.W_enc + self.b_enc

    def encode_topk(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(..., d_in) -> values, indices (..., k): each row's k largest pre-activations, ReLU'd
        (a value may be 0: fewer than k were positive). A ReLU transcoder (k None) has no fixed k."""
        if self.k is None:
            raise CircuitError("a ReLU transcoder (k=None) has no fixed number of active features; use encode()")
        values, indices = self.pre_acts(x).topk(self.k, dim=-1, sorted=False)  # (..., k)
        return values.relu(), indices

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        """(..., d_in) -> (..., width): the k largest of ReLU(pre_acts), zeros elsewhere."""
        if self.k is None:
            return self.pre_acts(x).relu()
        values, indices = self.encode_topk(x)
        dense = torch.zeros(*x.shape[:-1], self.width, dtype=values.dtype, device=values.device)
        return dense.scatter_(-1, indices, values)  # (..., width)

    def feature_acts(self, x: torch.Tensor, features: torch.Tensor) -> torch.Tensor:
        """(N, d_in), features (m,) -> (N, m): those features' activations, without a dense (N, width) result
        (as the SAE's `feature_acts`): each one's value where it is among the row's top k (ReLU'd), else 0;
        a ReLU transcoder (k None): ReLU of its pre-activation."""
        if self.k is None:
            return (x.to(self.W_enc.dtype) @ self.W_enc[:, features] + self.b_enc[features]).relu()
        values, indices = self.encode_topk(x)  # (N, k)
        hit = indices[:, :, None] == features.to(indices.device)[None, None, :]  # (N, k, m)
        return (values[:, :, None] * hit).sum(1)  # (N, m)

    def skip_term(self, x: torch.Tensor) -> torch.Tensor:
        """(..., d_in) -> (..., d_out): x @ W_skip (zeros without a skip)."""
        if self.W_skip is None:
            return torch.zeros(*x.shape[:-1], self.d_out, dtype=self.W_dec.dtype, device=x.device)
        return x.to(self.W_skip.dtype) @ self.W_skip

    def decode(self, f: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """features (..., width), input (..., d_in) -> (..., d_out)."""
        return f.to(self.W_dec.dtype) @ self.W_dec + self.b_dec + self.skip_term(x)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """(..., d_in) -> (..., d_out), the MLP's output as the transcoder predicts it; sparse for
        TopK (an embedding bag of k decoder rows per token, never a dense (N, width) product)."""
        if self.k is None:
            return self.decode(self.encode(x), x)
        values, indices = self.encode_topk(x)
        lead = values.shape[:-1]
        rows = F.embedding_bag(indices.reshape(-1, self.k), self.W_dec, per_sample_weights=values.reshape(-1, self.k),
                               mode="sum")  # (N, d_out)
        return rows.reshape(*lead, self.d_out) + self.b_dec + self.skip_term(x)

    def extra_repr(self) -> str:
        return f"layer={self.layer}, d_in={self.d_in}, width={self.width}, k={self.k}, skip={self.skip}"


def check_sizes(d_in, width, k, layer, d_out) -> None:
    """Positive integer sizes, 0 < k < width (or k None), layer >= 0; else CircuitError naming the fix."""
    for name, value in (("d_in", d_in), ("width", width), ("d_out", d_out)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise CircuitError(f"{name} must be a positive integer, got {value!r}")
    if isinstance(layer, bool) or not isinstance(layer, int) or layer < 0:
        raise CircuitError(f"layer must be a block index (0, 1, ...), got {layer!r}")
    if k is not None and (isinstance(k, bool) or not isinstance(k, int) or not 0 < k < width):
        raise CircuitError(f"k={k!r} must be a whole number in 1..{width - 1}: how many of the width={width} "
                           "features stay active per token (None for a plain ReLU transcoder)")


def check_model(model) -> None:
    """UnsupportedModel unless the replacement model can be built on `model`: a gptcore GPT with pre-LN
    residual blocks (LayerNorm or RMSNorm) and the hook points transcoders and the graph read."""
    cfg = getattr(model, "config", None)
    hooks = getattr(model, "hook_dict", None)
    if cfg is None or hooks is None or not hasattr(model, "blocks"):
        raise UnsupportedModel(f"{type(model).__name__} is not a gptcore GPT (no config or hook points); "
                               "open the model with gptcore.load")
    if getattr(cfg, "ln_placement", "pre") != "pre":
        raise UnsupportedModel("this model normalises after each sublayer (post-LN, ln_placement='post'); "
                               "transcoders and attribution graphs need pre-LN blocks, where the MLP reads "
                               "ln2(x) and adds its output to the residual stream (GPT-2's placement)")
    if not getattr(cfg, "residual", True):
        raise UnsupportedModel("this model has no residual connections (residual=False); an attribution "
                               "graph follows features through the residual stream, so it needs them")
    if getattr(cfg, "norm", "layernorm") not in NORMS:
        raise UnsupportedModel(f"norm {cfg.norm!r} is not supported; supported: {', '.join(NORMS)}")
    needed = ["hook_embed", "ln_final.hook_normalized"]
    for layer in range(cfg.n_layer):
        needed += [f"blocks.{layer}.{name}" for name in (
            "hook_resid_pre", "hook_resid_mid", "hook_resid_post", "attn.hook_pattern", INPUT_HOOK, OUTPUT_HOOK)]
    missing = [name for name in needed if name not in hooks]
    if missing:
        raise UnsupportedModel(f"this model lacks the hook points {', '.join(missing[:4])}"
                               f"{' …' if len(missing) > 4 else ''}; transcoders read and write the MLP at "
                               "blocks.{i}.ln2.hook_normalized and blocks.{i}.hook_mlp_out")


def check_transcoders_fit(model, transcoders) -> list[Transcoder]:
    """The transcoders as a list, one per block in order, each reading this model's width; else
    TranscodersDoNotFit naming what differs (layer count, width, layer order)."""
    check_model(model)
    cfg = model.config
    transcoders = list(transcoders or [])
    bad = [type(t).__name__ for t in transcoders if not isinstance(t, Transcoder)]
    if bad:
        raise TranscodersDoNotFit(f"expected Transcoder objects, got {', '.join(sorted(set(bad)))}")
    if len(transcoders) != cfg.n_layer:
        raise TranscodersDoNotFit(f"there are {len(transcoders)} transcoders but the model has {cfg.n_layer} "
                                  f"layers: the graph needs one per MLP; train transcoders for this model")
    for i, t in enumerate(transcoders):
        if t.layer != i:
            raise TranscodersDoNotFit(f"transcoder {i} replaces layer {t.layer}; the list must hold layers "
                                      f"0..{cfg.n_layer - 1} in order")
        if (t.d_in, t.d_out) != (cfg.n_embd, cfg.n_embd):
            raise TranscodersDoNotFit(f"transcoder {i} maps width {t.d_in} -> {t.d_out} but this model's residual "
                                      f"stream is {cfg.n_embd} wide: they were made for another model; train "
                                      "transcoders for this one")
    return transcoders
