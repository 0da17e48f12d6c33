"""The headless heart of the app: one model, its tokenizer and device. No Qt here.

This is the core (model, tokenizer, device, lock, version, events). The domain work lives in
objects that take the core explicitly: `attention_domain` (session/attention.py), `generation`
(session/generation.py), `residual` (session/residual.py) and `interp` (session/interp.py:
ablation, attribution, patching, census); the core tells them when its model goes or its
weights move. The methods of those names here are one-line forwards kept for callers.

Panels never touch torch: every method takes plain Python values and returns frozen
dataclasses of numpy arrays or plain values. That keeps the views testable without a
model and lets the same calls run from a script.

Threading rules (workers call these methods from pool threads):
- `lock` (an RLock) is held while the model runs. Hook points are shared module state,
  so two forwards at once would fire each other's hooks; long tasks (generation) take it
  per step so other panels can interleave between tokens.
- A model swap (load/build) does the slow part (reading, allocating) *outside* the lock
  and then swaps model, info and `version` together under it. If loading fails, nothing
  changes: the previous model stays loaded.
- `version` goes up by one on every change of state (a swap, an ablation, a setting, a
  training step shown): a request carries the version it was computed for, and the runner
  drops its result when the version moved on (explorer/controllers/base.py).
- Every change is announced on `events` as a typed event (explorer/session/events.py), sent
  after the lock is released: views follow the session, nobody else broadcasts.
"""
from __future__ import annotations

import dataclasses
import threading
from typing import Callable, Iterator

import numpy as np
import torch

from gptcore.model.config import GPT2_VOCAB, GPTConfig

from explorer.runtime.devices import check_fits, resolve_device
from explorer.session.events import EventHub, ModelSwapped, SettingsChanged, TrainingStepShown
from explorer.session.results import (NO_MODEL, AblationState, Distribution, GeneratedToken, GradientResult,
                      ModelInfo, NextTokenLogits, PromptContext, ReferenceCurve, ResidualResult)
from explorer.session.attention import AttentionDomain
from explorer.session.generation import GenerationDomain
from explorer.session.interp import Interpretability
from explorer.session.residual import ResidualDomain
from explorer.session.routes import RoutesDomain
from explorer.session.training import TrainingDomain

ProgressFn = Callable[[int, int, str], None]

DEFAULT_SOURCE = "gpt2"
UNTRAINED_HOW_TO = (
    "Load real weights with File → Load GPT-2 small… (needs the network once; it is cached "
    "afterwards), File → Open checkpoint… (a Hugging Face folder, a .safetensors file or a "
    "nanoGPT ckpt.pt), or start with `gpt-explorer --model PATH`."
)


def _model_info(model, *, name: str, trained: bool | None, source: str, note: str = "", provenance: str = "",
                tokenizer: str = "GPT-2 (offline BPE)") -> ModelInfo:
    """`trained` None: weights of unknown provenance, shown as "loaded" (never guessed trained)."""
    unique = list(model.parameters())  # a tied head is one Parameter, listed once
    return ModelInfo(
        name=name,
        trained=bool(trained),
        status={True: "trained", False: "untrained"}.get(trained, "loaded"),
        provenance=provenance,
        tokenizer=tokenizer,
        source=source,
        config=model.config.to_dict(),
        device=str(model.device),
        dtype=str(model.dtype).replace("torch.", ""),
        n_params=sum(p.numel() for p in unique),
        memory_bytes=sum(p.numel() * p.element_size() for p in unique),
        tied=model.config.tie_weights,
        note=note,
    )


class Session:
    """Model + tokenizer + device, swapped atomically; see the module docstring. Ablation,
    attribution, patching and the head census are the `interp` domain (explorer/session/interp.py),
    which takes this core explicitly; the methods of that name here forward to it."""

    def __init__(self, model=None, info: ModelInfo | None = None, device=None):
        self.lock = threading.RLock()
        self.events = EventHub()  # ModelSwapped, AblationChanged, SettingsChanged, TrainingStepShown
        self.model = model
        # Resolved on first use (asking CUDA for devices takes time; a test session never needs it).
        self._device = model.device if model is not None else None
        self._device_request = device
        self.info = info or (NO_MODEL if model is None else _model_info(model, name="model", trained=False, source=""))
        self.version = 0 if model is None else 1
        self._tokenizer = None
        self.swap_pending = threading.Event()  # set while a load/build waits for the lock
        self.interp = Interpretability(self)
        self.attention = AttentionDomain(self)
        self.residual = ResidualDomain(self)
        self.generation = GenerationDomain(self)
        self.training = TrainingDomain(self)
        self.routes = RoutesDomain(self)

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

    @property
    def tokenizer_vocab(self) -> int:
        """Ids the model's tokenizer can produce, without building GPT-2's (0.7 s) when it is that one."""
        return GPT2_VOCAB if self._tokenizer is None else int(self._tokenizer.n_vocab)

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
                self.model, self.info, self._device = model, info, model.device
                self._tokenizer = tokenizer  # None: GPT-2's, made on first use
                version = self.bump_version()
        finally:
            self.swap_pending.clear()
        del old
        self.events.send(ModelSwapped(old=old_info, new=info, version=version))
        if self.device.type == "cuda":
            torch.cuda.empty_cache()
        return info

    # -- getting a model -----------------------------------------------------------------
    def load(self, source, *, device=None, progress: ProgressFn | None = None, cancel=None,
             n_head: int | None = None) -> ModelInfo:
        """Load anything gptcore.load takes; on failure the current model stays. A file that does
        not record its head count needs `n_head` (else HeadCountNeeded): the app never guesses."""
        from gptcore.io.loading import load

        dev = resolve_device(device if device is not None else self.device)
        from gptcore.io.folder_tokenizer import IdTokenizer
        from gptcore.io.loading import load_tokenizer

        model, load_info = load(str(source), device=str(dev), progress=progress, cancel=cancel, n_head=n_head,
                                guess_heads=False)
        name = getattr(load_info, "name", None) or str(source)
        tokenizer, reason = load_tokenizer(load_info)
        if tokenizer is None:
            tokenizer = IdTokenizer(model.config.vocab_size, reason)
        info = _model_info(model, name=name, trained=load_info.trained, provenance=load_info.provenance,
                           source=str(getattr(load_info, "path", source) or source),
                           tokenizer=load_info.tokenizer.describe())
        if load_info.heads == "given":
            info = dataclasses.replace(info, heads_note=(
                f"{model.config.n_head} heads, given by the user: the file does not record its head count"))
        return self._swap(model, info, cancel, tokenizer=tokenizer)

    def build(self, config: dict, init_scheme: str = "gpt2", seed: int | None = None,
              progress: ProgressFn | None = None, *, name: str | None = None, note: str = "",
              device=None, cancel=None) -> ModelInfo:
        """A fresh, untrained model from a config dict; refused before allocating if it won't fit."""
        from gptcore.model.init import INIT_SCHEMES, InitCancelled, init_weights
        from gptcore.io.loading import LoadCancelled
        from gptcore.model.gpt import GPT

        cfg = config if isinstance(config, GPTConfig) else GPTConfig.from_dict(dict(config))
        if init_scheme not in INIT_SCHEMES:
            raise ValueError(f"unknown init scheme {init_scheme!r}; choose one of {', '.join(INIT_SCHEMES)}")
        dev = resolve_device(device if device is not None else self.device)
        self.check_fits(cfg, dev)
        report = progress or (lambda *_: None)
        steps = 1000  # 1% allocating, 98% drawing (by parameters, module by module), 1% swapping in
        report(0, steps, "allocating weights")
        model = GPT.empty(cfg, device=dev)  # allocated, nothing drawn twice

        def drawing(done: int, total: int, message: str) -> None:
            report(10 + (980 * done) // max(total, 1), steps, message)

        try:
            init_weights(model, init_scheme, seed=seed, progress=drawing, cancel=cancel)
        except InitCancelled:
            raise LoadCancelled("build cancelled or superseded by a newer model request; the current model is "
                                "unchanged") from None
        report(990, steps, "ready")
        info = _model_info(model, name=name or f"custom ({cfg.n_layer}L × {cfg.n_embd}, {init_scheme} init)",
                           trained=False, source=f"built: {init_scheme} init, seed {seed}", note=note)
        self._swap(model, info, cancel)
        report(steps, steps, "done")
        return info

    def bump_version(self) -> int:
        """The one place the version moves on (call it holding `lock`, then announce the change
        with the version it returns): every result computed so far is stale, so the domains drop
        what they kept for the old state (the attention prompt state, the head census)."""
        self.version += 1
        self.attention.forget()  # holds the model's keys/values of the last prompt
        self.interp.forget_results()
        return self.version

    def settings_changed(self, what: str) -> int:
        """A setting every computation depends on changed (`what` names it for the views):
        every result so far is stale. Returns the new version."""
        with self.lock:
            version = self.bump_version()
        self.events.send(SettingsChanged(what=what, version=version))
        return version

    def adopt(self, model, *, name: str, source: str, provenance: str = "", tokenizer=None,
              tokenizer_name: str = "GPT-2 (offline BPE)", trained: bool | None = True, note: str = "") -> ModelInfo:
        """Make `model` (built elsewhere: a training run's step, say) the session's model, with
        its own tokenizer (None: GPT-2's). A model swap like load()."""
        info = _model_info(model, name=name, trained=trained, source=source, note=note, provenance=provenance,
                           tokenizer=tokenizer_name)
        return self._swap(model, info, tokenizer=tokenizer)

    def show_training_step(self, state_dict: dict, step: int, name: str | None = None) -> int:
        """Copy the weights of training step `step` into the loaded model (same shapes: a run's
        checkpoint of this model) and tell every view; `name` renames the model for the status
        bar ("trained · step 1,200 of 2,000 · …"). Returns the new version."""
        import dataclasses

        model = self.require_model()
        with self.lock:
            model.load_state_dict(state_dict)
            model.eval()
            if name is not None:
                self.info = dataclasses.replace(self.info, name=name)
            version = self.bump_version()
        self.events.send(TrainingStepShown(step=int(step), version=version))
        return version

    def check_fits(self, cfg: GPTConfig, device: torch.device | None = None) -> None:
        """Raise BuildRefused (with the estimate) when `cfg` would not fit on the device."""
        check_fits(cfg, device or self.device)

    def load_default(self, progress: ProgressFn | None = None, cancel=None) -> ModelInfo:
        """GPT-2 small when it is in the local cache; otherwise the same shape with the gpt2
        init, labelled untrained with how to get real weights. Never touches the network and
        never raises for missing weights, so the app always opens (and opens fast); the
        window offers the download separately, in the background."""
        from gptcore.io.hub import is_hub_cached

        if not is_hub_cached(DEFAULT_SOURCE):
            reason = "is not in the local Hugging Face cache"
        else:
            try:
                return self.load(DEFAULT_SOURCE, progress=progress, cancel=cancel)
            except Exception as exc:  # noqa: BLE001 - any reason (cancelled, corrupt cache) -> fallback
                first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
                reason = f"could not be loaded from the cache ({first})"
        note = f"UNTRAINED — random weights (gpt2 init), not GPT-2's: GPT-2 small {reason}. {UNTRAINED_HOW_TO}"
        return self.build(GPTConfig.preset("gpt2").to_dict(), "gpt2", seed=0, progress=progress,
                          name="GPT-2 small shape, random init", note=note, cancel=cancel)

    @classmethod
    def tiny(cls, seed: int = 0, **config_overrides) -> "Session":
        """A small random model on the CPU for tests: 2 layers, 4 heads, 64 wide, GPT-2 vocab."""
        from gptcore.model.gpt import GPT

        values = dict(n_layer=2, n_head=4, n_embd=64, block_size=128)
        values.update(config_overrides)
        model = GPT(GPTConfig(**values), init="gpt2", seed=seed).eval()
        info = _model_info(model, name="tiny (test)", trained=False, source="Session.tiny")
        return cls(model, info)
