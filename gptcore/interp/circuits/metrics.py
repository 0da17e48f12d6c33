"""`transcoder_metrics`: how well a model's transcoders replace its MLPs, on some text.

- fvu (per layer): the fraction of the MLP output's variance the transcoder leaves unexplained,
  sum ||y - y_hat||^2 / sum ||y - mean y||^2 over every token (the mean over the same tokens);
  y_hat from the clean run's MLP input (each layer judged on its own);
- l0 (per layer): mean active features per token; dead_fraction (per layer): features that never
  fire on this text;
- ce_clean / ce_replaced / ce_zero: next-token cross-entropy (nats, mean over predicted positions)
  of the model, with *every* MLP replaced by its transcoder at once (no error term: errors
  compound through the layers, as in the replacement model an attribution graph explains), and
  with every MLP's output zeroed;
- ce_loss_recovered = (ce_zero - ce_replaced) / (ce_zero - ce_clean): 1 when the replacement loses
  nothing, 0 when it is as bad as no MLPs at all.

Sums in float64; three forwards per chunk of sequences.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from gptcore.errors import Cancelled
from gptcore.interp.circuits.transcoder import check_transcoders_fit
from gptcore.interp.sae.harvest import check_ids, eval_mode
from gptcore.interp.sae.metrics import LOGIT_FLOATS, TOKENS_PER_FORWARD


@dataclass(frozen=True)
class TranscoderMetrics:
    fvu: tuple[float, ...]
    l0: tuple[float, ...]
    dead_fraction: tuple[float, ...]
    ce_clean: float
    ce_replaced: float
    ce_zero: float
    ce_loss_recovered: float
    tokens: int


def transcoder_metrics(model, transcoders, ids, *, cancel=None) -> TranscoderMetrics:
    """The metrics of `transcoders` (one per layer) on token ids (sequences, T >= 2)."""
    transcoders = check_transcoders_fit(model, transcoders)
    ids = check_ids(model, ids)
    L = len(transcoders)
    err, centred = [0.0] * L, [0.0] * L
    sums = [torch.zeros(model.config.n_embd, dtype=torch.float64) for _ in range(L)]
    sq, active = [0.0] * L, [0] * L
    fired = [torch.zeros(t.width, dtype=torch.bool) for t in transcoders]
    ce = {"clean": 0.0, "replaced": 0.0, "zero": 0.0}
    tokens = predicted = 0
    T = ids.shape[1]
    per = max(1, min(TOKENS_PER_FORWARD // T, LOGIT_FLOATS // (T * model.config.vocab_size)))
    with torch.no_grad(), eval_mode(model):
        for start in range(0, ids.shape[0], per):
            if cancel is not None and cancel():
                raise Cancelled("transcoder metrics cancelled")
            chunk = ids[start:start + per].to(model.device)  # (b, T)
            targets = chunk[:, 1:].reshape(-1)
            for name, hooks in (("clean", _reader(transcoders, err, sums, sq, active, fired)),
                                ("replaced", _replacer(transcoders)),
                                ("zero", [(t.output_hook, lambda y, _hp: torch.zeros_like(y)) for t in transcoders])):
                with model.hooks(hooks):
                    logits = model(chunk)  # (b, T, vocab)
                ce[name] += float(F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]).float(), targets,
                                                  reduction="sum"))
            tokens += chunk.numel()
            predicted += targets.numel()
    for layer in range(L):  # sum ||y - mean||^2 = sum ||y||^2 - ||sum y||^2 / n
        centred[layer] = sq[layer] - float(sums[layer].pow(2).sum()) / tokens
    ce = {name: value / predicted for name, value in ce.items()}
    gap = ce["zero"] - ce["clean"]
    return TranscoderMetrics(
        fvu=tuple(e / c if c > 0 else math.nan for e, c in zip(err, centred)),
        l0=tuple(a / tokens for a in active),
        dead_fraction=tuple(1.0 - float(f.float().mean()) for f in fired),
        ce_clean=ce["clean"], ce_replaced=ce["replaced"], ce_zero=ce["zero"],
        ce_loss_recovered=(ce["zero"] - ce["replaced"]) / gap if gap != 0 else math.nan, tokens=tokens)


def _reader(transcoders, err, sums, sq, active, fired):
    """Hooks of the clean run: each layer's input kept, its output compared with the prediction."""
    inputs = {}

    def keep(x, hp):
        inputs[hp.name] = x

    def compare(y, hp):
        t = transcoders[int(hp.name.split(".")[1])]
        x = inputs.pop(t.input_hook).reshape(-1, t.d_in)  # (n, d)
        flat = y.reshape(-1, t.d_out).double()  # (n, d)
        x = x.to(t.W_enc.device)
        feats = t.encode(x).to(flat.device)  # (n, width): what is active, counted below
        y_hat = t(x).to(flat.device).double()  # (n, d): the transcoder's own (sparse, for TopK) prediction
        err[t.layer] += float((flat - y_hat).pow(2).sum())
        sq[t.layer] += float(flat.pow(2).sum())
        sums[t.layer] += flat.sum(0).cpu()
        on = feats > 0
        active[t.layer] += int(on.sum())
        fired[t.layer] |= on.any(0).cpu()

    return [h for t in transcoders for h in ((t.input_hook, keep), (t.output_hook, compare))]


def _replacer(transcoders):
    """Hooks that put every transcoder's prediction in place of its MLP's output."""
    inputs = {}

    def keep(x, hp):
        inputs[hp.name] = x

    def replace(y, hp):
        t = transcoders[int(hp.name.split(".")[1])]
        x = inputs.pop(t.input_hook)
        return t(x.to(t.W_enc.device)).to(y.device, y.dtype).reshape(y.shape)

    return [h for t in transcoders for h in ((t.input_hook, keep), (t.output_hook, replace))]
