"""`sae_metrics`: how good a dictionary is on some text, in the field's standard numbers.

- l0: mean active latents per token (a TopK SAE: k, unless ReLU cut some);
- explained_variance: 1 - sum ||x - x_hat||^2 / sum ||x - mean x||^2, sums over every token, the
  mean over the same tokens (SAELens PR #665's definition);
- dead_fraction: latents that never fire (activation > 0) on these tokens;
- ce_clean / ce_sae / ce_zero: next-token cross-entropy (nats, mean over every predicted position)
  of the model, with x_hat spliced in at the hook, and with the hook zeroed;
- ce_loss_recovered = (ce_zero - ce_sae) / (ce_zero - ce_clean): 1 when the SAE loses nothing the
  model uses, 0 when it is as bad as deleting the activation (NaN if zeroing changes nothing).

Three forwards per chunk of sequences; every sum is kept in float64.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, fields

import torch
import torch.nn.functional as F

from gptcore.errors import Cancelled
from gptcore.interp.sae.files import check_sae_fits
from gptcore.interp.sae.harvest import check_ids, eval_mode

TOKENS_PER_FORWARD = 8192
LOGIT_FLOATS = 1 << 25  # logits per forward (128 MB): GPT-2's 50,257-word head gets ~650 tokens


@dataclass(frozen=True)
class SAEMetrics:
    l0: float
    explained_variance: float
    dead_fraction: float
    ce_clean: float
    ce_sae: float
    ce_zero: float
    ce_loss_recovered: float
    tokens: int

    def __getitem__(self, key: str) -> float:
        """Read as attributes or keys (`m.l0` or `m["l0"]`)."""
        if key not in self.keys():
            raise KeyError(key)
        return getattr(self, key)

    def keys(self) -> list[str]:
        return [f.name for f in fields(self)]


def explained_variance(x: torch.Tensor, x_hat: torch.Tensor) -> float:
    """1 - sum ||x - x_hat||^2 / sum ||x - mean(x)||^2 over rows x (N, d)."""
    x, x_hat = x.double(), x_hat.double()
    return 1.0 - float((x - x_hat).pow(2).sum() / (x - x.mean(0)).pow(2).sum())


class _Sums:
    """Running float64 sums over chunks."""

    def __init__(self, width: int):
        self.tokens = self.active = 0
        self.err = self.sq = 0.0
        self.total = None
        self.fired = torch.zeros(width, dtype=torch.bool)
        self.ce = {"clean": 0.0, "sae": 0.0, "zero": 0.0}
        self.predicted = 0

    def add_rows(self, x, x_hat, values, indices) -> None:
        x, x_hat = x.double(), x_hat.double()
        self.tokens += x.shape[0]
        self.err += float((x - x_hat).pow(2).sum())
        self.sq += float(x.pow(2).sum())
        total = x.sum(0)
        self.total = total if self.total is None else self.total + total
        on = values > 0  # (N, k)
        self.active += int(on.sum())
        self.fired[indices[on].cpu()] = True

    def result(self) -> SAEMetrics:
        centred = self.sq - float(self.total.pow(2).sum()) / self.tokens  # sum ||x - mean||^2
        ce = {name: value / self.predicted for name, value in self.ce.items()}
        gap = ce["zero"] - ce["clean"]
        return SAEMetrics(
            l0=self.active / self.tokens,
            explained_variance=1.0 - self.err / centred if centred > 0 else math.nan,
            dead_fraction=1.0 - float(self.fired.float().mean()),
            ce_clean=ce["clean"], ce_sae=ce["sae"], ce_zero=ce["zero"],
            ce_loss_recovered=(ce["zero"] - ce["sae"]) / gap if gap != 0 else math.nan,
            tokens=self.tokens)


def sae_metrics(model, sae, ids, *, cancel=None) -> SAEMetrics:
    """The metrics of `sae` (an SAE or a neuron dictionary) on token ids (sequences, T >= 2)."""
    check_sae_fits(model, sae)
    ids = check_ids(model, ids)
    sums = _Sums(sae.width)
    T = ids.shape[1]
    per = max(1, min(TOKENS_PER_FORWARD // T, LOGIT_FLOATS // (T * model.config.vocab_size)))
    with torch.no_grad(), eval_mode(model):
        for start in range(0, ids.shape[0], per):
            if cancel is not None and cancel():
                raise Cancelled("SAE metrics cancelled")
            _chunk(model, sae, ids[start:start + per].to(model.device), sums)
    return sums.result()


def _chunk(model, sae, chunk: torch.Tensor, sums: _Sums) -> None:
    """The three forwards of one chunk (b, T): clean, x_hat spliced in (x read there), hook zeroed."""
    def splice(x, _hp):
        flat = x.reshape(-1, sae.d_in)  # (b*T, d)
        values, indices = sae.encode_topk(flat.to(_param_device(sae, flat.device)))  # (b*T, k)
        x_hat = sae.decode_topk(values, indices).to(flat.device)  # (b*T, d)
        sums.add_rows(flat, x_hat, values, indices)
        return x_hat.to(x.dtype).reshape(x.shape)

    targets = chunk[:, 1:].reshape(-1)  # (b*(T-1),)
    for name, fn in (("clean", None), ("sae", splice), ("zero", lambda x, _hp: torch.zeros_like(x))):
        with model.hooks([(sae.hook, fn)] if fn else []):
            logits = model(chunk)  # (b, T, vocab)
        sums.ce[name] += float(F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]).float(), targets,
                                               reduction="sum"))
    sums.predicted += targets.numel()


def _param_device(sae, default: torch.device) -> torch.device:
    """Where the dictionary's weights are (a neuron dictionary has none: where x is)."""
    for p in sae.parameters():
        return p.device
    return default
