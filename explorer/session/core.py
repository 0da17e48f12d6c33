"""The headless heart of the app: one model, its tokenizer and device. No Qt here.

This is the core: model, tokenizer, device, `lock`, one `version`, `events`. The work lives in
domains that take the core explicitly and are called by name, each in its own subpackage
(`<domain>/domain.py`, its results in `<domain>/results.py`): `session.attention`,
`session.generation`, `session.residual`, `session.interp` (ablation, attribution, patching,
census), `session.training`, `session.routes`, `session.features`, `session.circuits`; getting a model (reading,
drawing one) is models.py. The core
never forwards to them: callers write `session.attention.capture(text)`. The domains are one
table, `DOMAINS` (a new panel's domain is one line there); `bump_version` walks it and calls each
domain's `forget()` (what it kept for the old state: a prompt's keys and values, a census).

Panels never touch torch: every domain takes plain Python values and returns frozen
dataclasses of numpy arrays or plain values. That keeps the views testable without a
model and lets the same calls run from a script.

Threading rules (tasks call these methods on the compute thread, views on the GUI thread):
- `lock` (an RLock) is held while the model runs. Hook points are shared module state,
  so two forwards at once would fire each other's hooks; long tasks (generation) take it
  per step so other panels can interleave between tokens.
- A model swap (load/build/adopt) does the slow part (reading, allocating) *outside* the lock
  and then swaps model, info and `version` together under it. If loading fails, nothing
  changes: the previous model stays loaded.
- `version` goes up by one on every change of state (a swap, an ablation, a setting, a
  training step shown), always through `bump_version()`: a request carries the version it was
  computed for, and the runner drops its result when the version moved on
  (explorer/controllers/base.py).
- Every change is announced on `events` as a typed event (explorer/session/events.py), sent
  after the lock is released: views follow the session, nobody else broadcasts.
"""
from __future__ import annotations

import dataclasses
import threading
from typing import Callable

import torch

from gptcore.model.config import GPTConfig

from explorer.runtime.devices import resolve_device
from explorer.session import models
from explorer.session.events import EventHub, ModelSwapped, SettingsChanged, TrainingStepShown
from explorer.session.models import ProgressFn
from explorer.session.results import NO_MODEL, ModelInfo
from explorer.session.attention.domain import AttentionDomain
from explorer.session.generation.domain import GenerationDomain
from explorer.session.interp.domain import Interpretability
from explorer.session.residual.domain import ResidualDomain
from explorer.session.routes.domain import RoutesDomain
from explorer.session.training.domain import TrainingDomain
from explorer.session.features.domain import FeaturesDomain
from explorer.session.circuits.domain import CircuitsDomain

# The session's domains, by the attribute they are called by: each takes the core, and may define
# `forget()` (drop what it kept for the old state; bump_version calls it on every change).
DOMAINS: dict[str, type] = {
    "interp": Interpretability,
    "attention": AttentionDomain,
    "residual": ResidualDomain,
    "generation": GenerationDomain,
    "training": TrainingDomain,
    "routes": RoutesDomain,
    "features": FeaturesDomain,
    "circuits": CircuitsDomain,
}


class Session:
    """Model + tokenizer + device, swapped atomically, and the domains that work on them; see the
    module docstring."""

    def __init__(self, model=None, info: ModelInfo | None = None, device=None):
        self.lock = threading.RLock()
        self.events = EventHub()  # ModelSwapped, AblationChanged, SettingsChanged, TrainingStepShown
        self.model = model
        # Resolved on first use (asking CUDA for devices takes time; a test session never needs it).
        self._device = model.device if model is not None else None
        self._device_request = device
        self.info = info or (NO_MODEL if model is None else
                             models.model_info(model, name="model", trained=False, source=""))
        self.version = 0 if model is None else 1
        self._tokenizer = None
        self.swap_pending = threading.Event()  # set while a load/build waits for the lock
        for name, domain in DOMAINS.items():  # called by name: `session.attention.capture(...)`
            setattr(self, name, domain(self))

    # -- basics --------------------------------------------------------------------------
    @property
    def device(self) -> torch.device:
        if self._device is None:
            self._device = resolve_device(self._device_request)
        return self._device

    def require_model(self):
        """The loaded model, or an error saying to wait or open one (every domain asks this way)."""
        if self.model is None:
            raise RuntimeError("no model is loaded yet; wait for loading to finish or open one from the File menu")
        return self.model

    @property
    def has_model(self) -> bool:
        return self.model is not None

    @property
    def config(self) -> GPTConfig | None:
        return self.model.config if self.model is not None else None

    @property
    def tokenizer(self):
        if self._tokenizer is None:
            from gptcore.io.tokenizer import gpt2_tokenizer

            self._tokenizer = gpt2_tokenizer()
        return self._tokenizer

    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer.encode(text))

    def token_strings(self, ids) -> list[str]:
        tok = self.tokenizer
        return [tok.token_str(int(i)) for i in ids]

    def check_token_ids(self, ids, model=None) -> None:
        """Refuse ids the model has no embedding row for, naming the token and the fix.

        Why: a custom config may have a vocab_size below the GPT-2 tokenizer's 50 257 ids,
        and torch's own error for that is a bare "index out of range in self"."""
        vocab = (model if model is not None else self.model).config.vocab_size
        bad = next((int(i) for i in ids if not 0 <= int(i) < vocab), None)
        if bad is not None:
            raise ValueError(
                f"token {self.tokenizer.token_str(bad)!r} (id {bad:,}) is outside this model's vocabulary "
                f"(vocab_size={vocab:,}); type text whose tokens are all below {vocab:,}, or use a model "
                f"whose vocabulary covers the GPT-2 tokenizer (50,257 ids)"
            )

    def _swap(self, model, info: ModelInfo, cancel=None, tokenizer=None) -> ModelInfo:
        """Install `model` unless its request was cancelled (superseded by a newer load or
        build): checked under the lock, so a slow old request can never replace a newer model."""
        from gptcore.io.loading import LoadCancelled

        model.eval()
        self.swap_pending.set()  # a patching run holding the lock stops at its next batch
        try:
            with self.lock:
                if cancel is not None and cancel():
                    raise LoadCancelled("superseded by a newer model request; the current model is unchanged")
                old, old_info = self.model, self.info
                self.interp.forget_model()  # its ablation named the old model's heads
                self.model, self._device = model, model.device
                self._tokenizer = tokenizer  # None: GPT-2's, made on first use
                version = self.bump_version()
                self.info = info  # last: whoever reads the new name without the lock finds the rest in place
        finally:
            self.swap_pending.clear()
        del old
        self.events.send(ModelSwapped(old=old_info, new=info, version=version))
        if self.device.type == "cuda":
            torch.cuda.empty_cache()
        return info

    # -- getting a model (the slow half in models.py, outside the lock) ------------------------
    def load(self, source, *, device=None, progress: ProgressFn | None = None, cancel=None,
             n_head: int | None = None, meta=None) -> ModelInfo:
        """Load anything gptcore.load takes; on failure the current model stays. A file that does
        not record its head count needs `n_head` (else HeadCountNeeded): the app never guesses.
        `meta`: a nanoGPT meta.pkl the user chose for a char model whose own was not found."""
        dev = resolve_device(device if device is not None else self.device)
        model, info, tokenizer = models.read(source, dev, progress=progress, cancel=cancel, n_head=n_head, meta=meta)
        return self._swap(model, info, cancel, tokenizer=tokenizer)

    def build(self, config: dict, init_scheme: str = "gpt2", seed: int | None = None,
              progress: ProgressFn | None = None, *, name: str | None = None, note: str = "",
              device=None, cancel=None) -> ModelInfo:
        """A fresh, untrained model from a config dict; refused before allocating if it won't fit."""
        dev = resolve_device(device if device is not None else self.device)
        model, info = models.fresh(config, init_scheme, seed, dev, progress=progress, name=name, note=note,
                                   cancel=cancel)
        self._swap(model, info, cancel)
        if progress is not None:
            progress(models.BUILD_STEPS, models.BUILD_STEPS, "done")
        return info

    def bump_version(self) -> int:
        """The one place the version moves on (call it holding `lock`, then announce the change
        with the version it returns): every result computed so far is stale, so the domains drop
        what they kept for the old state (the attention and routes prompt states, the head census)."""
        self.version += 1
        self._forget()
        return self.version

    def _forget(self) -> None:
        """Every domain drops what it kept for the state that is gone (DOMAINS, in order)."""
        for name in DOMAINS:
            forget = getattr(getattr(self, name), "forget", None)
            if forget is not None:
                forget()

    def settings_changed(self, what: str) -> int:
        """A setting every computation depends on changed (`what` names it for the views):
        every result so far is stale. Returns the new version."""
        with self.lock:
            version = self.bump_version()
        self.events.send(SettingsChanged(what=what, version=version))
        return version

    def adopt(self, model, *, name: str, source: str, provenance: str = "", tokenizer=None,
              tokenizer_name: str = "GPT-2 (offline BPE)", trained: bool | None = True, note: str = "",
              run=None) -> ModelInfo:
        """Make `model` (built elsewhere: a training run's step, say) the session's model, with
        its own tokenizer (None: GPT-2's) and, for a run's step, its `RunStep`. A model swap like load()."""
        info = models.model_info(model, name=name, trained=trained, source=source, note=note,
                                 provenance=provenance, tokenizer=tokenizer_name)
        info = dataclasses.replace(info, run=run)
        return self._swap(model, info, tokenizer=tokenizer)

    def show_training_step(self, state_dict: dict, step: int, name: str | None = None,
                           info: Callable[[ModelInfo], ModelInfo] | None = None) -> int:
        """Copy the weights of training step `step` into the loaded model (same shapes: a run's
        checkpoint of this model) and tell every view; `name` renames the model for the status
        bar ("trained · step 1,200 of 2,000 · …") and `info` rewrites its other facts. Returns the
        new version. Why one lock for all three: a reader must never see the new step's name beside
        the old step's weights or version (a test once did, between two lock sections)."""
        model = self.require_model()
        with self.lock:
            model.load_state_dict(state_dict)
            model.eval()
            version = self.bump_version()
            # The facts last: a reader without the lock (a test's wait, a label) that sees the new name
            # also sees the new weights and version.
            facts = info(self.info) if info is not None else self.info
            self.info = dataclasses.replace(facts, name=name) if name is not None else facts
        self.events.send(TrainingStepShown(step=int(step), version=version))
        return version

    @classmethod
    def tiny(cls, seed: int = 0, **config_overrides) -> "Session":
        """A small random model on the CPU for tests: 2 layers, 4 heads, 64 wide, GPT-2 vocab."""
        return cls(*models.tiny(seed, **config_overrides))
