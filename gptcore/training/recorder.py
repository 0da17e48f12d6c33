"""Probes during training: what the model's internals look like at a step, as one trace record.

Why these: they are what the explorer's views show on a finished model (head roles, the residual
stream, attention, generated text), measured on FIXED inputs so that a change between two steps is
the model's, not the input's — which is what lets a watcher see an induction head form.

Each probe record (trace.py has its fields) holds, for one init scheme at one step:
- "census": `head_census` on repeated random tokens (probes/census.py), every (layer, head) score
  it returns (previous-token, duplicate-token, induction, ... as that module defines them).
- "residual": the mean per-token L2 norm of the residual stream at every layer boundary
  (probes/residual.py's `stream_norms`) on PROBE_ROWS fixed windows of the val split.
- "attention": every head's pattern on a probe prompt (the val split's first PROMPT_TOKENS
  tokens), in a side file DIR/probes/<scheme>/attention_<step>.npy, float16 (L, nh, T, T).
- "icl": the in-context-learning score of Olsson et al. (2022), scaled to the context length:
  the mean loss at the last eighth of the positions minus the mean loss at positions around a
  tenth of the way in (exact positions in the record), on fixed val windows of about ICL_TOKENS
  tokens in all. Negative means later tokens are predicted better because the model uses what
  came before; an induction head forming shows as a drop. One token's loss varies by ~2 nats, so
  the score needs thousands of tokens per window to be read to ~0.1 (64 windows at block 64: the
  probe's largest forward); the windows are the same at every step, so a change is the model's.
  "loss_by_position" gives the whole curve (binned to ≤ 64 points).
- "routes": the information-flow route (interp/flow.py, issue 29) to the probe prompt's last token:
  its ROUTE_EDGES strongest edges between tokens (attention from token j into token i != j), as
  [src, dst, weight] on the route graph's node names, so a chart can follow e.g. the previous-token
  -> induction route over steps. One forward plus the shares of a PROMPT_TOKENS-token prompt.
- "sample": SAMPLE_TOKENS tokens continuing the prompt's first tokens, sampled at temperature 0.8
  with a fixed seed (the same draws every time, so only the model changes the text).

Cost at the CPU recipe (4×4×128, block 64, bf16 steps on a 2-core EPYC; `python -m
gptcore.benches.probe_cost`): one probe ≈ 6.3 optimizer steps of CPU time (304 vs 48 ms; the
48-token sample and the ICL forward the largest parts), so the default probe_interval of 100
costs ≈ 6 % of training time (target ≤ 10 %).
"""
from __future__ import annotations

import dataclasses
import time

import numpy as np
import torch
import torch.nn.functional as F

from gptcore.interp.probes.census import head_census
from gptcore.interp.probes.residual import boundary_axis, stream_norms
from gptcore.training.run import RunFolder

PROMPT_TOKENS = 32  # the attention probe's T: (L, nh, 32, 32) stays small for any model
PROBE_ROWS = 8  # val windows for the residual norms
ICL_TOKENS = 4096  # the ICL score's windows hold about this many tokens: 64 windows of 64, 8 of 512 ...
ICL_ROWS = (8, 64)  # ... but never fewer or more windows than these
SAMPLE_TOKENS = 48
ROUTE_EDGES = 12  # the routes record keeps this many edges: a few hundred bytes per probe
ROUTE_THRESHOLD = 0.04  # the route graph's threshold (flow_graph's default, the paper's)
SAMPLE_PROMPT_TOKENS = 8
SAMPLE_SEED = 0
PROBE_STREAM = "probe"  # data.py's batches for probes come from a stream of their own
_DIGITS = 4  # probe numbers are rounded: the trace stays small and the noise below this is not news


class Recorder:
    """Fixed probe inputs of a run, and `probe(model, scheme, step)` that measures and returns a record."""

    def __init__(self, folder: RunFolder, corpus, block_size: int, seed: int):
        self.folder = folder
        self.corpus = corpus
        T = min(PROMPT_TOKENS, block_size, len(corpus.val))
        self.prompt = torch.as_tensor(np.asarray(corpus.val[:T], dtype=np.int64))  # (T,)
        self.prompt_text = [corpus.decode([int(i)]) for i in self.prompt]
        self.x, _ = corpus.batch("val", 0, PROBE_ROWS, block_size, seed, stream=PROBE_STREAM)  # (R, block)
        rows = min(max(ICL_TOKENS // block_size, ICL_ROWS[0]), ICL_ROWS[1])
        self.icl_x, self.icl_y = corpus.batch("val", 1, rows, block_size, seed, stream=PROBE_STREAM)  # (R', block) each
        self.early, self.late = icl_positions(block_size)

    @torch.no_grad()
    def probe(self, model, scheme: str, step: int) -> dict:
        """Measure every probe on `model` (eval mode for the duration) and save the attention file;
        returns the record's fields (the caller writes them to the trace)."""
        started = time.perf_counter()
        was_training = model.training
        model.eval()
        try:
            device = model.device
            notes = []
            try:
                census = census_scores(model)
            except ValueError as exc:  # a block too short for repeated sequences: the rest still says much
                census = None
                notes.append(f"no head census: {exc}")
            fields = {
                "scheme": scheme, "step": step,
                "census": census,
                "residual": self._residual(model, device),
                "attention": self._attention(model, scheme, step, device),
                "icl": self._icl(model, device),
                "routes": self._routes(model, notes),
                "sample": self._sample(model),
            }
            if notes:
                fields["notes"] = notes
        finally:
            model.train(was_training)
        fields["seconds"] = round(time.perf_counter() - started, 4)
        return fields

    def _residual(self, model, device) -> dict:
        _, labels = boundary_axis(model.config.n_layer)
        norms = stream_norms(model, self.x.to(device))  # (2L+1,)
        return {"labels": list(labels), "norms": [round(v, _DIGITS) for v in norms]}

    def _attention(self, model, scheme: str, step: int, device) -> dict:
        patterns: list[torch.Tensor] = [None] * model.config.n_layer

        def keep(pattern: torch.Tensor, hook) -> None:  # pattern (1, nh, T, T)
            patterns[int(hook.name.split(".")[1])] = pattern[0].float().cpu()

        with model.hooks([(lambda name: name.endswith("attn.hook_pattern"), keep)]):
            model(self.prompt[None].to(device), logits=None)
        stacked = torch.stack(patterns).detach().numpy()  # (L, nh, T, T)
        path = self.folder.save_attention(stacked, scheme, step)
        return {"file": self.folder.relative(path), "shape": list(stacked.shape), "tokens": self.prompt_text}

    def _routes(self, model, notes: list) -> dict | None:
        from gptcore.interp.flow import information_flow
        from gptcore.interp.flow_graph import flow_graph, top_route_edges

        try:
            graph = flow_graph(information_flow(model, self.prompt), threshold=ROUTE_THRESHOLD)
        except ValueError as exc:  # a post-LN model, a one-token prompt: the rest still says much
            notes.append(f"no routes: {exc}")
            return None
        edges = [[src, dst, round(w, _DIGITS)] for src, dst, w in top_route_edges(graph, ROUTE_EDGES)]
        return {"prompt": "".join(self.prompt_text), "position": graph.position, "threshold": ROUTE_THRESHOLD,
                "edges": edges}

    def _icl(self, model, device) -> dict:
        logits = model(self.icl_x.to(device))  # (R', T, V)
        per_token = F.cross_entropy(logits.float().flatten(0, 1), self.icl_y.to(device).flatten(), reduction="none")
        by_position = per_token.view(self.icl_y.shape).mean(dim=0).cpu().numpy()  # (T,)
        out = {"early_positions": list(self.early), "late_positions": list(self.late), "windows": len(self.icl_y)}
        if self.early and self.late:
            early, late = float(by_position[list(self.early)].mean()), float(by_position[list(self.late)].mean())
            out.update(score=round(late - early, _DIGITS), early=round(early, _DIGITS), late=round(late, _DIGITS))
        else:
            out.update(score=None, early=None, late=None)
        bins = np.array_split(np.arange(len(by_position)), min(64, len(by_position)))
        out["loss_by_position"] = {"positions": [int(b.mean()) for b in bins],
                                   "loss": [round(float(by_position[b].mean()), _DIGITS) for b in bins]}
        return out

    def _sample(self, model) -> dict:
        from gptcore.generation.streaming import generate

        prompt = self.prompt[:SAMPLE_PROMPT_TOKENS].tolist()
        steps = generate(model, prompt, max_new_tokens=SAMPLE_TOKENS, temperature=0.8, seed=SAMPLE_SEED,
                         n_alternatives=0)
        ids = [s.token for s in steps]
        return {"prompt": self.corpus.decode(prompt), "text": self.corpus.decode(ids)}


def census_scores(model) -> dict[str, list]:
    """Every per-head score `head_census` returns, as {name: [[layer][head]]}."""
    census = head_census(model)
    out = {}
    for f in dataclasses.fields(census):
        value = getattr(census, f.name)
        if isinstance(value, torch.Tensor) and value.dim() == 2 and value.is_floating_point():
            out[f.name] = [[round(v, _DIGITS) for v in row] for row in value.double().tolist()]
    return out


def icl_positions(T: int) -> tuple[range, range]:
    """Early and late positions of the ICL score for a context of T tokens (empty if T < 8):
    early around a tenth of the way in (Olsson et al.'s token 50 of 512), late the last tenth."""
    if T < 8:
        return range(0), range(0)
    tenth, half_width = T // 10, T // 20
    early = range(max(1, tenth - half_width), max(2, tenth + half_width + 1))  # T=64: 3..9
    late = range(T - T // 8, T)  # T=64: 56..63
    return early, late
