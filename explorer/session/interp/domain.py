"""The session's "why" domain: ablation as session state, direct logit attribution,
activation patching and the head census. No Qt here.

It takes the session core explicitly (`Interpretability(core)`, made by `Session`; callers reach
it as `session.interp`) and uses only what the core offers every domain: `lock`, `model`,
`version`, `bump_version()`, `events`, `swap_pending`, `require_model()`, `encode`,
`token_strings`, `check_token_ids`. The core tells it when its model goes (`forget_model`, under
the core's lock) or its version moves on (`forget`).

Ablation is state, not a per-call option: the hooks that knock components out are attached
to the loaded model itself while an ablation is set, so every computation of every panel
(attention capture, the generation pane's distribution and sampled text, DLA, patching)
runs the ablated model without each method having to remember it. Setting or clearing it
moves the version on (the core's `bump_version`, as a model swap does), so every cached result
is stale at once, and announces `AblationChanged`; a model swap clears it (the new model has its own
heads, and `ModelSwapped` says so).
"""
from __future__ import annotations

import contextlib
import dataclasses
import time
from importlib import resources

import numpy as np
import torch

from explorer.session.events import AblationChanged
from explorer.session.interp.results import (AttributionResult, HeadCensusResult, PatchedDistribution, PatchingResult,
                                             TokenChoice)
from explorer.session.results import NO_ABLATION, AblationState

APP_MODES = ("zero", "mean")  # resample needs a reference aligned position by position: gptcore only
TOP_K = 8
CENSUS_HALF = 50  # repeated random sequences of 2 × 50 tokens, as in TransformerLens's tutorials


def _sample_prompts() -> list[str]:
    """The reference batch of mean ablation: the app's own sample prompts."""
    text = resources.files("resources").joinpath("sample_prompts.txt").read_text(encoding="utf-8")
    return [line for line in text.splitlines() if line.strip() and not line.startswith("#")]


class Interpretability:
    """Ablation, attribution, patching and the head census of one session core (see the module docstring)."""

    def __init__(self, core):
        self.core = core
        self._ablation: AblationState = NO_ABLATION
        self._ablation_handles: list = []
        self._feature_edit = None  # the entered sae_edit context of the features held (issue 33)
        self._census: HeadCensusResult | None = None

    def forget_model(self) -> None:
        """The core swaps its model (called under its lock): the ablation named the old model's
        heads, the census measured it."""
        self._detach_ablation()
        self._exit_feature_edit()
        self._census = None

    def forget(self) -> None:
        """The version moved on (other weights, another ablation, a setting): the census is stale;
        the ablation stays."""
        self._census = None

    # -- ablation ------------------------------------------------------------------------
    @property
    def ablation(self) -> AblationState:
        return self._ablation

    @contextlib.contextmanager
    def model_itself(self, model=None):
        """`model` (default: the one loaded) under the session's lock with every edit held for viewing (the
        ablation, feature edits) set aside: what SAEs and transcoders are trained on and measured against.
        Nothing inside may report progress: a report runs waiting tasks right there, on this thread, which
        holds the (re-entrant) lock — they would read the unedited model, or change the edits while they
        are set aside."""
        with self.core.lock:
            model = self.core.require_model() if model is None else model
            with model.hooks_suspended():
                yield model

    def set_ablation(self, heads=(), mlps=(), mode: str = "zero") -> AblationState:
        """Knock out these heads ((layer, head) pairs) and MLPs (layers) for every panel.
        An empty set clears the ablation. Refuses unknown components and ablating every head."""
        from gptcore.interp.interventions import ablation_hooks, make_ablation

        if mode not in APP_MODES:
            raise ValueError(f"ablation mode must be one of {', '.join(APP_MODES)} in the app; got {mode!r} "
                             f"(resample needs a reference prompt aligned position by position: use "
                             f"gptcore.interp.interventions.ablate from Python)")
        with self.core.lock:
            model = self.core.require_model()
            spec = make_ablation(model, heads, mlps, mode)
            cfg = model.config
            if len(spec.heads) == cfg.n_layer * cfg.n_head:
                raise ValueError(f"that would ablate all {len(spec.heads)} heads: the model would have no attention "
                                 f"left and every view would show the same meaningless output; keep at least one "
                                 f"head (Reset clears the ablation)")
            before = self._ablation
            self._detach_ablation()  # the mean is measured on the model without the old ablation
            reference = None
            if spec and mode == "mean":
                reference = self._reference_ids(model)
            hooks = ablation_hooks(model, spec, reference)
            self._ablation_handles = [model.hook_dict[name].add_hook(fn) for name, fn in hooks]
            self._ablation = AblationState(spec.heads, spec.mlps, mode, before.features, before.feature_source)
            event = AblationChanged(before=before, after=self._ablation, version=self.core.bump_version())
        self.core.events.send(event)
        return event.after

    def clear_ablation(self) -> AblationState:
        """Reset: no head, no MLP, no feature edit."""
        if self._ablation.features:
            self.set_feature_edits(None, {})
        return self.set_ablation((), (), self._ablation.mode if self._ablation.mode in APP_MODES else "zero")

    def set_feature_edits(self, dictionary, edits: dict, source: str = "", editor=None) -> AblationState:
        """Hold features of `dictionary` (an SAE or a layer's neurons) at the given values for every panel
        (gptcore.sae_edit: the SAE's error term kept, so only these features change); {} clears. Announced
        as an ablation change: the status bar's badge says it, Reset clears it. `editor(model, dictionary,
        edits)`: the context manager that makes the edit, sae_edit by default (the Circuits panel passes
        gptcore.transcoder_edit, a set of transcoders and {(layer, feature): value})."""
        from gptcore import sae_edit

        with self.core.lock:
            model = self.core.require_model()
            before = self._ablation
            entered = None
            if edits:
                entered = (editor or sae_edit)(model, dictionary, edits)
                entered.__enter__()  # refuses a bad feature or value before anything changes
            self._exit_feature_edit()
            self._feature_edit = entered
            self._ablation = dataclasses.replace(before, features=tuple(sorted(edits.items())) if edits else (),
                                                 feature_source=source if edits else "")
            event = AblationChanged(before=before, after=self._ablation, version=self.core.bump_version())
        self.core.events.send(event)
        return event.after

    def _exit_feature_edit(self) -> None:
        entered, self._feature_edit = self._feature_edit, None
        if entered is not None:
            entered.__exit__(None, None, None)

    def toggle_head(self, layer: int, head: int, mode: str | None = None) -> AblationState:
        heads = set(self._ablation.heads) ^ {(int(layer), int(head))}
        return self.set_ablation(sorted(heads), self._ablation.mlps, mode or self._ablation.mode)

    def toggle_mlp(self, layer: int, mode: str | None = None) -> AblationState:
        mlps = set(self._ablation.mlps) ^ {int(layer)}
        return self.set_ablation(self._ablation.heads, sorted(mlps), mode or self._ablation.mode)

    def _detach_ablation(self) -> None:
        """Heads and MLPs only (the features held stay: set_ablation keeps them)."""
        for handle in self._ablation_handles:
            handle.remove()
        self._ablation_handles = []
        self._ablation = NO_ABLATION

    def _reference_ids(self, model) -> list[list[int]]:
        vocab, block = model.config.vocab_size, model.config.block_size
        try:
            prompts = [self.core.encode(p)[-block:] for p in _sample_prompts()]
        except ValueError:  # a model without a tokenizer reads token ids, not the sample sentences
            prompts = []
        prompts = [p for p in prompts if p and max(p) < vocab]
        if not prompts:
            raise ValueError("mean ablation averages over the sample prompts, which this model cannot read (its "
                             "vocabulary or tokenizer does not cover them) — use zero ablation")
        return prompts

    # -- tokens ----------------------------------------------------------------------------
    def resolve_token(self, text: str) -> TokenChoice:
        """' Mary' -> its one token; several tokens or none -> a message naming them."""
        if not text:
            raise ValueError("type a token (mind the leading space: ' Mary', not 'Mary')")
        ids = self.core.encode(text)
        if len(ids) != 1:
            pieces = " + ".join(repr(s) for s in self.core.token_strings(ids))
            raise ValueError(f"{text!r} is {len(ids)} tokens ({pieces}); a target must be one token — "
                             f"pick one of them")
        if self.core.model is not None:
            self.core.check_token_ids(ids)
        return TokenChoice(ids[0], self.core.token_strings(ids)[0])

    def _choice(self, token_id: int) -> TokenChoice:
        return TokenChoice(int(token_id), self.core.token_strings([int(token_id)])[0])

    def _prompt_ids(self, text: str, what: str, model) -> list[int]:
        ids = self.core.encode(text)
        if not ids:
            raise ValueError(f"the {what} is empty; type a few words")
        ids = ids[-model.config.block_size:]
        self.core.check_token_ids(ids, model)
        return ids

    # -- attribution -------------------------------------------------------------------------
    def attribution(self, text: str, target: int | None = None,
                    contrast: int | None | str = "auto") -> AttributionResult:
        """DLA of `target` (default: the model's top-1 next token) minus `contrast` ("auto":
        the top-2, or top-1 when the target is another token; None: no contrast)."""
        from gptcore.interp.attribution import direct_logit_attribution

        with self.core.lock:
            model = self.core.require_model()
            version, ablation = self.core.version, self._ablation
            ids = self._prompt_ids(text, "prompt", model)
            started = time.perf_counter()
            with torch.inference_mode():
                logits = model(torch.tensor([ids], device=model.device), logits="last")[0, -1].float()  # (V,)
            if not bool(torch.isfinite(logits).all()):
                raise ValueError("the model's output is NaN/Inf for this prompt, so there is nothing to attribute; "
                                 "the weights are broken (or an ablation pushed them there) — load another model")
            probs = torch.softmax(logits, dim=-1)
            top_p, top_i = probs.topk(min(TOP_K, probs.shape[0]))
            top = [int(i) for i in top_i]
            if target is None:
                target = top[0]
            if contrast == "auto":
                contrast = next(t for t in top if t != target)
            dla = direct_logit_attribution(model, ids, int(target), None if contrast is None else int(contrast))
            elapsed = time.perf_counter() - started
        return AttributionResult(
            text=text, token_ids=np.asarray(ids, dtype=np.int64), tokens=tuple(self.core.token_strings(ids)),
            target=self._choice(dla.target), contrast=None if dla.contrast is None else self._choice(dla.contrast),
            heads=dla.heads.numpy(), attn=dla.attention.numpy(), mlps=dla.mlps.numpy(), embed=dla.embed,
            bias=dla.bias, total=dla.total, top=tuple(self._choice(t) for t in top), top_probs=top_p.cpu().numpy(),
            ablation=ablation, version=version, elapsed_s=elapsed)

    # -- patching ----------------------------------------------------------------------------
    def patching(self, clean_text: str, corrupt_text: str, target: int, contrast: int | None,
                 progress=None, cancel=None) -> PatchingResult:
        """All four patching maps. Holds the model for the run; stops cleanly (ValueError
        naming why) when a model load or build is waiting, and at `cancel()` (PatchingCancelled)."""
        from gptcore.interp.patching import PatchingCancelled, patch_all

        def stop() -> bool:
            return self.core.swap_pending.is_set() or (cancel is not None and cancel())

        def report(done: int, total: int) -> None:
            if progress is not None:
                progress(done, total, f"patching {done}/{total}")

        with self.core.lock:
            model = self.core.require_model()
            version, ablation = self.core.version, self._ablation
            clean = self._prompt_ids(clean_text, "clean prompt", model)
            corrupt = self._prompt_ids(corrupt_text, "corrupted prompt", model)
            if len(clean) != len(corrupt):
                raise ValueError(f"the clean prompt is {len(clean)} tokens and the corrupted prompt {len(corrupt)}; "
                                 f"patching swaps activations position by position, so both need the same number "
                                 f"of tokens — edit one until the counts match")
            started = time.perf_counter()
            try:
                maps = patch_all(model, clean, corrupt, int(target), None if contrast is None else int(contrast),
                                 progress=report, cancel=stop)
            except PatchingCancelled:
                if self.core.swap_pending.is_set():
                    raise ValueError("patching stopped: a new model is being loaded; run it again on the new "
                                     "model") from None
                raise
            elapsed = time.perf_counter() - started
        return PatchingResult(
            clean_text=clean_text, corrupt_text=corrupt_text, tokens=tuple(self.core.token_strings(clean)),
            corrupt_tokens=tuple(self.core.token_strings(corrupt)), target=self._choice(target),
            contrast=None if contrast is None else self._choice(contrast),
            resid=maps["resid"].scores.numpy(), attn=maps["attn"].scores.numpy(), mlp=maps["mlp"].scores.numpy(),
            heads=maps["heads"].scores.numpy(), ld_clean=maps["heads"].ld_clean, ld_corrupt=maps["heads"].ld_corrupt,
            ablation=ablation, version=version, elapsed_s=elapsed)

    def patched_distribution(self, clean_text: str, corrupt_text: str, kind: str, layer: int, index: int,
                             rows: int = 10) -> PatchedDistribution:
        """The corrupted prompt's next-token distribution with one cell of a map patched."""
        from gptcore.interp.patching import patched_logits

        with self.core.lock:
            model = self.core.require_model()
            version = self.core.version
            clean = self._prompt_ids(clean_text, "clean prompt", model)
            corrupt = self._prompt_ids(corrupt_text, "corrupted prompt", model)
            logits = patched_logits(model, clean, corrupt, kind, int(layer), int(index)).float()  # (V,)
            with torch.inference_mode():
                base = model(torch.tensor([corrupt], device=model.device), logits="last")[0, -1].float()  # (V,)
        probs = torch.softmax(logits, dim=-1)
        base_probs = torch.softmax(base, dim=-1)
        top_p, top_i = probs.topk(min(rows, probs.shape[0]))
        strings = tuple(self.core.token_strings(top_i.tolist()))
        if kind == "heads":
            label = f"L{layer} H{index}"
        else:
            label = f"{kind} L{layer} {self.core.token_strings([clean[index]])[0]!r} (pos {index})"
        return PatchedDistribution(kind=kind, layer=int(layer), index=int(index), label=label, strings=strings,
                                   probs=top_p.cpu().numpy(), corrupt_probs=base_probs[top_i].cpu().numpy(),
                                   version=version)

    # -- head census -------------------------------------------------------------------------
    def census(self) -> HeadCensusResult:
        """Every head's census scores for the loaded (and ablated) model; cached per version."""
        from gptcore.interp.probes.census import head_census

        with self.core.lock:
            model = self.core.require_model()
            if self._census is not None and self._census.version == self.core.version:
                return self._census
            census = head_census(model, half=CENSUS_HALF, batch=4, seed=0)
            result = HeadCensusResult(previous_token=census.previous_token.numpy(),
                                      duplicate_token=census.duplicate_token.numpy(),
                                      induction=census.induction.numpy(),
                                      position_copy=census.position_copy.numpy(),
                                      position_offset=census.position_offset.numpy(),
                                      sequence_length=int(census.tokens.shape[1]), version=self.core.version)
            self._census = result
            return result
